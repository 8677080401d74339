// CRC32C (Castagnoli), computed by ISA-L: the iSCSI header and data digests (pdu/crc32c.h) and the
// checksums of records the stores write (the file store's atomic write journal). Pure functions,
// any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iscsigw {

// Running CRC: start with kCrc32cInit, feed pieces, finish with Crc32cFinish.
inline constexpr uint32_t kCrc32cInit = 0xffffffff;
uint32_t Crc32cUpdate(uint32_t crc, const void* data, size_t len);
inline uint32_t Crc32cFinish(uint32_t crc) { return crc ^ 0xffffffff; }
inline uint32_t Crc32c(const void* data, size_t len) {
  return Crc32cFinish(Crc32cUpdate(kCrc32cInit, data, len));
}

}  // namespace iscsigw
