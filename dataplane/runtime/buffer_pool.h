// Per-reactor pool of data buffers in power-of-two size classes (4 KiB .. 16 MiB), 4 KiB aligned so
// a file store can use them for direct I/O. Steady state takes no allocation: a Put() buffer is the
// next Get() of its class. Each class caches a bounded number of bytes; past that, Put() frees.
// Threading: owned by one reactor; used only on its thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace iscsigw::runtime {

class BufferPool {
 public:
  static constexpr unsigned kMinShift = 12;
  static constexpr unsigned kMaxShift = 24;
  static constexpr uint32_t kMaxBuffer = 1u << kMaxShift;

  explicit BufferPool(size_t cached_bytes_per_class = 32u << 20);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least len bytes (len <= kMaxBuffer), its capacity in *cap; nullptr when memory
  // is exhausted or len is too large.
  uint8_t* Get(uint32_t len, uint32_t* cap);
  void Put(uint8_t* buf, uint32_t cap);

  uint64_t allocations() const { return allocations_; }

 private:
  static unsigned ClassOf(uint32_t len);
  static constexpr unsigned kClasses = kMaxShift - kMinShift + 1;
  std::array<std::vector<uint8_t*>, kClasses> free_;
  size_t cached_bytes_per_class_;
  uint64_t allocations_ = 0;
};

}  // namespace iscsigw::runtime
