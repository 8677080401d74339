#include "base/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>
#include <string>

namespace iscsigw::log {
namespace log_test {

constexpr int64_t kSecond = 1'000'000'000;

TEST(RateLimiter, AllowsABurstThenRefusesAndCounts) {
  RateLimiter rl(3, kSecond);
  const int64_t t0 = 5 * kSecond;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(rl.Allow(t0)) << i;
    EXPECT_EQ(rl.suppressed(), 0u);
  }
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(rl.Allow(t0 + i));
  // Less than one interval later the bucket is still empty.
  EXPECT_FALSE(rl.Allow(t0 + kSecond - 1));
  // One interval after the first use: one token, and the line reports the 8 refused ones.
  EXPECT_TRUE(rl.Allow(t0 + kSecond));
  EXPECT_EQ(rl.suppressed(), 8u);
  EXPECT_FALSE(rl.Allow(t0 + kSecond));
  // The count restarts after it was reported.
  EXPECT_TRUE(rl.Allow(t0 + 2 * kSecond));
  EXPECT_EQ(rl.suppressed(), 1u);
}

TEST(RateLimiter, RefillsOneTokenPerIntervalUpToTheBurst) {
  RateLimiter rl(4, kSecond);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(rl.Allow(0));
  ASSERT_FALSE(rl.Allow(0));
  // 2.5 intervals: two tokens, and the half interval is kept towards the third.
  EXPECT_TRUE(rl.Allow(kSecond * 5 / 2));
  EXPECT_EQ(rl.suppressed(), 1u);
  EXPECT_TRUE(rl.Allow(kSecond * 5 / 2));
  EXPECT_EQ(rl.suppressed(), 0u);
  EXPECT_FALSE(rl.Allow(kSecond * 5 / 2));
  EXPECT_TRUE(rl.Allow(3 * kSecond));
  // A long quiet spell fills the bucket to the burst, not beyond.
  const int64_t later = 1000 * kSecond;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(rl.Allow(later)) << i;
  EXPECT_FALSE(rl.Allow(later));
}

TEST(RateLimiter, MacroWritesOneLineAndThenTheSuppressedCount) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  sink->set_pattern("%v");
  spdlog::logger lg("iscsi", sink);
  lg.set_level(spdlog::level::info);

  RateLimiter hour(1, 3600 * kSecond);
  for (int i = 0; i < 5; ++i) {
    ISCSIGW_LOG_LIMITED(hour, lg, spdlog::level::warn, "[C1] digest error {}", i);
  }
  EXPECT_EQ(out.str(), "[C1] digest error 0\n");

  // An interval of 1 ns: the bucket is emptied at time 0, and the macro (on the real monotonic
  // clock, far later) gets a token back and reports what was refused in between. A line below
  // the logger's level is neither written nor counted.
  out.str("");
  RateLimiter rl(1, 1);
  ASSERT_TRUE(rl.Allow(0));
  ISCSIGW_LOG_LIMITED(rl, lg, spdlog::level::debug, "hidden {}", 0);
  ASSERT_FALSE(rl.Allow(0));
  ASSERT_FALSE(rl.Allow(0));
  ISCSIGW_LOG_LIMITED(rl, lg, spdlog::level::warn, "[C2] reject {}", 7);
  EXPECT_EQ(out.str(), "[C2] reject 7 (2 similar messages suppressed)\n");
  out.str("");
  ISCSIGW_LOG_LIMITED(rl, lg, spdlog::level::warn, "[C2] reject {}", 8);
  EXPECT_EQ(out.str(), "[C2] reject 8\n");
}

TEST(Log, ConnMacroWritesTheContextAndSkipsDisabledLevels) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  sink->set_pattern("%v");
  spdlog::logger lg("iscsi", sink);
  lg.set_level(spdlog::level::info);
  int formatted = 0;
  auto counted = [&formatted] { return ++formatted; };
  ISCSIGW_LOG_CONN(lg, spdlog::level::debug, (ConnContext{3, 1, "i", "t"}), "n {}", counted());
  EXPECT_EQ(formatted, 0);  // arguments are not even evaluated below the level
  ISCSIGW_LOG_CONN(lg, spdlog::level::info, (ConnContext{3, 1, "i", "t"}), "n {}", counted());
  EXPECT_EQ(out.str(), "[C3 S1 ini=i tgt=t] n 1\n");
}

// Init, level changes and Shutdown share the process-wide loggers: one test walks through them.
TEST(Log, AsyncSinkLevelsPerLoggerAndShutdownDrains) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  Init(spdlog::level::info, Format::kJson, sink);
  EXPECT_EQ(GetLevel("iscsi"), spdlog::level::info);
  EXPECT_EQ(GetLevel("nosuch"), std::nullopt);

  Iscsi().debug("[C1 S2] hidden");
  EXPECT_TRUE(SetLevel("iscsi", spdlog::level::debug));
  EXPECT_FALSE(SetLevel("nosuch", spdlog::level::debug));
  EXPECT_EQ(GetLevel("iscsi"), spdlog::level::debug);
  EXPECT_EQ(GetLevel("scsi"), spdlog::level::info);
  Iscsi().debug("[C1 S2] shown");
  Scsi().debug("not shown");
  for (int i = 0; i < 100; ++i) Ctl().info("line {}", i);
  SetLevel(spdlog::level::err);
  EXPECT_EQ(GetLevel("pdu"), spdlog::level::err);
  Ctl().warn("below err");
  Shutdown();

  const std::string s = out.str();
  EXPECT_EQ(s.find("hidden"), std::string::npos);
  EXPECT_EQ(s.find("not shown"), std::string::npos);
  EXPECT_EQ(s.find("below err"), std::string::npos);
  EXPECT_NE(s.find("\"logger\":\"iscsi\",\"conn\":1,\"tsih\":2,\"msg\":\"shown\""),
            std::string::npos)
      << s;
  // Every queued line was written, in order, before Shutdown returned.
  size_t pos = 0;
  for (int i = 0; i < 100; ++i) {
    pos = s.find("\"msg\":\"line " + std::to_string(i) + "\"", pos);
    ASSERT_NE(pos, std::string::npos) << i;
  }
  // After Shutdown the loggers write synchronously and keep their levels.
  EXPECT_EQ(GetLevel("ctl"), spdlog::level::err);
  Ctl().error("after shutdown");  // stderr; must not crash or throw
  SetLevel(spdlog::level::warn);
}

}  // namespace log_test
}  // namespace iscsigw::log
