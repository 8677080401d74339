// Views and encoders for the 48-byte Basic Header Segment (RFC 7143 11.2). A Bhs is a plain byte
// array; accessors read and write fields at their RFC offsets. No allocation, no I/O.
// Field names follow RFC 7143 section 11; offsets are commented where the field is opcode-specific.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "base/endian.h"
#include "dataplane/pdu/opcodes.h"

namespace iscsigw::pdu {

class BhsView {
 public:
  explicit BhsView(const uint8_t* p) : p_(p) {}
  const uint8_t* data() const { return p_; }

  Opcode opcode() const { return static_cast<Opcode>(p_[0] & 0x3f); }
  uint8_t raw_opcode() const { return p_[0] & 0x3f; }
  bool immediate() const { return (p_[0] & 0x40) != 0; }
  uint8_t flags() const { return p_[1]; }
  bool final_bit() const { return (p_[1] & 0x80) != 0; }
  uint32_t total_ahs_bytes() const { return uint32_t{p_[4]} * 4; }
  uint32_t data_segment_length() const { return LoadBe24(p_ + 5); }
  uint64_t lun_raw() const { return LoadBe64(p_ + 8); }
  uint32_t itt() const { return LoadBe32(p_ + 16); }
  uint32_t u32(size_t off) const { return LoadBe32(p_ + off); }
  uint16_t u16(size_t off) const { return LoadBe16(p_ + off); }
  uint8_t u8(size_t off) const { return p_[off]; }

  // SCSI Command (11.3)
  bool read_bit() const { return (p_[1] & 0x40) != 0; }
  bool write_bit() const { return (p_[1] & 0x20) != 0; }
  uint32_t expected_data_transfer_length() const { return u32(20); }
  uint32_t cmd_sn() const { return u32(24); }
  uint32_t exp_stat_sn() const { return u32(28); }
  const uint8_t* cdb() const { return p_ + 32; }

  // Data-Out (11.8) / NOP-Out / Text: Target Transfer Tag at 20
  uint32_t ttt() const { return u32(20); }
  uint32_t data_sn() const { return u32(36); }
  uint32_t buffer_offset() const { return u32(40); }

  // Task management (11.5)
  uint8_t tmf_function() const { return p_[1] & 0x7f; }
  uint32_t referenced_task_tag() const { return u32(20); }
  uint32_t ref_cmd_sn() const { return u32(32); }

  // Login (11.12)
  bool transit() const { return (p_[1] & 0x80) != 0; }
  bool cont() const { return (p_[1] & 0x40) != 0; }
  uint8_t csg() const { return (p_[1] >> 2) & 0x3; }
  uint8_t nsg() const { return p_[1] & 0x3; }
  uint8_t version_max() const { return p_[2]; }
  uint8_t version_min() const { return p_[3]; }
  const uint8_t* isid() const { return p_ + 8; }
  uint16_t tsih() const { return u16(14); }
  uint16_t cid() const { return u16(20); }

  // Logout (11.14)
  uint8_t logout_reason() const { return p_[1] & 0x7f; }

 private:
  const uint8_t* p_;
};

// A BHS being built for sending. Starts zeroed.
struct Bhs {
  std::array<uint8_t, kBhsLength> b{};

  void Clear() { b.fill(0); }
  void SetOpcode(Opcode op) { b[0] = static_cast<uint8_t>(op); }
  void SetFlags(uint8_t f) { b[1] = f; }
  void SetDataSegmentLength(uint32_t len) { StoreBe24(&b[5], len); }
  void SetLunRaw(uint64_t lun) { StoreBe64(&b[8], lun); }
  void SetItt(uint32_t itt) { StoreBe32(&b[16], itt); }
  void Set8(size_t off, uint8_t v) { b[off] = v; }
  void Set16(size_t off, uint16_t v) { StoreBe16(&b[off], v); }
  void Set32(size_t off, uint32_t v) { StoreBe32(&b[off], v); }
  // The common trailer of target PDUs: StatSN at 24, ExpCmdSN at 28, MaxCmdSN at 32.
  void SetSn(uint32_t stat_sn, uint32_t exp_cmd_sn, uint32_t max_cmd_sn) {
    Set32(24, stat_sn);
    Set32(28, exp_cmd_sn);
    Set32(32, max_cmd_sn);
  }
  uint8_t* data() { return b.data(); }
  const uint8_t* data() const { return b.data(); }
};

// Serial number arithmetic, RFC 1982 with SERIAL_BITS = 32 (RFC 7143 4.2.2.1).
inline bool SnLess(uint32_t a, uint32_t b) {
  return a != b && ((a < b && b - a < (1u << 31)) || (a > b && a - b > (1u << 31)));
}
inline bool SnLessEq(uint32_t a, uint32_t b) { return a == b || SnLess(a, b); }

// Data segments are padded to a multiple of 4 bytes (RFC 7143 11.2.1.2 / 11.2.3).
inline constexpr uint32_t PadLength(uint32_t len) { return (4 - (len & 3)) & 3; }

// LUN field <-> LUN number (SAM-5 4.7: peripheral device addressing for < 256, flat space above).
inline uint64_t EncodeLun(uint64_t lun) {
  if (lun < 256) return lun << 48;
  return ((0x4000 | (lun & 0x3fff)) & 0xffff) << 48;
}
inline uint64_t DecodeLun(uint64_t raw) {
  const uint16_t first = static_cast<uint16_t>(raw >> 48);
  switch (first >> 14) {
    case 0:  // peripheral device addressing: bus 0 only
      return (first & 0x3f00) ? ~uint64_t{0} : (first & 0xff);
    case 1:  // flat space addressing
      return first & 0x3fff;
    default:
      return ~uint64_t{0};  // unsupported addressing method: no such LUN
  }
}

}  // namespace iscsigw::pdu
