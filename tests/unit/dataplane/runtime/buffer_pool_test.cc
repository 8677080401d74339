#include "dataplane/runtime/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace iscsigw::runtime {
namespace buffer_pool_test {

struct ClassRow {
  uint32_t len;
  uint32_t cap;
};

class BufferPoolClassTest : public testing::TestWithParam<ClassRow> {};

TEST_P(BufferPoolClassTest, RoundsUpToThePowerOfTwoClass) {
  BufferPool pool;
  uint32_t cap = 0;
  uint8_t* p = pool.Get(GetParam().len, &cap);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cap, GetParam().cap);
  EXPECT_GE(cap, GetParam().len);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);  // usable for direct I/O
  std::memset(p, 0xab, cap);  // the whole capacity is writable (ASan checks)
  pool.Put(p, cap);
}

INSTANTIATE_TEST_SUITE_P(SizeClasses, BufferPoolClassTest,
                         testing::Values(ClassRow{0, 4096}, ClassRow{1, 4096}, ClassRow{4096, 4096},
                                         ClassRow{4097, 8192}, ClassRow{8192, 8192},
                                         ClassRow{65535, 65536}, ClassRow{65537, 131072},
                                         ClassRow{(1u << 24) - 1, 1u << 24},
                                         ClassRow{1u << 24, 1u << 24}));

TEST(BufferPool, OversizeRequestGetsNothing) {
  BufferPool pool;
  uint32_t cap = 0;
  EXPECT_EQ(pool.Get(BufferPool::kMaxBuffer + 1, &cap), nullptr);
  EXPECT_EQ(pool.Get(UINT32_MAX, &cap), nullptr);
  EXPECT_EQ(pool.allocations(), 0u);
}

// Heap buffers (no arena): allocations() counts every one.
constexpr size_t kCache = 32u << 20;

TEST(BufferPool, ReusesAPutBufferWithoutAllocating) {
  BufferPool pool(kCache, 0);
  uint32_t cap = 0;
  uint8_t* a = pool.Get(5000, &cap);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(pool.allocations(), 1u);
  pool.Put(a, cap);
  uint32_t cap2 = 0;
  uint8_t* b = pool.Get(8000, &cap2);  // same class
  EXPECT_EQ(b, a);
  EXPECT_EQ(cap2, cap);
  EXPECT_EQ(pool.allocations(), 1u);
  pool.Put(b, cap2);
}

TEST(BufferPool, ClassesDoNotShareBuffers) {
  BufferPool pool(kCache, 0);
  uint32_t cap4 = 0, cap8 = 0;
  uint8_t* small = pool.Get(4096, &cap4);
  pool.Put(small, cap4);
  uint8_t* big = pool.Get(8192, &cap8);
  EXPECT_NE(big, small);
  EXPECT_EQ(pool.allocations(), 2u);
  pool.Put(big, cap8);
}

TEST(BufferPool, SteadyStateCommandLoopAllocatesNothing) {
  BufferPool pool(kCache, 0);
  constexpr int kInFlight = 32;
  std::vector<std::pair<uint8_t*, uint32_t>> held;
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < kInFlight; ++i) {
      uint32_t cap = 0;
      uint8_t* p = pool.Get(4096 * (1 + i % 4), &cap);  // classes 4K, 8K, 16K
      ASSERT_NE(p, nullptr);
      held.emplace_back(p, cap);
    }
    for (auto& [p, cap] : held) pool.Put(p, cap);
    held.clear();
    if (round == 0) {
      EXPECT_EQ(pool.allocations(), static_cast<uint64_t>(kInFlight));
    }
  }
  EXPECT_EQ(pool.allocations(), static_cast<uint64_t>(kInFlight));
}

TEST(BufferPool, BoundedCacheFreesThePastLimitAndAllocatesAgain) {
  // 16 KiB per class: four 4 KiB buffers cached at most.
  BufferPool pool(16384, 0);
  std::vector<std::pair<uint8_t*, uint32_t>> held;
  for (int i = 0; i < 6; ++i) {
    uint32_t cap = 0;
    held.emplace_back(pool.Get(4096, &cap), cap);
  }
  EXPECT_EQ(pool.allocations(), 6u);
  for (auto& [p, cap] : held) pool.Put(p, cap);
  held.clear();
  for (int i = 0; i < 6; ++i) {
    uint32_t cap = 0;
    held.emplace_back(pool.Get(4096, &cap), cap);
  }
  EXPECT_EQ(pool.allocations(), 8u);  // four came from the cache, two were freed on Put
  for (auto& [p, cap] : held) pool.Put(p, cap);
}

TEST(BufferPool, PutNullIsANoOp) {
  BufferPool pool(kCache, 0);
  pool.Put(nullptr, 4096);
  uint32_t cap = 0;
  uint8_t* p = pool.Get(1, &cap);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(pool.allocations(), 1u);
  pool.Put(p, cap);
}

// --- The arena ---------------------------------------------------------------------------------

TEST(BufferPoolArena, BuffersComeFromTheArenaFirstWithoutHeapAllocation) {
  BufferPool pool(kCache, 1 << 20);
  ASSERT_EQ(pool.arena().size(), 1u << 20);
  uint32_t cap = 0;
  uint8_t* a = pool.Get(4096, &cap);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(pool.InArena(a));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
  EXPECT_EQ(pool.allocations(), 0u);
  EXPECT_EQ(pool.arena_carved(), 4096u);
  std::memset(a, 0x5a, cap);
  pool.Put(a, cap);
  uint32_t cap2 = 0;
  EXPECT_EQ(pool.Get(100, &cap2), a);  // reused, not carved again
  EXPECT_EQ(pool.arena_carved(), 4096u);
  pool.Put(a, cap2);
}

TEST(BufferPoolArena, AClassCarvesAtMostAQuarterThenUsesTheHeap) {
  BufferPool pool(kCache, 1 << 20);  // a quarter: 64 buffers of 4 KiB
  std::vector<std::pair<uint8_t*, uint32_t>> held;
  for (int i = 0; i < 65; ++i) {
    uint32_t cap = 0;
    held.emplace_back(pool.Get(4096, &cap), cap);
    ASSERT_NE(held.back().first, nullptr);
  }
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(pool.InArena(held[i].first)) << i;
  EXPECT_FALSE(pool.InArena(held[64].first));
  EXPECT_EQ(pool.allocations(), 1u);
  EXPECT_EQ(pool.arena_carved(), 256u << 10);
  // The other classes still have their room.
  uint32_t cap = 0;
  uint8_t* big = pool.Get(256 << 10, &cap);
  EXPECT_TRUE(pool.InArena(big));
  pool.Put(big, cap);
  // Every arena buffer goes back to its class, and the arena ones are handed out first.
  for (auto& [p, c] : held) pool.Put(p, c);
  held.clear();
  for (int i = 0; i < 64; ++i) {
    uint8_t* p = pool.Get(4096, &cap);
    EXPECT_TRUE(pool.InArena(p)) << i;
    held.emplace_back(p, cap);
  }
  EXPECT_EQ(pool.allocations(), 1u);
  for (auto& [p, c] : held) pool.Put(p, c);
}

TEST(BufferPoolArena, ClassesLargerThanTheirShareComeFromTheHeap) {
  BufferPool pool(kCache, 1 << 20);
  uint32_t cap = 0;
  uint8_t* p = pool.Get(512 << 10, &cap);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(pool.InArena(p));
  EXPECT_EQ(pool.allocations(), 1u);
  EXPECT_EQ(pool.arena_carved(), 0u);
  pool.Put(p, cap);
}

TEST(BufferPoolArena, ExhaustedArenaFallsBackToTheHeap) {
  BufferPool pool(kCache, 1 << 20);
  std::vector<std::pair<uint8_t*, uint32_t>> held;
  auto get = [&](uint32_t len) {
    uint32_t cap = 0;
    held.emplace_back(pool.Get(len, &cap), cap);
    return held.back().first;
  };
  // Four classes take their quarter each: the arena is all carved.
  for (uint32_t len : {256u << 10, 128u << 10, 64u << 10, 32u << 10}) {
    for (uint32_t n = 0; n < (256u << 10) / len; ++n) EXPECT_TRUE(pool.InArena(get(len)));
  }
  EXPECT_EQ(pool.arena_carved(), 1u << 20);
  EXPECT_EQ(pool.allocations(), 0u);
  EXPECT_FALSE(pool.InArena(get(4096)));
  EXPECT_EQ(pool.allocations(), 1u);
  for (auto& [p, c] : held) pool.Put(p, c);
}

TEST(BufferPoolArena, SizeZeroMeansNoArena) {
  BufferPool pool(kCache, 0);
  EXPECT_TRUE(pool.arena().empty());
  uint32_t cap = 0;
  uint8_t* p = pool.Get(4096, &cap);
  EXPECT_FALSE(pool.InArena(p));
  EXPECT_EQ(pool.allocations(), 1u);
  pool.Put(p, cap);
}

}  // namespace buffer_pool_test
}  // namespace iscsigw::runtime
