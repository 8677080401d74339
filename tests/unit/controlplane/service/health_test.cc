// The rules of the health service names (controlplane/service/health.h): liveness follows the
// reactors only; readiness the state directory and, when enabled, the shared configuration.
#include "controlplane/service/health.h"

#include <gtest/gtest.h>

namespace iscsigw::service {
namespace {

using SharedHealth = state::StateStore::SharedHealth;

SharedHealth Shared(bool enabled, Status status) {
  SharedHealth h;
  h.enabled = enabled;
  h.loaded = status.ok();
  h.status = std::move(status);
  return h;
}

TEST(Health, LivenessNamesTheReactorsThatDidNotAnswer) {
  EXPECT_TRUE(Liveness({}).ok());
  Status s = Liveness({1, 3});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("reactor(s) 1, 3"), std::string::npos) << s.message();
}

TEST(Health, ReadinessNeedsAWritableStateDirectory) {
  EXPECT_TRUE(Readiness(Status::Ok(), SharedHealth{}).ok());
  Status s = Readiness(IoError("state directory /x cannot be written"), SharedHealth{});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/x"), std::string::npos) << s.message();
}

TEST(Health, ReadinessNeedsTheSharedConfigurationOnlyWhenEnabled) {
  const Status failing(StatusCode::kUnavailable, "rereading the shared configuration: timed out");
  EXPECT_TRUE(Readiness(Status::Ok(), Shared(false, failing)).ok());
  Status s = Readiness(Status::Ok(), Shared(true, failing));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), failing.message());
  EXPECT_TRUE(Readiness(Status::Ok(), Shared(true, Status::Ok())).ok());
  // The state directory is named first.
  s = Readiness(IoError("state directory"), Shared(true, failing));
  EXPECT_EQ(s.message(), "state directory");
}

TEST(Health, AReadinessProbeIsHungAfterTenSecondsOrThreeIntervals) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  EXPECT_EQ(ReadinessProbeLimit(milliseconds(1000)), seconds(10));
  EXPECT_EQ(ReadinessProbeLimit(milliseconds(5000)), seconds(15));
  EXPECT_TRUE(ReadinessProbe(seconds(0), milliseconds(1000)).ok());  // none under way
  EXPECT_TRUE(ReadinessProbe(seconds(10), milliseconds(1000)).ok());
  Status s = ReadinessProbe(seconds(11), milliseconds(1000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("has not finished for 11 s"), std::string::npos) << s.message();
  EXPECT_TRUE(ReadinessProbe(seconds(14), milliseconds(5000)).ok());  // 3 intervals: 15 s
  EXPECT_FALSE(ReadinessProbe(seconds(16), milliseconds(5000)).ok());
}

}  // namespace
}  // namespace iscsigw::service
