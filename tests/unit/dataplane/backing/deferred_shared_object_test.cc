// DeferredSharedObject: unattached it fails as an unreachable object would; Attach hands the
// listener to the real object (a FakeObject here) and has it reread.
#include "dataplane/backing/deferred_shared_object.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/fake_shared_object.h"

namespace iscsigw::backing {
namespace {

TEST(DeferredSharedObjectTest, FailsUntilAttachedThenServesThroughTheRealObject) {
  test::FakeCluster cluster;
  cluster.data = "state";
  auto owned = std::make_shared<DeferredSharedObject>();  // as OfflineRbdStore holds it
  DeferredSharedObject& deferred = *owned;
  std::vector<std::string> heard;
  int lost = 0;
  const uint64_t token =
      deferred.SetListener([&](uint64_t, std::string_view data, std::string_view,
                               std::shared_ptr<void>) { heard.emplace_back(data); },
                           [&] { ++lost; });

  std::string data;
  uint64_t version = 0, out = 0;
  EXPECT_EQ(deferred.Read(&data, &version), -ENOTCONN);
  EXPECT_EQ(deferred.WriteIfVersion(1, "x", &out), -ENOTCONN);
  EXPECT_EQ(deferred.Notify(1, "x", "", std::chrono::seconds(1), SharedObject::Silent::kFence),
            -ENOTCONN);
  deferred.Reload();  // remembered by Attach, which rereads
  // A job posted meanwhile runs at once and sees the object unattached throughout, even if it
  // is attached while the job runs.
  auto real = std::make_shared<test::FakeObject>(cluster);
  int ran = 0;
  deferred.Post([&] {
    ++ran;
    deferred.Attach(real);
    EXPECT_EQ(deferred.Read(&data, &version), -ENOTCONN);
  });
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(real->reloads, 1);  // Attach had the real object reread
  real->Resync();               // the reread hands the state to the listener
  EXPECT_EQ(heard, std::vector<std::string>{"state"});

  ASSERT_EQ(deferred.Read(&data, &version), 0);
  EXPECT_EQ(data, "state");
  ASSERT_EQ(deferred.WriteIfVersion(version, "new", &out), 0);
  EXPECT_EQ(cluster.data, "new");
  real->LoseWatch();
  EXPECT_EQ(lost, 1);
  real->queue_posts = true;
  deferred.Post([&] { ++ran; });
  EXPECT_EQ(real->posted.size(), 1u);  // on the real object's thread
  EXPECT_EQ(owned.use_count(), 2);     // the queued job keeps it alive
  real->RunPosted();
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(owned.use_count(), 1);

  deferred.ClearListener(token);
  real->Resync();
  EXPECT_EQ(heard.size(), 1u);  // cleared on the real object too
  real.reset();                 // the store closed it: unreachable again
  EXPECT_EQ(deferred.Read(&data, &version), -ENOTCONN);
}

}  // namespace
}  // namespace iscsigw::backing
