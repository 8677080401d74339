#include "dataplane/runtime/io_trace.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace iscsigw::runtime::io_trace {
namespace io_trace_test {

constexpr uint64_t kUs = 1000;

TEST(IoTraceHistogram, BucketsAreEighthsOfEachPowerOfTwo) {
  EXPECT_EQ(Histogram::BucketOf(0), 0u);
  EXPECT_EQ(Histogram::BucketOf(999), 0u);  // below 1 µs
  EXPECT_EQ(Histogram::BucketOf(1 * kUs), 1u);
  EXPECT_EQ(Histogram::BucketOf(1124), 1u);  // [1, 1.125) µs
  EXPECT_EQ(Histogram::BucketOf(1125), 2u);
  EXPECT_EQ(Histogram::BucketOf(1999), 8u);  // [1.875, 2) µs
  EXPECT_EQ(Histogram::BucketOf(2 * kUs), 9u);
  EXPECT_EQ(Histogram::BucketOf(2249), 9u);  // [2, 2.25) µs
  EXPECT_EQ(Histogram::BucketOf(2250), 10u);
  // Every value lies below its bucket's upper edge and at or above the previous bucket's.
  for (uint64_t ns = 1000; ns < 5'000'000; ns = ns * 21 / 20 + 1) {
    const unsigned b = Histogram::BucketOf(ns);
    ASSERT_LT(static_cast<double>(ns) / 1e3, Histogram::UpperEdgeUs(b)) << ns;
    ASSERT_GE(static_cast<double>(ns) / 1e3, Histogram::UpperEdgeUs(b - 1)) << ns;
  }
  // Beyond the last octave: the last bucket, not past the table.
  EXPECT_EQ(Histogram::BucketOf(uint64_t{1} << 62), Histogram::kBuckets - 1);
}

TEST(IoTraceHistogram, QuantilesAndMeanFollowTheValues) {
  Histogram h;
  EXPECT_EQ(h.QuantileUs(0.5), 0.0);
  for (int i = 0; i < 990; ++i) h.Add(100 * kUs);
  for (int i = 0; i < 9; ++i) h.Add(1000 * kUs);
  h.Add(20'000 * kUs);  // one stall in a thousand
  EXPECT_EQ(h.count(), 1000u);
  EXPECT_NEAR(h.QuantileUs(0.5), 100.0, 100.0 / 8);
  EXPECT_NEAR(h.QuantileUs(0.99), 100.0, 100.0 / 8);
  EXPECT_NEAR(h.QuantileUs(0.999), 1000.0, 1000.0 / 8);
  EXPECT_NEAR(h.QuantileUs(1.0), 20000.0, 20000.0 / 8);
  EXPECT_NEAR(h.mean_us(), (990 * 100.0 + 9 * 1000.0 + 20000.0) / 1000, 0.01);

  Histogram other;
  other.Add(100 * kUs);
  h.Merge(other);
  EXPECT_EQ(h.count(), 1001u);
}

TEST(IoTraceLegs, EachLegIsTheDifferenceOfItsStamps) {
  Legs legs;
  Stamps s;
  s.received = 1'000 * kUs;
  s.submitted = 1'040 * kUs;  // 40 µs to the ring
  s.reaped = 1'240 * kUs;     // 200 µs at the device
  s.queued = 1'241 * kUs;
  legs.Record(s, 1'271 * kUs);  // sent 30 µs later
  EXPECT_NEAR(legs.legs[kReceivedToSubmitted].mean_us(), 40.0, 0.01);
  EXPECT_NEAR(legs.legs[kSubmittedToReaped].mean_us(), 200.0, 0.01);
  EXPECT_NEAR(legs.legs[kReapedToQueued].mean_us(), 1.0, 0.01);
  EXPECT_NEAR(legs.legs[kQueuedToSent].mean_us(), 30.0, 0.01);
  EXPECT_NEAR(legs.legs[kReceivedToQueued].mean_us(), 241.0, 0.01);
  EXPECT_NEAR(legs.legs[kReceivedToSent].mean_us(), 271.0, 0.01);

  // A command that never reached a ring (RAM LUN): no ring legs, the rest recorded.
  Stamps ram;
  ram.received = 5'000 * kUs;
  ram.queued = 5'003 * kUs;
  legs.Record(ram, 5'010 * kUs);
  EXPECT_EQ(legs.legs[kSubmittedToReaped].count(), 1u);
  EXPECT_EQ(legs.legs[kReceivedToSent].count(), 2u);

  // Unstamped commands (received 0: not traced) and stamps out of order record nothing.
  legs.Record(Stamps{}, 9'000 * kUs);
  Stamps backwards = s;
  backwards.queued = s.reaped - kUs;
  legs.Record(backwards, 1'300 * kUs);
  EXPECT_EQ(legs.legs[kReceivedToSent].count(), 3u);
  EXPECT_EQ(legs.legs[kReapedToQueued].count(), 1u);

  const std::string report = legs.Report();
  EXPECT_NE(report.find("submitted -> completion reaped"), std::string::npos) << report;
}

// Each thread records into its own legs; the report merges every thread's, also those that ended.
TEST(IoTraceLegs, TheReportMergesEveryThread) {
  char path[] = "/tmp/io-trace-test-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ::setenv("ISCSIGW_IO_TRACE_FILE", path, 1);
  auto record = [](uint64_t received) {
    Stamps s;
    s.received = received;
    s.queued = received + 5 * kUs;
    ForThisThread().Record(s, received + 7 * kUs);
  };
  Legs* first = nullptr;
  std::thread a([&] {
    first = &ForThisThread();
    record(1'000'000'000);
    record(1'000'100'000);
  });
  a.join();
  std::thread b([&] {
    EXPECT_NE(&ForThisThread(), first);  // its own
    record(2'000'000'000);
  });
  b.join();
  EXPECT_EQ(first->legs[kReceivedToSent].count(), 2u);  // thread a's own legs: its two
  ReportAtExit();
  ::unsetenv("ISCSIGW_IO_TRACE_FILE");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  const std::string report = text.str();
  const size_t at = report.find("received -> sent");
  ASSERT_NE(at, std::string::npos) << report;
  std::istringstream line(report.substr(at + std::string("received -> sent").size()));
  uint64_t count = 0;
  line >> count;
  EXPECT_EQ(count, 3u) << report;  // both threads', after both ended
}

}  // namespace io_trace_test
}  // namespace iscsigw::runtime::io_trace
