// CRC32C (Castagnoli) header and data digests, RFC 7143 13.1 and Appendix B (base/crc32c.h).
// The digest goes on the wire least significant byte first (as the reference implementations do).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/crc32c.h"

namespace iscsigw::pdu {

using iscsigw::Crc32c;
using iscsigw::Crc32cFinish;
using iscsigw::Crc32cUpdate;
using iscsigw::kCrc32cInit;

inline void StoreDigest(uint8_t* p, uint32_t crc) {
  p[0] = static_cast<uint8_t>(crc);
  p[1] = static_cast<uint8_t>(crc >> 8);
  p[2] = static_cast<uint8_t>(crc >> 16);
  p[3] = static_cast<uint8_t>(crc >> 24);
}
inline uint32_t LoadDigest(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

}  // namespace iscsigw::pdu
