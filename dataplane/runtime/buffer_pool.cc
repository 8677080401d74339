#include "dataplane/runtime/buffer_pool.h"

#include <bit>
#include <cstdlib>

namespace iscsigw::runtime {

BufferPool::BufferPool(size_t cached_bytes_per_class)
    : cached_bytes_per_class_(cached_bytes_per_class) {
  for (unsigned c = 0; c < kClasses; ++c) {
    const size_t size = size_t{1} << (c + kMinShift);
    size_t n = cached_bytes_per_class_ / size;
    if (n < 2) n = 2;
    free_[c].reserve(n);
  }
}

BufferPool::~BufferPool() {
  for (auto& list : free_) {
    for (uint8_t* p : list) std::free(p);
  }
}

unsigned BufferPool::ClassOf(uint32_t len) {
  if (len <= (1u << kMinShift)) return 0;
  return static_cast<unsigned>(std::bit_width(len - 1)) - kMinShift;
}

uint8_t* BufferPool::Get(uint32_t len, uint32_t* cap) {
  if (len > kMaxBuffer) return nullptr;
  const unsigned c = ClassOf(len);
  const uint32_t size = 1u << (c + kMinShift);
  *cap = size;
  auto& list = free_[c];
  if (!list.empty()) {
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
  auto& list = free_[c];
  if (list.size() < list.capacity()) {
    list.push_back(buf);
  } else {
    std::free(buf);
  }
}

}  // namespace iscsigw::runtime
