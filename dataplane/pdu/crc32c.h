// CRC32C (Castagnoli) header and data digests, RFC 7143 13.1 and Appendix B, computed by ISA-L.
// The digest goes on the wire least significant byte first (as the reference implementations do).
#pragma once

#include <cstddef>
#include <cstdint>

namespace iscsigw::pdu {

// Running CRC: start with kCrc32cInit, feed pieces, finish with Crc32cFinish.
inline constexpr uint32_t kCrc32cInit = 0xffffffff;
uint32_t Crc32cUpdate(uint32_t crc, const void* data, size_t len);
inline uint32_t Crc32cFinish(uint32_t crc) { return crc ^ 0xffffffff; }
inline uint32_t Crc32c(const void* data, size_t len) {
  return Crc32cFinish(Crc32cUpdate(kCrc32cInit, data, len));
}

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
