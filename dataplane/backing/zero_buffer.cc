#include "dataplane/backing/zero_buffer.h"

namespace iscsigw::backing {
namespace {

// Zero-initialised static storage lives in .bss: it costs no file size and its pages are only
// materialised (as the shared zero page) when read.
alignas(4096) uint8_t g_zero_buffer[kZeroBufferSize];

}  // namespace

const uint8_t* ZeroBuffer() { return g_zero_buffer; }

}  // namespace iscsigw::backing
