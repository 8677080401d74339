#include "dataplane/backing/ram_store.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "dataplane/backing/zero_buffer.h"

namespace iscsigw::backing {

static_assert(RamStore::kChunkSize <= kZeroBufferSize,
              "an unwritten chunk must map onto one piece of the zero buffer");

RamStore::RamStore(uint64_t size_bytes)
    : size_bytes_(size_bytes),
      num_leaves_(std::max<uint64_t>(
          kMinLeaves, (size_bytes + kLeafChunks * kChunkSize - 1) / (kLeafChunks * kChunkSize))),
      leaves_(new std::atomic<Leaf*>[num_leaves_]) {
  for (uint64_t i = 0; i < num_leaves_; ++i) leaves_[i].store(nullptr, std::memory_order_relaxed);
}

RamStore::~RamStore() {
  for (uint64_t i = 0; i < num_leaves_; ++i) {
    Leaf* leaf = leaves_[i].load(std::memory_order_acquire);
    if (leaf == nullptr) continue;
    for (auto& c : *leaf) std::free(c.load(std::memory_order_acquire));
    delete[] leaf;
  }
}

uint64_t RamStore::ChunkLen(uint64_t index) const {
  return std::min(kChunkSize, size_bytes() - index * kChunkSize);
}

uint8_t* RamStore::Chunk(uint64_t index) const {
  const Leaf* leaf = leaves_[index / kLeafChunks].load(std::memory_order_acquire);
  return leaf == nullptr ? nullptr : (*leaf)[index % kLeafChunks].load(std::memory_order_acquire);
}

uint8_t* RamStore::GetOrAllocate(uint64_t index) {
  std::atomic<Leaf*>& top = leaves_[index / kLeafChunks];
  Leaf* leaf = top.load(std::memory_order_acquire);
  if (leaf == nullptr) {
    // Once per GiB of address space written: the leaf of chunk pointers.
    Leaf* fresh_leaf = new (std::nothrow) Leaf[1];
    if (fresh_leaf == nullptr) return nullptr;
    for (auto& c : *fresh_leaf) c.store(nullptr, std::memory_order_relaxed);
    if (top.compare_exchange_strong(leaf, fresh_leaf, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      leaf = fresh_leaf;
    } else {
      delete[] fresh_leaf;
    }
  }
  std::atomic<uint8_t*>& slot = (*leaf)[index % kLeafChunks];
  uint8_t* chunk = slot.load(std::memory_order_acquire);
  if (chunk != nullptr) return chunk;
  // calloc: large zeroed allocations come straight from mmap, so untouched pages of a chunk stay
  // unbacked until written. Always a whole chunk, so that a grown store can use all of it.
  auto* fresh = static_cast<uint8_t*>(std::calloc(1, kChunkSize));
  if (fresh == nullptr) return nullptr;
  uint8_t* expected = nullptr;
  if (slot.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
    allocated_bytes_.fetch_add(ChunkLen(index), std::memory_order_relaxed);
    return fresh;
  }
  std::free(fresh);  // another reactor won the race; use its chunk
  return expected;
}

int RamStore::Grow(uint64_t new_size_bytes) {
  const uint64_t old = size_bytes();
  if (new_size_bytes < old) return EINVAL;
  if (new_size_bytes > max_size_bytes()) return ENOSPC;
  // A partial last chunk already holds a whole chunk of memory; count what it now covers.
  if (old % kChunkSize != 0 && Chunk(old / kChunkSize) != nullptr) {
    const uint64_t before = old % kChunkSize;
    const uint64_t after = std::min(kChunkSize, new_size_bytes - (old / kChunkSize) * kChunkSize);
    allocated_bytes_.fetch_add(after - before, std::memory_order_relaxed);
  }
  size_bytes_.store(new_size_bytes, std::memory_order_release);
  return 0;
}

size_t RamStore::MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) {
  const uint64_t size = size_bytes();
  if (len == 0 || offset > size || len > size - offset) return 0;
  const uint64_t first = offset / kChunkSize;
  const uint64_t last = (offset + len - 1) / kChunkSize;
  if (last - first + 1 > segs.size()) return 0;
  size_t n = 0;
  uint64_t pos = offset;
  const uint64_t end = offset + len;
  while (pos < end) {
    const uint64_t index = pos / kChunkSize;
    const uint64_t in_chunk = pos % kChunkSize;
    const uint64_t piece = std::min(end - pos, kChunkSize - in_chunk);
    const uint8_t* chunk = Chunk(index);
    const uint8_t* base = chunk != nullptr ? chunk + in_chunk : ZeroBuffer();
    segs[n++] = Segment{base, static_cast<uint32_t>(piece)};
    pos += piece;
  }
  return n;
}

void RamStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) {
  (void)slot;
  uint64_t pos = offset;
  size_t copied = 0;
  while (copied < buf.size()) {
    const uint64_t index = pos / kChunkSize;
    const uint64_t in_chunk = pos % kChunkSize;
    const size_t piece =
        static_cast<size_t>(std::min<uint64_t>(buf.size() - copied, kChunkSize - in_chunk));
    const uint8_t* chunk = Chunk(index);
    if (chunk != nullptr) {
      std::memcpy(buf.data() + copied, chunk + in_chunk, piece);
    } else {
      std::memset(buf.data() + copied, 0, piece);
    }
    copied += piece;
    pos += piece;
  }
  done(0);
}

void RamStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                     IoCompletion done) {
  (void)fua;  // memory is as stable as this store gets
  int err = 0;
  if (gate_.TryEnterShared(slot)) {
    err = CopyIn(offset, buf);
    gate_.ExitShared(slot);
  } else {  // an Unmap or ReadModifyWrite is running: wait for it (WriteGate slow path)
    std::lock_guard<std::mutex> lock(gate_.mutex());
    err = CopyIn(offset, buf);
  }
  done(err);
}

int RamStore::CopyIn(uint64_t offset, std::span<const uint8_t> buf) {
  uint64_t pos = offset;
  size_t copied = 0;
  while (copied < buf.size()) {
    const uint64_t index = pos / kChunkSize;
    const uint64_t in_chunk = pos % kChunkSize;
    const size_t piece =
        static_cast<size_t>(std::min<uint64_t>(buf.size() - copied, kChunkSize - in_chunk));
    uint8_t* chunk = GetOrAllocate(index);
    if (chunk == nullptr) return ENOMEM;
    Remap(index);
    std::memcpy(chunk + in_chunk, buf.data() + copied, piece);
    copied += piece;
    pos += piece;
  }
  return 0;
}

void RamStore::WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                           IoCompletion done) {
  (void)slot;
  (void)fua;
  gate_.LockExclusive();
  int err = 0;
  if (!buf.empty()) {
    for (uint64_t index = offset / kChunkSize; index <= (offset + buf.size() - 1) / kChunkSize;
         ++index) {
      if (GetOrAllocate(index) == nullptr) {
        err = ENOMEM;
        break;
      }
    }
  }
  if (err == 0) err = CopyIn(offset, buf);
  gate_.UnlockExclusive();
  done(err);
}

void RamStore::Flush(unsigned slot, IoCompletion done) {
  (void)slot;
  done(0);
}

std::unique_ptr<RamStore> NewRamStore(uint64_t size_bytes) {
  return std::make_unique<RamStore>(size_bytes);
}

}  // namespace iscsigw::backing
