// NullStore: a LUN of a fixed size that reads zeros and drops writes. Used for benchmarks and
// protocol tests. Every call completes inline on the caller's thread; no allocation, no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "dataplane/backing/backing_store.h"

namespace iscsigw::backing {

class NullStore final : public BackingStore {
 public:
  explicit NullStore(uint64_t size_bytes) : size_bytes_(size_bytes) {}

  std::string_view kind() const override { return "null"; }
  uint64_t size_bytes() const override { return size_bytes_.load(std::memory_order_relaxed); }
  bool persistent() const override { return false; }

  // Points every piece (<= kZeroBufferSize bytes each) at the shared zero buffer.
  size_t MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) override;
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override;
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override;
  void Flush(unsigned slot, IoCompletion done) override;
  // Writes nothing, whole.
  AtomicLimits atomic_limits() const override { return {kAtomicWriteMaxBytes, 0}; }
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   IoCompletion done) override {
    Write(slot, offset, buf, fua, done);
  }

  // Nothing is stored, so every block is deallocated and reads as zeros (LBPRZ).
  bool thin_provisioned() const override { return true; }
  uint64_t allocated_bytes() const override { return 0; }
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override;
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       IoCompletion done) override;
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override;
  int Grow(uint64_t new_size_bytes) override {
    size_bytes_.store(new_size_bytes, std::memory_order_relaxed);
    return 0;
  }

 private:
  std::atomic<uint64_t> size_bytes_;
};

std::unique_ptr<NullStore> NewNullStore(uint64_t size_bytes);

}  // namespace iscsigw::backing
