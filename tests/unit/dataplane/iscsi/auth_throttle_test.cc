#include "dataplane/iscsi/auth_throttle.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace iscsigw::iscsi {
namespace auth_throttle_test {

using std::chrono::seconds;
using Clock = AuthThrottle::Clock;

constexpr char kName[] = "iqn.2024-01.test:host";
constexpr char kSource[] = "192.0.2.7";
constexpr char kTarget[] = "iqn.2024-01.test:target";

TEST(AuthThrottleTest, LocksOutAfterTheFreeFailuresAndDoublesUpToTheMax) {
  AuthThrottle t;  // 3 free, 1 s doubling to 60 s
  const auto t0 = Clock::now();
  EXPECT_EQ(t.RecordFailure(kName, kSource, kTarget, t0).lockout, Clock::duration::zero());
  EXPECT_EQ(t.RecordFailure(kName, kSource, kTarget, t0).lockout, Clock::duration::zero());
  EXPECT_EQ(t.LockedFor(kName, kSource, kTarget, t0), Clock::duration::zero());
  auto f = t.RecordFailure(kName, kSource, kTarget, t0);
  EXPECT_EQ(f.in_a_row, 3u);
  EXPECT_EQ(f.lockout, seconds(1));
  EXPECT_EQ(t.LockedFor(kName, kSource, kTarget, t0), seconds(1));
  EXPECT_EQ(t.LockedFor(kName, kSource, kTarget, t0 + seconds(1)), Clock::duration::zero());
  EXPECT_EQ(t.RecordFailure(kName, kSource, kTarget, t0 + seconds(1)).lockout, seconds(2));
  EXPECT_EQ(t.RecordFailure(kName, kSource, kTarget, t0 + seconds(3)).lockout, seconds(4));
  auto at = t0 + seconds(7);
  for (int i = 0; i < 40; ++i) f = t.RecordFailure(kName, kSource, kTarget, at);
  EXPECT_EQ(f.lockout, seconds(60));
  EXPECT_EQ(f.in_a_row, 45u);
}

TEST(AuthThrottleTest, OtherSourcesAndNamesAreNotLockedOut) {
  AuthThrottle t;
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) t.RecordFailure(kName, kSource, kTarget, t0);
  EXPECT_GT(t.LockedFor(kName, kSource, kTarget, t0), Clock::duration::zero());
  EXPECT_EQ(t.LockedFor(kName, "192.0.2.8", kTarget, t0), Clock::duration::zero());
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:other", kSource, kTarget, t0), Clock::duration::zero());
  // The key is the pair, not a concatenation that two different pairs could share.
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:host1", "92.0.2.7", kTarget, t0),
            Clock::duration::zero());
}

TEST(AuthThrottleTest, SuccessClearsAndOldFailuresAreForgotten) {
  AuthThrottle t;
  const auto t0 = Clock::now();
  t.RecordFailure(kName, kSource, kTarget, t0);
  t.RecordFailure(kName, kSource, kTarget, t0);
  t.RecordSuccess(kName, kSource);
  EXPECT_EQ(t.size(), 1u);  // the pair's record is gone; the source's stays until forgotten
  EXPECT_EQ(t.RecordFailure(kName, kSource, kTarget, t0).in_a_row, 1u);
  t.RecordFailure(kName, kSource, kTarget, t0);
  // Long after the last failure the count starts again.
  EXPECT_EQ(t.RecordFailure(kName, kSource, kTarget, t0 + std::chrono::minutes(16)).in_a_row, 1u);
}

TEST(AuthThrottleTest, TheTableIsBounded) {
  AuthThrottle::Options o;
  o.max_entries = 16;
  AuthThrottle t(o);
  const auto t0 = Clock::now();
  // The guesser's own record is the most recent: spraying other names evicts the oldest first.
  for (int i = 0; i < 100; ++i) {
    t.RecordFailure("iqn.2024-01.test:spray" + std::to_string(i), kSource, kTarget,
                    t0 + seconds(i));
    EXPECT_LE(t.size(), 16u);
  }
  for (int i = 0; i < 3; ++i) t.RecordFailure(kName, kSource, kTarget, t0 + seconds(200));
  EXPECT_EQ(t.size(), 16u);
  EXPECT_GT(t.LockedFor(kName, kSource, kTarget, t0 + seconds(200)), Clock::duration::zero());
}

TEST(AuthThrottleTest, ChangingTheNameDoesNotStartAfreshFromTheSameSource) {
  AuthThrottle t;  // 10 free per source and target
  const auto t0 = Clock::now();
  AuthThrottle::Failure f;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(t.LockedFor("iqn.2024-01.test:n" + std::to_string(i), kSource, kTarget, t0),
              Clock::duration::zero());
    f = t.RecordFailure("iqn.2024-01.test:n" + std::to_string(i), kSource, kTarget, t0);
  }
  EXPECT_EQ(f.in_a_row, 1u);
  EXPECT_EQ(f.from_source, 10u);
  EXPECT_EQ(f.lockout, seconds(1));
  // A name never seen before, from that source, to that target: refused.
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:fresh", kSource, kTarget, t0), seconds(1));
  // Another target, or another source, is not.
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:fresh", kSource, "iqn.2024-01.test:t2", t0),
            Clock::duration::zero());
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:fresh", "192.0.2.8", kTarget, t0),
            Clock::duration::zero());
  // A success of one name does not reset the source: a guesser with one valid login cannot.
  t.RecordSuccess("iqn.2024-01.test:n9", kSource);
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:fresh", kSource, kTarget, t0), seconds(1));
  EXPECT_EQ(t.RecordFailure("iqn.2024-01.test:n10", kSource, kTarget, t0 + seconds(1)).lockout,
            seconds(2));
  // The lockout passes, doubling capped like the pair's.
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:fresh", kSource, kTarget, t0 + seconds(3)),
            Clock::duration::zero());
}

TEST(AuthThrottleTest, IPv6SourcesAreCountedByTheirSlash64) {
  AuthThrottle t;
  const auto t0 = Clock::now();
  for (int i = 0; i < 10; ++i) {
    t.RecordFailure("iqn.2024-01.test:n" + std::to_string(i),
                    "2001:db8:1:2::" + std::to_string(i + 1), kTarget, t0);
  }
  EXPECT_GT(t.LockedFor("iqn.2024-01.test:x", "2001:db8:1:2:ffff::9", kTarget, t0),
            Clock::duration::zero());
  EXPECT_EQ(t.LockedFor("iqn.2024-01.test:x", "2001:db8:1:3::1", kTarget, t0),
            Clock::duration::zero());
  EXPECT_EQ(AuthThrottle::SourcePrefix("2001:db8:1:2:aaaa::1"), "2001:0db8:0001:0002::/64");
  EXPECT_EQ(AuthThrottle::SourcePrefix("::ffff:192.0.2.7"), "192.0.2.7");
  EXPECT_EQ(AuthThrottle::SourcePrefix("192.0.2.7"), "192.0.2.7");
}

}  // namespace auth_throttle_test
}  // namespace iscsigw::iscsi
