#include "dataplane/runtime/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cstdlib>

namespace iscsigw::runtime {

namespace {
// The share of the arena one size class may carve (a quarter).
constexpr unsigned kArenaShareShift = 2;
}  // namespace

BufferPool::BufferPool(size_t cached_bytes_per_class, size_t arena_bytes)
    : cached_bytes_per_class_(cached_bytes_per_class) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  arena_bytes -= arena_bytes % page;
  if (arena_bytes > 0) {
    // Reserved, not committed: pages are backed as buffers are first used (or when the ring
    // registers, and so pins, the arena).
    void* p = ::mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      arena_ = static_cast<uint8_t*>(p);
      arena_bytes_ = arena_bytes;
    }
  }
  const size_t share = arena_bytes_ >> kArenaShareShift;
  for (unsigned c = 0; c < kClasses; ++c) {
    const size_t size = size_t{1} << (c + kMinShift);
    size_t n = cached_bytes_per_class_ / size;
    if (n < 2) n = 2;
    free_[c].reserve(n);
    // Every buffer the class may carve fits on its list: Put() never allocates.
    arena_free_[c].reserve(share / size);
  }
}

BufferPool::~BufferPool() {
  for (auto& list : free_) {
    for (uint8_t* p : list) std::free(p);
  }
  if (arena_ != nullptr) ::munmap(arena_, arena_bytes_);
}

unsigned BufferPool::ClassOf(uint32_t len) {
  if (len <= (1u << kMinShift)) return 0;
  return static_cast<unsigned>(std::bit_width(len - 1)) - kMinShift;
}

uint8_t* BufferPool::Carve(unsigned c, uint32_t size) {
  if (arena_class_bytes_[c] + size > (arena_bytes_ >> kArenaShareShift)) return nullptr;
  if (arena_used_ + size > arena_bytes_) return nullptr;
  uint8_t* p = arena_ + arena_used_;  // sizes are whole pages: every buffer stays page aligned
  arena_used_ += size;
  arena_class_bytes_[c] += size;
  return p;
}

uint8_t* BufferPool::Get(uint32_t len, uint32_t* cap) {
  if (len > kMaxBuffer) return nullptr;
  const unsigned c = ClassOf(len);
  const uint32_t size = 1u << (c + kMinShift);
  *cap = size;
  if (auto& list = arena_free_[c]; !list.empty()) {
    uint8_t* p = list.back();
    list.pop_back();
    return p;
  }
  if (uint8_t* p = Carve(c, size)) return p;
  if (auto& list = free_[c]; !list.empty()) {
    uint8_t* p = list.back();
    list.pop_back();
    return p;
  }
  ++allocations_;
  return static_cast<uint8_t*>(std::aligned_alloc(4096, size));
}

void BufferPool::Put(uint8_t* buf, uint32_t cap) {
  if (buf == nullptr) return;
  const unsigned c = ClassOf(cap);
  if (InArena(buf)) {
    arena_free_[c].push_back(buf);
    return;
  }
  auto& list = free_[c];
  if (list.size() < list.capacity()) {
    list.push_back(buf);
  } else {
    std::free(buf);
  }
}

}  // namespace iscsigw::runtime
