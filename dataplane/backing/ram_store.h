// RamStore: a sparse, volatile LUN in process memory.
//
// Memory is kept in fixed 1 MiB chunks, each allocated on the first write that touches it; a chunk
// that was never written reads as zeros (MapRead points at the shared zero buffer for it). Chunk
// pointers sit in 1 GiB leaves (1024 pointers) under a fixed top-level table with room to grow
// (Grow: online resize); leaves and chunks are published with a compare-and-swap on atomic
// pointers, so reactors write concurrently without a lock; the loser of an allocation race frees
// its allocation. Chunks are freed only by the destructor, which is what makes MapRead's zero-copy
// segments valid while the store lives.
//
// Every call completes inline on the caller's thread. The steady state (chunks already present)
// allocates nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/write_gate.h"

namespace iscsigw::backing {

class RamStore final : public BackingStore {
 public:
  static constexpr uint64_t kChunkSize = uint64_t{1} << 20;

  explicit RamStore(uint64_t size_bytes);
  ~RamStore() override;
  RamStore(const RamStore&) = delete;
  RamStore& operator=(const RamStore&) = delete;

  std::string_view kind() const override { return "ram"; }
  uint64_t size_bytes() const override { return size_bytes_.load(std::memory_order_relaxed); }
  bool persistent() const override { return false; }

  // One piece per chunk touched (zero buffer for unwritten chunks).
  size_t MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) override;
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override;
  // Completes with ENOMEM when a chunk cannot be allocated.
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override;
  void Flush(unsigned slot, IoCompletion done) override;
  // Atomic with respect to every other write through the gate; every chunk the range needs is
  // allocated before a byte is copied, so ENOMEM leaves the range as it was.
  AtomicLimits atomic_limits() const override { return {kAtomicWriteMaxBytes, 0}; }
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   IoCompletion done) override;
  // Up to max_size_bytes() (ENOSPC beyond).
  int Grow(uint64_t new_size_bytes) override;
  uint64_t max_size_bytes() const { return num_leaves_ * kLeafChunks * kChunkSize; }

  // Thin provisioning at chunk granularity (ram_store_provisioning.cc). A chunk is mapped from
  // the write that allocates it until an Unmap covers all of it; Unmap then releases its pages to
  // the kernel (madvise MADV_DONTNEED) but keeps the allocation, so zero-copy segments that MapRead
  // handed out earlier stay valid (they read zeros, or the chunk's new data once it is written
  // again) and the memory never holds another chunk's data. A partly covered chunk is zeroed in
  // place and stays mapped. Unmap and ReadModifyWrite exclude writes through gate_.
  bool thin_provisioned() const override { return true; }
  uint64_t unmap_granularity() const override { return kChunkSize; }
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override;
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       IoCompletion done) override;
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override;

  // Bytes of chunk memory in use: grows on writes to unallocated or unmapped chunks, shrinks when
  // Unmap releases a whole chunk.
  uint64_t allocated_bytes() const override {
    return allocated_bytes_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr uint64_t kLeafChunks = 1024;
  // Top-level room beyond the initial size: a store can grow to at least 2 TiB.
  static constexpr uint64_t kMinLeaves = 2048;
  using Leaf = std::atomic<uint8_t*>[kLeafChunks];

  uint64_t ChunkLen(uint64_t index) const;
  // The chunk at index, or nullptr when it was never written.
  uint8_t* Chunk(uint64_t index) const;
  // Returns the chunk, allocating it (and its leaf) if needed; nullptr when out of memory.
  uint8_t* GetOrAllocate(uint64_t index);
  // Copies buf to offset, allocating (or re-mapping) chunks; 0 or ENOMEM. Caller holds the gate.
  int CopyIn(uint64_t offset, std::span<const uint8_t> buf);
  // Provisioning state of one chunk; Remap marks a chunk that a write touches as mapped again.
  bool ChunkMapped(uint64_t index) const;
  void Remap(uint64_t index);

  std::atomic<uint64_t> size_bytes_;
  const uint64_t num_leaves_;
  const std::unique_ptr<std::atomic<Leaf*>[]> leaves_;  // written by CAS, any thread
  std::atomic<uint64_t> allocated_bytes_{0};

  WriteGate gate_;
  // One bit per chunk, set while an allocated chunk is unmapped. Created by the first Unmap (under
  // the gate's exclusive lock) and published through unmapped_; freed by the destructor.
  std::unique_ptr<std::atomic<uint64_t>[]> unmapped_owner_;
  std::atomic<std::atomic<uint64_t>*> unmapped_{nullptr};
};

std::unique_ptr<RamStore> NewRamStore(uint64_t size_bytes);

}  // namespace iscsigw::backing
