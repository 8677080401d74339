#include "dataplane/backing/null_store.h"

#include <algorithm>
#include <cstring>

#include "dataplane/backing/zero_buffer.h"

namespace iscsigw::backing {

size_t NullStore::MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) {
  (void)offset;
  const uint64_t pieces = (len + kZeroBufferSize - 1) / kZeroBufferSize;
  if (len == 0 || pieces > segs.size()) return 0;
  const uint8_t* zeros = ZeroBuffer();
  for (uint64_t i = 0; i < pieces; ++i) {
    const uint64_t n = std::min<uint64_t>(len - i * kZeroBufferSize, kZeroBufferSize);
    segs[i] = Segment{zeros, static_cast<uint32_t>(n)};
  }
  return static_cast<size_t>(pieces);
}

void NullStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) {
  (void)slot;
  (void)offset;
  if (!buf.empty()) std::memset(buf.data(), 0, buf.size());
  done(0);
}

void NullStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                      IoCompletion done) {
  (void)slot;
  (void)offset;
  (void)buf;
  (void)fua;
  done(0);
}

void NullStore::Flush(unsigned slot, IoCompletion done) {
  (void)slot;
  done(0);
}

void NullStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  (void)slot;
  (void)offset;
  (void)len;
  done(0);
}

void NullStore::GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                                IoCompletion done) {
  (void)slot;
  *out = Extent{false, std::min(max_len, size_bytes() - offset)};
  done(0);
}

void NullStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch,
                                bool fua, ModifyFn modify, IoCompletion done) {
  (void)slot;
  (void)offset;
  (void)fua;
  if (!scratch.empty()) std::memset(scratch.data(), 0, scratch.size());
  (void)modify.fn(modify.ctx, scratch);  // the result is dropped like every write
  done(0);
}

std::unique_ptr<NullStore> NewNullStore(uint64_t size_bytes) {
  return std::make_unique<NullStore>(size_bytes);
}

}  // namespace iscsigw::backing
