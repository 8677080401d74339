#include "dataplane/iscsi/auth_throttle.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace iscsigw::iscsi {
namespace {

using std::chrono::seconds;
using Clock = AuthThrottle::Clock;

constexpr char kName[] = "iqn.2024-01.test:host";
constexpr char kSource[] = "192.0.2.7";

TEST(AuthThrottleTest, LocksOutAfterTheFreeFailuresAndDoublesUpToTheMax) {
  AuthThrottle t;  // 3 free, 1 s doubling to 60 s
  const auto t0 = Clock::now();
  EXPECT_EQ(t.RecordFailure(kName, kSource, t0).lockout, Clock::duration::zero());
  EXPECT_EQ(t.RecordFailure(kName, kSource, t0).lockout, Clock::duration::zero());
  EXPECT_EQ(t.LockedFor(kName, kSource, t0), Clock::duration::zero());
  auto f = t.RecordFailure(kName, kSource, t0);
  EXPECT_EQ(f.in_a_row, 3u);
  EXPECT_EQ(f.lockout, seconds(1));
  EXPECT_EQ(t.LockedFor(kName, kSource, t0), seconds(1));
  EXPECT_EQ(t.LockedFor(kName, kSource, t0 + seconds(1)), Clock::duration::zero());
  EXPECT_EQ(t.RecordFailure(kName, kSource, t0 + seconds(1)).lockout, seconds(2));
  EXPECT_EQ(t.RecordFailure(kName, kSource, t0 + seconds(3)).lockout, seconds(4));
  auto at = t0 + seconds(7);
  for (int i = 0; i < 40; ++i) f = t.RecordFailure(kName, kSource, at);
  EXPECT_EQ(f.lockout, seconds(60));
  EXPECT_EQ(f.in_a_row, 45u);
}

TEST(AuthThrottleTest, OtherSourcesAndNamesAreNotLockedOut) {
  AuthThrottle t;
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) t.RecordFailure(kName, kSource, t0);
  EXPECT_GT(t.LockedFor(kName, kSource, t0), Clock::duration::zero());
  EXPECT_EQ(t.LockedFor(kName, "192.0.2.8", t0), Clock::duration::zero());
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:other", kSource, t0), Clock::duration::zero());
  // The key is the pair, not a concatenation that two different pairs could share.
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:host1", "92.0.2.7", t0), Clock::duration::zero());
}

TEST(AuthThrottleTest, SuccessClearsAndOldFailuresAreForgotten) {
  AuthThrottle t;
  const auto t0 = Clock::now();
  t.RecordFailure(kName, kSource, t0);
  t.RecordFailure(kName, kSource, t0);
  t.RecordSuccess(kName, kSource);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.RecordFailure(kName, kSource, t0).in_a_row, 1u);
  t.RecordFailure(kName, kSource, t0);
  // Long after the last failure the count starts again.
  EXPECT_EQ(t.RecordFailure(kName, kSource, t0 + std::chrono::minutes(16)).in_a_row, 1u);
}

TEST(AuthThrottleTest, TheTableIsBounded) {
  AuthThrottle::Options o;
  o.max_entries = 16;
  AuthThrottle t(o);
  const auto t0 = Clock::now();
  // The guesser's own record is the most recent: spraying other names evicts the oldest first.
  for (int i = 0; i < 100; ++i) {
    t.RecordFailure("iqn.2024-01.test:spray" + std::to_string(i), kSource, t0 + seconds(i));
    EXPECT_LE(t.size(), 16u);
  }
  for (int i = 0; i < 3; ++i) t.RecordFailure(kName, kSource, t0 + seconds(200));
  EXPECT_EQ(t.size(), 16u);
  EXPECT_GT(t.LockedFor(kName, kSource, t0 + seconds(200)), Clock::duration::zero());
}

}  // namespace
}  // namespace iscsigw::iscsi
