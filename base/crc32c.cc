#include "base/crc32c.h"

#include <isa-l/crc.h>

namespace iscsigw {

uint32_t Crc32cUpdate(uint32_t crc, const void* data, size_t len) {
  // ISA-L's crc32_iscsi neither inverts its input nor its output: the running value is the raw
  // register, so callers start from all ones and invert at the end.
  return crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), static_cast<int>(len),
                     crc);
}

}  // namespace iscsigw
