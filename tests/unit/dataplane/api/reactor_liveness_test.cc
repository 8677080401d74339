// Dataplane::UnresponsiveReactors, what the liveness probe asks (controlplane/service/health.h):
// a reactor that runs its posted no-op is live; one blocked past the bound is named, and only it;
// once it runs again it is live again.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "dataplane/api/dataplane.h"

// Its own namespace: the api tests compile in one unity batch.
namespace iscsigw::api::reactor_liveness_test {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<Dataplane> Start(unsigned reactors) {
  Options o;
  o.portals = {"127.0.0.1:0"};
  o.reactors = reactors;
  auto r = Dataplane::Start(o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r.value()) : nullptr;
}

// Polls until the answer is `want` (a no-op takes a moment to run, longer on a loaded machine).
bool Becomes(Dataplane& dp, milliseconds within, const std::vector<unsigned>& want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (dp.UnresponsiveReactors(within) == want) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

TEST(ReactorLiveness, RunningReactorsAreLive) {
  auto dp = Start(2);
  ASSERT_NE(dp, nullptr);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(dp->UnresponsiveReactors(milliseconds(1000)).empty());
    std::this_thread::sleep_for(milliseconds(2));
  }
  dp->Stop();
}

TEST(ReactorLiveness, ABlockedReactorIsNamedUntilItRunsAgain) {
  auto dp = Start(2);
  ASSERT_NE(dp, nullptr);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> blocked;
  dp->PostForTest(1, [released, &blocked] {
    blocked.set_value();
    released.wait();  // as a call that never returns would
  });
  blocked.get_future().wait();
  // The first call only posts the no-ops (none is late before it exists); reactor 1's waits past
  // the bound, reactor 0's runs.
  (void)dp->UnresponsiveReactors(milliseconds(50));
  // Polled, not slept: on a loaded machine reactor 0 may take a while to run its no-op.
  EXPECT_TRUE(Becomes(*dp, milliseconds(50), {1}));
  // Within a longer bound it is not yet late.
  EXPECT_TRUE(dp->UnresponsiveReactors(milliseconds(60000)).empty());
  release.set_value();
  EXPECT_TRUE(Becomes(*dp, milliseconds(50), {}));
  dp->Stop();
}

}  // namespace
}  // namespace iscsigw::api::reactor_liveness_test
