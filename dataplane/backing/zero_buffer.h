// One process-wide, never-written buffer of zeros. Stores hand out pointers into it for zero-copy
// reads of blocks that hold no data (NullStore, unwritten RamStore chunks). Any thread may read it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iscsigw::backing {

inline constexpr size_t kZeroBufferSize = size_t{1} << 20;  // 1 MiB

// kZeroBufferSize bytes of zeros, page aligned, valid for the life of the process.
const uint8_t* ZeroBuffer();

}  // namespace iscsigw::backing
