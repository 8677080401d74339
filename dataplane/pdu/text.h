// Text key=value codec for Login and Text PDU data segments (RFC 7143 5.1, 6.1, 6.2).
//
// A login or text request may be split over several PDUs with the C (continue) bit set; a key=value
// pair may span a PDU boundary (RFC 7143 11.10.2, 11.12.2). TextAccumulator joins the data segments
// of one such sequence, bounded by max_bytes, and parses them once the final PDU (C bit clear)
// arrived.
//
// Pure codec: no I/O, no shared state. One TextAccumulator per connection, used by the thread that
// owns the connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace iscsigw::pdu {

// RFC 7143 6.1: key names are at most 63 bytes; values at most 255 bytes, except the values the
// RFC lets be long (binary/large values such as CHAP_C, CHAP_R, CHAP_N: up to 8192 bytes, see
// kMaxLongValueBytes and IsLongValueKey).
inline constexpr size_t kMaxKeyBytes = 63;
inline constexpr size_t kMaxValueBytes = 255;
inline constexpr size_t kMaxLongValueBytes = 8192;

struct KeyValue {
  std::string key;
  std::string value;

  friend bool operator==(const KeyValue&, const KeyValue&) = default;
};

// True for the keys whose values may exceed 255 bytes (up to kMaxLongValueBytes).
bool IsLongValueKey(std::string_view key);

// Accumulates the data segments of a login/text request sequence (C bit continuation,
// RFC 7143 6.2 / 11.10.2).
class TextAccumulator {
 public:
  explicit TextAccumulator(size_t max_bytes = 64 * 1024);

  // Appends one PDU's data segment. Returns an error Status (kResourceExhausted) if the total would
  // exceed max_bytes; the accumulator is left unchanged then.
  Status Append(std::span<const uint8_t> data);

  // Parses everything appended so far into keys (call when the PDU without C bit arrived) and
  // clears, whether or not parsing succeeded. Errors (kInvalidArgument): a pair without '=', an
  // empty key, a key longer than 63 bytes, a value longer than 255 bytes (8192 for long-value
  // keys), a duplicate key (RFC 7143 6.2: a key is negotiated or declared at most once), a key with
  // characters outside RFC 7143 6.1's key alphabet, a NUL inside a value, or a value with control
  // characters. Trailing NUL padding is ignored. A missing NUL after the last pair is tolerated
  // (RFC 7143 6.1 requires the terminator, but the final pair is unambiguous at the end of the
  // data segment; some initiators omit it).
  Result<std::vector<KeyValue>> Take();

  void Clear();

  size_t size() const { return buf_.size(); }
  bool empty() const { return buf_.empty(); }

 private:
  size_t max_bytes_;
  std::vector<uint8_t> buf_;
};

// Parses one complete text data segment (the same rules as TextAccumulator::Take).
Result<std::vector<KeyValue>> ParseText(std::span<const uint8_t> data);

// Encodes pairs as "key=value\0..." appended to out.
void EncodeText(const std::vector<KeyValue>& kvs, std::vector<uint8_t>* out);
void AppendKey(std::string_view key, std::string_view value, std::vector<uint8_t>* out);

}  // namespace iscsigw::pdu
