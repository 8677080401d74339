#include "base/latency_histogram.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace iscsigw {
namespace latency_histogram_test {

constexpr uint64_t kUs = 1000;

// 58 KiB each: on the heap.
std::unique_ptr<LatencyHistogram> Make() { return std::make_unique<LatencyHistogram>(); }

TEST(LatencyHistogram, AnyValueIsKnownWithinOnePercent) {
  for (uint64_t ns = 1; ns < (uint64_t{1} << 62); ns += ns / 10 + 1) {
    auto h = Make();
    h->Record(ns);
    h->Record(ns);
    const double us = static_cast<double>(ns) / 1e3;
    ASSERT_NEAR(h->PercentileUs(0.5), us, us * 0.01 + 0.001) << ns;
    ASSERT_NEAR(h->MeanUs(), us, 1e-9 * us) << ns;
  }
}

TEST(LatencyHistogram, QuantilesFollowTheValues) {
  auto h = Make();
  EXPECT_EQ(h->PercentileUs(0.5), 0.0);  // empty
  for (int i = 0; i < 990; ++i) h->Record(100 * kUs);
  for (int i = 0; i < 9; ++i) h->Record(1000 * kUs);
  h->Record(20'000 * kUs);  // one stall in a thousand
  EXPECT_EQ(h->count(), 1000u);
  EXPECT_NEAR(h->PercentileUs(0.5), 100.0, 1.0);
  EXPECT_NEAR(h->PercentileUs(0.99), 100.0, 1.0);
  EXPECT_NEAR(h->PercentileUs(0.999), 1000.0, 10.0);
  EXPECT_NEAR(h->PercentileUs(1.0), 20000.0, 200.0);
  EXPECT_NEAR(h->MeanUs(), (990 * 100.0 + 9 * 1000.0 + 20000.0) / 1000, 1e-6);
}

TEST(LatencyHistogram, MergeAddsCountsAndKeepsTheLargest) {
  auto a = Make();
  auto b = Make();
  for (int i = 0; i < 3; ++i) a->Record(50 * kUs);
  b->Record(7'000 * kUs);
  a->Merge(*b);
  EXPECT_EQ(a->count(), 4u);
  EXPECT_NEAR(a->PercentileUs(0.5), 50.0, 0.5);
  EXPECT_NEAR(a->PercentileUs(1.0), 7000.0, 70.0);
  EXPECT_NEAR(a->MeanUs(), (3 * 50.0 + 7000.0) / 4, 1e-6);
}

}  // namespace latency_histogram_test
}  // namespace iscsigw
