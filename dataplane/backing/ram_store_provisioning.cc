// RamStore thin provisioning (Unmap, GetProvisioning) and ReadModifyWrite. See ram_store.h for the
// memory-safety argument: chunk memory is released to the kernel but never freed or reused for
// another chunk while the store lives.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "dataplane/backing/ram_store.h"

namespace iscsigw::backing {
namespace {

// Zeros [p, p+len). Whole pages inside the range go back to the kernel (the next touch maps a fresh
// zero page), the ragged ends are cleared by hand. Safe on malloc'd memory: only pages wholly
// inside the range are dropped, and the allocator keeps no metadata inside an allocation.
void ZeroAndRelease(uint8_t* p, uint64_t len) {
  static const uintptr_t kPage = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + len;
  const uintptr_t first = (begin + kPage - 1) & ~(kPage - 1);
  const uintptr_t last = end & ~(kPage - 1);
  if (first >= last ||
      ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) {
    std::memset(p, 0, len);
    return;
  }
  std::memset(p, 0, first - begin);
  std::memset(reinterpret_cast<uint8_t*>(last), 0, end - last);
}

void Nothing(void*, int) {}

}  // namespace

bool RamStore::ChunkMapped(uint64_t index) const {
  if (Chunk(index) == nullptr) return false;
  const std::atomic<uint64_t>* bits = unmapped_.load(std::memory_order_acquire);
  return bits == nullptr ||
         (bits[index / 64].load(std::memory_order_relaxed) & (uint64_t{1} << (index % 64))) == 0;
}

void RamStore::Remap(uint64_t index) {
  std::atomic<uint64_t>* bits = unmapped_.load(std::memory_order_acquire);
  if (bits == nullptr) return;  // nothing was ever unmapped: one load on the write path
  const uint64_t mask = uint64_t{1} << (index % 64);
  std::atomic<uint64_t>& word = bits[index / 64];
  if ((word.load(std::memory_order_relaxed) & mask) == 0) return;
  if ((word.fetch_and(~mask, std::memory_order_acq_rel) & mask) != 0) {
    allocated_bytes_.fetch_add(ChunkLen(index), std::memory_order_relaxed);
  }
}

void RamStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  (void)slot;
  gate_.LockExclusive();
  std::atomic<uint64_t>* bits = unmapped_.load(std::memory_order_relaxed);
  if (bits == nullptr) {
    const uint64_t words = (max_size_bytes() / kChunkSize + 63) / 64;
    unmapped_owner_.reset(new (std::nothrow) std::atomic<uint64_t>[words]);
    if (unmapped_owner_ == nullptr) {
      gate_.UnlockExclusive();
      return done(ENOMEM);
    }
    for (uint64_t i = 0; i < words; ++i) unmapped_owner_[i].store(0, std::memory_order_relaxed);
    bits = unmapped_owner_.get();
    unmapped_.store(bits, std::memory_order_release);
  }
  const uint64_t end = std::min(offset + len, size_bytes());
  for (uint64_t pos = offset; pos < end;) {
    const uint64_t index = pos / kChunkSize;
    const uint64_t in_chunk = pos % kChunkSize;
    const uint64_t piece = std::min(end - pos, kChunkSize - in_chunk);
    pos += piece;
    if (!ChunkMapped(index)) continue;  // reads as zeros already
    uint8_t* chunk = Chunk(index);
    if (in_chunk == 0 && piece == ChunkLen(index)) {
      // The whole chunk: release its memory to the kernel.
      ZeroAndRelease(chunk, ChunkLen(index));
      bits[index / 64].fetch_or(uint64_t{1} << (index % 64), std::memory_order_acq_rel);
      allocated_bytes_.fetch_sub(ChunkLen(index), std::memory_order_relaxed);
    } else {
      ZeroAndRelease(chunk + in_chunk, piece);
    }
  }
  gate_.UnlockExclusive();
  done(0);
}

void RamStore::GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                               IoCompletion done) {
  (void)slot;
  const uint64_t end = std::min(offset + max_len, size_bytes());
  const bool mapped = ChunkMapped(offset / kChunkSize);
  uint64_t pos = offset;
  while (pos < end && ChunkMapped(pos / kChunkSize) == mapped) {
    pos = std::min(end, (pos / kChunkSize + 1) * kChunkSize);
  }
  *out = Extent{mapped, pos - offset};
  done(0);
}

void RamStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                               ModifyFn modify, IoCompletion done) {
  (void)fua;
  gate_.LockExclusive();
  Read(slot, offset, scratch, IoCompletion{Nothing, nullptr});  // completes inline
  const std::span<const uint8_t> out = modify.fn(modify.ctx, scratch);
  const int err = out.empty() ? 0 : CopyIn(offset, out.first(scratch.size()));
  gate_.UnlockExclusive();
  done(err);
}

}  // namespace iscsigw::backing
