#include "dataplane/pdu/text.h"

#include <algorithm>
#include <array>
#include <utility>

namespace iscsigw::pdu {
namespace {

// RFC 7143 6.1: key names use letters, digits, '.', '-', '+', '@', '_'; private extension keys
// start "X-" (13.22) and public extension keys "X#" (6.1, 13.26 X#NodeArchitecture), hence '#'.
bool IsKeyChar(uint8_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '+' || c == '@' || c == '_' || c == '#';
}

// Values are UTF-8 text (RFC 7143 6.1: iSCSI names and aliases are UTF-8, 4.2.7.2). Control
// characters never belong in a value; reject them and malformed UTF-8 sequences.
bool IsValidValue(std::string_view v) {
  size_t i = 0;
  while (i < v.size()) {
    const auto c = static_cast<uint8_t>(v[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return false;
      ++i;
      continue;
    }
    size_t extra;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      extra = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= v.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<uint8_t>(v[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and out-of-range code points are invalid UTF-8 (RFC 3629).
    static constexpr std::array<uint32_t, 4> kMin = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

Status CheckValueLength(std::string_view key, std::string_view value) {
  if (IsLongValueKey(key)) {
    if (value.size() > kMaxLongValueBytes) {
      return InvalidArgument("text key " + std::string(key) + ": value longer than " +
                             std::to_string(kMaxLongValueBytes) + " bytes");
    }
    return Status::Ok();
  }
  // RFC 7143 6.1: the 255-byte limit applies to an individual value; in a list (5.1
  // list-of-values) each comma-separated element is one value.
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    const size_t end = comma == std::string_view::npos ? value.size() : comma;
    if (end - start > kMaxValueBytes) {
      return InvalidArgument("text key " + std::string(key) + ": value longer than " +
                             std::to_string(kMaxValueBytes) + " bytes");
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (value.size() > kMaxLongValueBytes) {
    return InvalidArgument("text key " + std::string(key) + ": value list too long");
  }
  return Status::Ok();
}

}  // namespace

bool IsLongValueKey(std::string_view key) {
  // RFC 7143 12.1.3 (CHAP challenge and response), 12.1.2 (SRP), 12.1.1 (Kerberos): binary
  // values encoded in hex or base64 (5.1 binary-value), which exceed the simple-value limit.
  static constexpr std::array<std::string_view, 9> kLong = {
      "CHAP_C", "CHAP_R", "SRP_s", "SRP_A", "SRP_B", "SRP_M", "SRP_HM", "KRB_AP_REQ", "KRB_AP_REP"};
  return std::find(kLong.begin(), kLong.end(), key) != kLong.end();
}

Result<std::vector<KeyValue>> ParseText(std::span<const uint8_t> data) {
  std::vector<KeyValue> kvs;
  const std::string_view all(reinterpret_cast<const char*>(data.data()), data.size());
  size_t pos = 0;
  while (pos < all.size()) {
    size_t nul = all.find('\0', pos);
    // RFC 7143 6.1 requires a NUL after every pair, including the last. A missing final NUL is
    // tolerated: the data segment length delimits the last pair unambiguously.
    if (nul == std::string_view::npos) nul = all.size();
    const std::string_view pair = all.substr(pos, nul - pos);
    pos = nul + 1;
    // Consecutive NULs (an empty pair) carry nothing; some initiators pad with them.
    if (pair.empty()) continue;

    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument("text pair without '=': " +
                             std::string(pair.substr(0, std::min<size_t>(pair.size(), 64))));
    }
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = pair.substr(eq + 1);
    if (key.empty()) return InvalidArgument("text pair with an empty key");
    if (key.size() > kMaxKeyBytes) {
      return InvalidArgument("text key longer than 63 bytes: " + std::string(key.substr(0, 64)));
    }
    if (!std::all_of(key.begin(), key.end(), [](char c) { return IsKeyChar(c); })) {
      return InvalidArgument("text key with invalid characters");
    }
    if (Status s = CheckValueLength(key, value); !s.ok()) return s;
    if (!IsValidValue(value)) {
      return InvalidArgument("text key " + std::string(key) + ": value is not printable UTF-8");
    }
    // RFC 7143 6.2: a key is negotiated or declared at most once; a repeat within one request
    // is a protocol error (the caller rejects the login or the text request).
    for (const KeyValue& kv : kvs) {
      if (kv.key == key) return InvalidArgument("duplicate text key " + std::string(key));
    }
    kvs.push_back(KeyValue{std::string(key), std::string(value)});
  }
  return kvs;
}

TextAccumulator::TextAccumulator(size_t max_bytes) : max_bytes_(max_bytes) {}

Status TextAccumulator::Append(std::span<const uint8_t> data) {
  if (data.size() > max_bytes_ - buf_.size()) {
    return Status(StatusCode::kResourceExhausted,
                  "text request sequence exceeds " + std::to_string(max_bytes_) + " bytes");
  }
  buf_.insert(buf_.end(), data.begin(), data.end());
  return Status::Ok();
}

Result<std::vector<KeyValue>> TextAccumulator::Take() {
  std::vector<uint8_t> buf = std::move(buf_);
  buf_.clear();
  return ParseText(buf);
}

void TextAccumulator::Clear() { buf_.clear(); }

void AppendKey(std::string_view key, std::string_view value, std::vector<uint8_t>* out) {
  out->reserve(out->size() + key.size() + value.size() + 2);
  out->insert(out->end(), key.begin(), key.end());
  out->push_back('=');
  out->insert(out->end(), value.begin(), value.end());
  out->push_back('\0');
}

void EncodeText(const std::vector<KeyValue>& kvs, std::vector<uint8_t>* out) {
  for (const KeyValue& kv : kvs) AppendKey(kv.key, kv.value, out);
}

}  // namespace iscsigw::pdu
