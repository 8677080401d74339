// Per-reactor pool of data buffers in power-of-two size classes (4 KiB .. 16 MiB), 4 KiB aligned so
// a file store can use them for direct I/O. Steady state takes no allocation: a Put() buffer is the
// next Get() of its class.
//
// Arena: the pool reserves one contiguous anonymous mapping (arena_bytes, kDefaultArenaBytes by
// default) and carves buffers out of it lazily, class by class, as they are first needed; no class
// takes more than a quarter of it, so a burst of large transfers cannot leave the small ones
// without. Once a direct file LUN uses the reactor, its FileRing registers the arena as io_uring
// fixed buffers (FileRing::OfferFixedBuffers, UseFixedBuffers), so direct reads and writes into
// these buffers skip pinning their pages on every I/O. An arena buffer is never freed: Put()
// returns it to its class. Past the arena (or without one) buffers come from the heap, and each
// class caches a bounded number of their bytes; past that, Put() frees.
//
// Threading: owned by one reactor; used only on its thread. arena() and InArena() never change
// after construction and may be read from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace iscsigw::runtime {

class BufferPool {
 public:
  static constexpr unsigned kMinShift = 12;
  static constexpr unsigned kMaxShift = 24;
  static constexpr uint32_t kMaxBuffer = 1u << kMaxShift;
  // Enough for the 4 KiB .. 128 KiB buffers of a few sessions at a command window of 32 to 128,
  // and small enough to pin (a registered arena is resident for the ring's life) per reactor.
  static constexpr size_t kDefaultArenaBytes = size_t{32} << 20;

  // arena_bytes is rounded down to whole pages; 0: no arena, every buffer from the heap.
  explicit BufferPool(size_t cached_bytes_per_class = 32u << 20,
                      size_t arena_bytes = kDefaultArenaBytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least len bytes (len <= kMaxBuffer), its capacity in *cap; nullptr when memory
  // is exhausted or len is too large. Arena buffers first, then the heap.
  uint8_t* Get(uint32_t len, uint32_t* cap);
  void Put(uint8_t* buf, uint32_t cap);

  // The whole arena (empty when there is none, e.g. the mapping was refused).
  std::span<uint8_t> arena() const { return {arena_, arena_bytes_}; }
  bool InArena(const uint8_t* p) const {
    return p >= arena_ && p < arena_ + arena_bytes_;  // arena_ null: nothing is in it
  }

  // Heap allocations so far; buffers carved from the arena are not counted.
  uint64_t allocations() const { return allocations_; }
  // Bytes of the arena carved into buffers so far.
  size_t arena_carved() const { return arena_used_; }

 private:
  static unsigned ClassOf(uint32_t len);
  static constexpr unsigned kClasses = kMaxShift - kMinShift + 1;
  uint8_t* Carve(unsigned c, uint32_t size);

  std::array<std::vector<uint8_t*>, kClasses> free_;        // heap buffers
  std::array<std::vector<uint8_t*>, kClasses> arena_free_;  // capacity: all a class may carve
  std::array<size_t, kClasses> arena_class_bytes_{};        // carved per class
  size_t cached_bytes_per_class_;
  uint8_t* arena_ = nullptr;  // mmap'ed, or null
  size_t arena_bytes_ = 0;
  size_t arena_used_ = 0;  // carved from the front
  uint64_t allocations_ = 0;
};

}  // namespace iscsigw::runtime
