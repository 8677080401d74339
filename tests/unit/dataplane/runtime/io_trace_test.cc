#include "dataplane/runtime/io_trace.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

namespace iscsigw::runtime::io_trace {
namespace io_trace_test {

constexpr uint64_t kUs = 1000;

TEST(IoTraceLegs, EachLegIsTheDifferenceOfItsStamps) {
  auto owned = std::make_unique<Legs>();  // 350 KiB
  Legs& legs = *owned;
  Stamps s;
  s.received = 1'000 * kUs;
  s.submitted = 1'040 * kUs;  // 40 µs to the ring
  s.reaped = 1'240 * kUs;     // 200 µs at the device
  s.queued = 1'241 * kUs;
  legs.Record(s, 1'271 * kUs);  // sent 30 µs later
  EXPECT_NEAR(legs.legs[kReceivedToSubmitted].MeanUs(), 40.0, 0.01);
  EXPECT_NEAR(legs.legs[kSubmittedToReaped].MeanUs(), 200.0, 0.01);
  EXPECT_NEAR(legs.legs[kReapedToQueued].MeanUs(), 1.0, 0.01);
  EXPECT_NEAR(legs.legs[kQueuedToSent].MeanUs(), 30.0, 0.01);
  EXPECT_NEAR(legs.legs[kReceivedToQueued].MeanUs(), 241.0, 0.01);
  EXPECT_NEAR(legs.legs[kReceivedToSent].MeanUs(), 271.0, 0.01);

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
