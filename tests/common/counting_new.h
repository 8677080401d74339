// Counts every heap allocation a test or benchmark binary makes, by replacing the global operator
// new (and its nothrow form, so that, under AddressSanitizer too, every allocation freed through
// the operator delete below came from malloc). Include in exactly one source file per binary.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace iscsigw::testing {
inline std::atomic<long> g_allocations{0};
inline long Allocations() { return g_allocations.load(std::memory_order_relaxed); }
}  // namespace iscsigw::testing

void* operator new(std::size_t n) {
  iscsigw::testing::g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  iscsigw::testing::g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
// GCC inlines these into callers and then takes the free() of memory from operator new for a
// mismatch (-Wmismatched-new-delete); here operator new is malloc, so the pairing is right.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop
