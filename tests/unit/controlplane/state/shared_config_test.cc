// StateStore with a shared configuration: two gateways' stores (without data planes) over one
// in-memory object, and the split of targets between the object and the state file.
#include "controlplane/state/shared_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/state/state_file.h"
#include "controlplane/state/state_store.h"
#include "tests/common/fake_shared_object.h"

namespace iscsigw::state {
namespace shared_config_test {

namespace fs = std::filesystem;
using test::FakeCluster;
using test::FakeObject;

v1::Target RbdTarget(const std::string& name, const std::string& image) {
  v1::Target t;
  t.set_name(QualifyTargetName(name));
  t.set_allow_any_initiator(true);
  auto* l = t.add_luns();
  l->set_id(0);
  l->set_block_size(512);
  l->mutable_rbd()->set_pool("rbd");
  l->mutable_rbd()->set_image(image);
  return t;
}

v1::Target RamTarget(const std::string& name) {
  v1::Target t;
  t.set_name(QualifyTargetName(name));
  auto* l = t.add_luns();
  l->set_id(0);
  l->set_block_size(512);
  l->mutable_ram();
  l->set_size_bytes(1 << 20);
  return t;
}

std::vector<std::string> Names(const v1::State& st) {
  std::vector<std::string> out;
  for (const auto& t : st.targets()) out.push_back(t.name().substr(t.name().find(':') + 1));
  std::sort(out.begin(), out.end());
  return out;
}

// One gateway: its state directory, its store, its view of the object.
struct Gateway {
  Gateway(FakeCluster& cluster, v1::State initial = {}, v1::State redeclared = {},
          bool reachable = true) {
    char tmpl[] = "/tmp/iscsigw-shared-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    Normalize(&initial);
    store = std::make_unique<StateStore>(dir, initial, nullptr);
    EXPECT_TRUE(store->Start().ok());
    object = std::make_shared<FakeObject>(cluster);
    store->EnableShared(
        "rbd/" + std::string(kSharedConfigObject),
        [this, reachable]() -> Result<std::shared_ptr<api::SharedObject>> {
          if (!reachable) return Status(StatusCode::kUnavailable, "the cluster does not answer");
          return std::shared_ptr<api::SharedObject>(object);
        },
        std::move(redeclared));
    if (reachable) WaitAttached();
  }
  ~Gateway() {
    store.reset();
    fs::remove_all(dir);
  }
  void WaitAttached() {
    for (int i = 0; i < 500 && !store->health().ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(store->health().ok()) << store->health().message();
  }
  Status AddTarget(const v1::Target& t) {
    return store->Update([&](v1::State* st) {
      *st->add_targets() = t;
      return Status::Ok();
    });
  }
  Status AddLun(const std::string& target, const v1::Lun& lun) {
    return store->Update([&](v1::State* st) {
      for (auto& t : *st->mutable_targets()) {
        if (t.name() == QualifyTargetName(target)) *t.add_luns() = lun;
      }
      return Status::Ok();
    });
  }
  Status DeleteAll() {
    return store->Update([](v1::State* st) {
      st->clear_targets();
      return Status::Ok();
    });
  }
  std::vector<std::string> Served() const { return Names(*store->Snapshot()); }
  std::vector<std::string> InFile() const {
    auto st = LoadStateDir(dir);
    EXPECT_TRUE(st.ok());
    return Names(st.value());
  }

  std::string dir;
  std::shared_ptr<FakeObject> object;
  std::unique_ptr<StateStore> store;
};

std::vector<std::string> InObject(const FakeCluster& c) {
  auto st = SharedFromData(c.data);
  EXPECT_TRUE(st.ok()) << st.status().message();
  return Names(st.value());
}

TEST(SharedConfig, ChangeThroughOneGatewayIsServedByTheOther) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  EXPECT_EQ(b.Served(), std::vector<std::string>{"one"});
  EXPECT_EQ(InObject(cluster), std::vector<std::string>{"one"});
  EXPECT_TRUE(a.InFile().empty());
  EXPECT_TRUE(b.InFile().empty());
  // An ACL change through the other gateway comes back.
  ASSERT_TRUE(b.store
                  ->Update([](v1::State* st) {
                    st->mutable_targets(0)->set_allow_any_initiator(false);
                    st->mutable_targets(0)->add_acl()->set_initiator("iqn.2026-11.io.example:x");
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_EQ(a.store->Snapshot()->targets(0).acl_size(), 1);
  EXPECT_FALSE(a.store->Snapshot()->targets(0).allow_any_initiator());
  // Deleted through one, gone from both; a shared target emptied of LUNs stays shared.
  ASSERT_TRUE(a.store
                  ->Update([](v1::State* st) {
                    st->mutable_targets(0)->clear_luns();
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(InObject(cluster), std::vector<std::string>{"one"});
  EXPECT_EQ(b.store->Snapshot()->targets(0).luns_size(), 0);
  ASSERT_TRUE(b.DeleteAll().ok());
  EXPECT_TRUE(a.Served().empty());
  EXPECT_TRUE(InObject(cluster).empty());
}

TEST(SharedConfig, AChangeMadeBetweenReadAndWriteIsKept) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  // Gateway 2 writes after gateway 1 read the object and before its compare-and-swap.
  cluster.race = [&] { ASSERT_TRUE(b.AddTarget(RbdTarget("two", "img2")).ok()); };
  a.object->queue_posts = true;  // gateway 1's reread waits for its change, as on its thread
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  a.object->RunPosted();
  const std::vector<std::string> both{"one", "two"};
  EXPECT_EQ(InObject(cluster), both);
  EXPECT_EQ(a.Served(), both);
  EXPECT_EQ(b.Served(), both);
  EXPECT_EQ(cluster.writes, 2);
}

TEST(SharedConfig, AStaleCopyIsRefreshedBeforeTheEditRuns) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  // Gateway 2 missed the notify (a lost watch); its edit still sees "one" and keeps it.
  cluster.data = SharedToData([&] {
    v1::State st;
    *st.add_targets() = RbdTarget("one", "img1");
    *st.add_targets() = RbdTarget("missed", "img3");
    return st;
  }());
  ++cluster.version;
  bool saw_missed = false;
  ASSERT_TRUE(b.store
                  ->Update([&](v1::State* st) {
                    saw_missed = false;
                    for (const auto& t : st->targets()) saw_missed |= t.name().ends_with("missed");
                    *st->add_targets() = RbdTarget("two", "img2");
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_TRUE(saw_missed);
  EXPECT_EQ(InObject(cluster), (std::vector<std::string>{"missed", "one", "two"}));
}

TEST(SharedConfig, LocalTargetsStayInTheStateFileAndKindsDoNotMix) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  ASSERT_TRUE(a.AddTarget(RamTarget("mine")).ok());
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  EXPECT_EQ(a.InFile(), std::vector<std::string>{"mine"});
  EXPECT_EQ(InObject(cluster), std::vector<std::string>{"one"});
  EXPECT_EQ(b.Served(), std::vector<std::string>{"one"});
  v1::Lun ram = RamTarget("x").luns(0);
  ram.set_id(1);
  Status s = b.AddLun("one", ram);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is shared by the gateways"), std::string::npos) << s.message();
  v1::Lun rbd = RbdTarget("x", "img9").luns(0);
  rbd.set_id(1);
  s = a.AddLun("mine", rbd);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot share a target"), std::string::npos) << s.message();
  // An empty target is local until it has an rbd LUN; then it moves.
  v1::Target empty;
  empty.set_name(QualifyTargetName("later"));
  ASSERT_TRUE(a.AddTarget(empty).ok());
  EXPECT_EQ(b.Served(), std::vector<std::string>{"one"});
  rbd.set_id(0);
  ASSERT_TRUE(a.AddLun("later", rbd).ok());
  EXPECT_EQ(b.Served(), (std::vector<std::string>{"later", "one"}));
  EXPECT_EQ(a.InFile(), std::vector<std::string>{"mine"});
}

TEST(SharedConfig, UnreachableObjectServesLocalTargetsAndRefusesSharedChanges) {
  FakeCluster cluster;
  v1::State initial;
  *initial.add_targets() = RamTarget("mine");
  Gateway a(cluster, initial, {}, /*reachable=*/false);
  Status h = a.store->health();
  for (int i = 0; i < 200 && h.message().find("does not answer") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    h = a.store->health();
  }
  EXPECT_EQ(h.code(), StatusCode::kUnavailable);
  EXPECT_NE(h.message().find("does not answer"), std::string::npos) << h.message();
  EXPECT_EQ(a.Served(), std::vector<std::string>{"mine"});
  ASSERT_TRUE(a.AddTarget(RamTarget("mine2")).ok());
  Status s = a.AddTarget(RbdTarget("one", "img1"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("not loaded yet"), std::string::npos) << s.message();
  EXPECT_EQ(a.Served(), (std::vector<std::string>{"mine", "mine2"}));
}

TEST(SharedConfig, HealthSaysLoadedWithTheVersionServedAndWhenItWasRead) {
  FakeCluster cluster;
  const auto before = std::chrono::system_clock::now();
  Gateway a(cluster);
  StateStore::SharedHealth h = a.store->shared_health();
  EXPECT_TRUE(h.enabled);
  EXPECT_TRUE(h.loaded);
  EXPECT_TRUE(h.status.ok()) << h.status.message();
  EXPECT_EQ(h.version, cluster.version);
  EXPECT_GE(h.last_load, before);
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  h = a.store->shared_health();
  EXPECT_EQ(h.version, cluster.version);  // its own write
  // Another gateway's change is served, and its version said.
  Gateway b(cluster);
  ASSERT_TRUE(b.AddTarget(RbdTarget("two", "img2")).ok());
  EXPECT_EQ(a.store->shared_health().version, cluster.version);
}

TEST(SharedConfig, HealthBeforeTheObjectIsReadSaysNotLoaded) {
  FakeCluster cluster;
  Gateway a(cluster, {}, {}, /*reachable=*/false);
  StateStore::SharedHealth h = a.store->shared_health();
  EXPECT_TRUE(h.enabled);
  EXPECT_FALSE(h.loaded);
  EXPECT_EQ(h.version, 0u);
  EXPECT_EQ(h.status.code(), StatusCode::kUnavailable);
}

TEST(SharedConfig, HealthWithoutASharedConfigurationIsNotEnabled) {
  char tmpl[] = "/tmp/iscsigw-shared-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  {
    StateStore store(dir, v1::State(), nullptr);
    ASSERT_TRUE(store.Start().ok());
    EXPECT_FALSE(store.shared_health().enabled);
    EXPECT_TRUE(store.shared_health().status.ok());
  }
  fs::remove_all(dir);
}

TEST(SharedConfig, AFailedRereadIsUnhealthyUntilARereadSucceeds) {
  FakeCluster cluster;
  Gateway a(cluster);
  const auto loaded_at = a.store->shared_health().last_load;
  cluster.read_err = ETIMEDOUT;
  a.object->Notified();  // the reread it queues fails
  StateStore::SharedHealth h = a.store->shared_health();
  EXPECT_TRUE(h.loaded);  // it was, and it serves what it had
  EXPECT_EQ(h.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(h.status.message().find("rereading"), std::string::npos) << h.status.message();
  EXPECT_EQ(h.last_load, loaded_at);
  EXPECT_GE(a.object->reloads, 1);  // and it keeps trying
  cluster.read_err = 0;
  a.object->Resync();
  h = a.store->shared_health();
  EXPECT_TRUE(h.status.ok()) << h.status.message();
  EXPECT_GE(h.last_load, loaded_at);
}

TEST(SharedConfig, AVersionThatFailsToApplyIsUnhealthyAndNotALoadUntilOneApplies) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  const uint64_t served = cluster.version;
  StateStore::SharedHealth h = b.store->shared_health();
  ASSERT_TRUE(h.status.ok()) << h.status.message();
  ASSERT_EQ(h.version, served);
  const auto loaded_at = h.last_load;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a later load has a later time
  cluster.data = "{\"targets\": [{\"name\": \"one\", \"nonsense\": 1}]}";
  ++cluster.version;
  b.object->Notified();  // read, but not taken in
  h = b.store->shared_health();
  EXPECT_TRUE(h.loaded);
  EXPECT_EQ(h.version, served);  // it serves what it had
  EXPECT_EQ(h.status.code(), StatusCode::kFailedPrecondition) << h.status.message();
  EXPECT_NE(h.status.message().find("nonsense"), std::string::npos) << h.status.message();
  EXPECT_EQ(h.last_load, loaded_at);
  b.object->Notified();  // read again, still not taken in: still no load
  EXPECT_EQ(b.store->shared_health().last_load, loaded_at);
  v1::State st;
  *st.add_targets() = RbdTarget("one", "img1");
  *st.add_targets() = RbdTarget("two", "img2");
  cluster.data = SharedToData(st);
  ++cluster.version;
  b.object->Notified();
  h = b.store->shared_health();
  EXPECT_TRUE(h.status.ok()) << h.status.message();
  EXPECT_EQ(h.version, cluster.version);
  EXPECT_GT(h.last_load, loaded_at);
  EXPECT_EQ(b.Served(), (std::vector<std::string>{"one", "two"}));
}

TEST(SharedConfig, ALostWatchIsUnhealthyUntilTheObjectIsWatchedAndReadAgain) {
  FakeCluster cluster;
  Gateway a(cluster);
  a.object->LoseWatch();
  Status s = a.store->shared_health().status;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("lost"), std::string::npos) << s.message();
  a.object->Resync();  // watched again, the object reread
  EXPECT_TRUE(a.store->shared_health().status.ok());
}

TEST(SharedConfig, AWatchTheClusterStoppedConfirmingIsUnhealthy) {
  FakeCluster cluster;
  Gateway a(cluster);
  const int stale_ms =
      static_cast<int>(std::chrono::milliseconds(StateStore::kWatchStaleAfter).count());
  a.object->watch_check = stale_ms - 1;
  EXPECT_TRUE(a.store->shared_health().status.ok());
  a.object->watch_check = stale_ms + 1000;
  Status s = a.store->shared_health().status;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("has not confirmed the watch"), std::string::npos) << s.message();
  a.object->watch_check = -ENOTCONN;
  EXPECT_EQ(a.store->shared_health().status.code(), StatusCode::kUnavailable);
  a.object->watch_check = 5;
  EXPECT_TRUE(a.store->shared_health().status.ok());
}

TEST(SharedConfig, WatchStatusRule) {
  const int stale_ms =
      static_cast<int>(std::chrono::milliseconds(StateStore::kWatchStaleAfter).count());
  EXPECT_TRUE(WatchStatus("rbd/x", false, 0).ok());
  EXPECT_TRUE(WatchStatus("rbd/x", false, stale_ms).ok());
  EXPECT_FALSE(WatchStatus("rbd/x", false, stale_ms + 1).ok());
  EXPECT_FALSE(WatchStatus("rbd/x", false, -ENOTCONN).ok());
  EXPECT_FALSE(WatchStatus("rbd/x", true, 0).ok());
  EXPECT_NE(WatchStatus("rbd/x", true, 0).message().find("rbd/x"), std::string::npos);
}

TEST(SharedConfig, RbdTargetsOfTheStateFileMoveIntoTheObject) {
  FakeCluster cluster;
  {
    v1::State st;
    *st.add_targets() = RbdTarget("both", "img-object");
    cluster.data = SharedToData(st);
  }
  v1::State initial;
  *initial.add_targets() = RbdTarget("both", "img-local");  // the object's copy wins
  *initial.add_targets() = RbdTarget("new", "img-new");     // moves in
  *initial.add_targets() = RamTarget("mine");
  Gateway a(cluster, initial);
  EXPECT_EQ(InObject(cluster), (std::vector<std::string>{"both", "new"}));
  EXPECT_EQ(a.InFile(), std::vector<std::string>{"mine"});
  auto shared = SharedFromData(cluster.data).value();
  EXPECT_EQ(shared.targets(0).luns(0).rbd().image(), "img-object");
  EXPECT_TRUE(a.store->IsShared(QualifyTargetName("both")));
  EXPECT_FALSE(a.store->IsShared(QualifyTargetName("mine")));
}

TEST(SharedConfig, AChangedDeclarationUpdatesTheSharedCopyAndKeepsWhatTheApiDid) {
  FakeCluster cluster;
  Gateway a(cluster);
  v1::Target made = RbdTarget("decl", "img1");
  made.set_alias("old");
  ASSERT_TRUE(a.AddTarget(made).ok());
  // Through the API: an ACL entry and a second LUN.
  ASSERT_TRUE(a.store
                  ->Update([](v1::State* st) {
                    auto* t = st->mutable_targets(0);
                    t->add_acl()->set_initiator("iqn.2026-11.io.example:api");
                    auto* l = t->add_luns();
                    *l = t->luns(0);
                    l->set_id(1);
                    l->mutable_rbd()->set_image("img2");
                    return Status::Ok();
                  })
                  .ok());
  // Another gateway starts with a declaration changed since its last start: a new alias and an
  // ACL entry of its own; the old declaration had an entry the new one drops.
  v1::Target old_decl = RbdTarget("decl", "img1");
  old_decl.set_alias("old");
  old_decl.add_acl()->set_initiator("iqn.2026-11.io.example:dropped");
  v1::Target new_decl = RbdTarget("decl", "img1");
  new_decl.set_alias("new");
  new_decl.add_acl()->set_initiator("iqn.2026-11.io.example:declared");
  v1::State redeclared;
  *redeclared.add_targets() = new_decl;
  (*redeclared.mutable_bootstrap()->mutable_targets())[new_decl.name()] = old_decl;
  Gateway b(cluster, {}, redeclared);
  auto shared = SharedFromData(cluster.data).value();
  ASSERT_EQ(shared.targets_size(), 1);
  const v1::Target& t = shared.targets(0);
  EXPECT_EQ(t.alias(), "new");
  EXPECT_EQ(t.luns_size(), 2);
  std::vector<std::string> acl;
  for (const auto& e : t.acl()) acl.push_back(e.initiator());
  EXPECT_EQ(acl, (std::vector<std::string>{"iqn.2026-11.io.example:api",
                                           "iqn.2026-11.io.example:declared"}));
  // Gateway 1 is told by gateway 2's thread once that has written the object.
  for (int i = 0; i < 500 && a.store->Snapshot()->targets(0).alias() != "new"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a.store->Snapshot()->targets(0).alias(), "new");
}

TEST(SharedConfig, BeforeTheObjectIsReadLocalChangesStillWork) {
  FakeCluster cluster;
  v1::State initial;
  *initial.add_targets() = RbdTarget("waiting", "img1");  // to move in once the object is read
  Gateway a(cluster, initial, {}, /*reachable=*/false);
  ASSERT_TRUE(a.AddTarget(RamTarget("mine")).ok());
  EXPECT_EQ(a.InFile(), (std::vector<std::string>{"mine", "waiting"}));
  EXPECT_EQ(a.AddTarget(RbdTarget("one", "img2")).code(), StatusCode::kUnavailable);
}

TEST(SharedConfig, AMixedTargetFromBeforeStaysAsItIs) {
  FakeCluster cluster;
  v1::State initial;
  v1::Target mixed = RamTarget("mixed");
  *mixed.add_luns() = RbdTarget("x", "img1").luns(0);
  mixed.mutable_luns(1)->set_id(1);
  *initial.add_targets() = mixed;
  Gateway a(cluster, initial);
  ASSERT_TRUE(a.AddTarget(RamTarget("mine")).ok());
  EXPECT_EQ(a.InFile(), (std::vector<std::string>{"mine", "mixed"}));
  EXPECT_TRUE(InObject(cluster).empty());
}

TEST(SharedConfig, ARemovedObjectIsWrittenAgainFromACopy) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  cluster.data.clear();  // removed, and recreated empty by a watch
  ++cluster.version;
  b.object->Resync();
  EXPECT_EQ(InObject(cluster), std::vector<std::string>{"one"});
  EXPECT_EQ(a.Served(), std::vector<std::string>{"one"});
  EXPECT_EQ(b.Served(), std::vector<std::string>{"one"});
  // Deleting every shared target is not a removed object.
  ASSERT_TRUE(b.DeleteAll().ok());
  EXPECT_EQ(cluster.data, "{}");
  EXPECT_TRUE(a.Served().empty());
}

TEST(SharedConfig, ALocalTargetWithOtherLunsKeepsItsNameAndTheSharedOneIsKept) {
  FakeCluster cluster;
  v1::State initial;
  *initial.add_targets() = RamTarget("clash");
  Gateway a(cluster, initial), b(cluster);
  ASSERT_TRUE(b.AddTarget(RbdTarget("clash", "img1")).ok());
  // Gateway 1 serves its own RAM target under that name, not the shared one.
  ASSERT_EQ(a.store->Snapshot()->targets_size(), 1);
  EXPECT_TRUE(a.store->Snapshot()->targets(0).luns(0).has_ram());
  // Its changes keep the shared one in the object.
  ASSERT_TRUE(a.AddTarget(RbdTarget("other", "img2")).ok());
  EXPECT_EQ(InObject(cluster), (std::vector<std::string>{"clash", "other"}));
  EXPECT_EQ(b.Served(), (std::vector<std::string>{"clash", "other"}));
  EXPECT_EQ(a.InFile(), std::vector<std::string>{"clash"});
  // Once the local one is deleted, the shared one is served.
  ASSERT_TRUE(a.store
                  ->Update([](v1::State* st) {
                    auto* targets = st->mutable_targets();
                    for (int i = 0; i < targets->size(); ++i) {
                      if (targets->Get(i).luns_size() > 0 && targets->Get(i).luns(0).has_ram()) {
                        targets->DeleteSubrange(i, 1);
                        break;
                      }
                    }
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(a.Served(), (std::vector<std::string>{"clash", "other"}));
  EXPECT_TRUE(a.store->IsShared(QualifyTargetName("clash")));
  EXPECT_TRUE(a.InFile().empty());
}

TEST(SharedConfig, ObjectThatCannotBeParsedIsNotTakenIn) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  cluster.data = "{\"targets\": [{\"name\": \"one\", \"nonsense\": 1}]}";
  ++cluster.version;
  b.object->Resync();  // as after a lost watch
  EXPECT_EQ(b.Served(), std::vector<std::string>{"one"});
  EXPECT_EQ(b.store->health().code(), StatusCode::kFailedPrecondition);
  Status s = b.AddTarget(RbdTarget("two", "img2"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("nonsense"), std::string::npos) << s.message();
}

TEST(SharedConfig, AWriteOfUnknownOutcomeIsSettledByTheObject) {
  for (const bool lands : {false, true}) {
    FakeCluster cluster;
    Gateway a(cluster), b(cluster);
    cluster.write_err = ETIMEDOUT;
    cluster.write_lands = lands;
    a.object->queue_posts = true;  // the reread runs on the object's thread, after the change
    Status s = a.AddTarget(RbdTarget("one", "img1"));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("may not have been written"), std::string::npos) << s.message();
    EXPECT_TRUE(a.Served().empty());  // until the object tells
    a.object->RunPosted();
    const auto want = lands ? std::vector<std::string>{"one"} : std::vector<std::string>{};
    EXPECT_EQ(a.Served(), want) << lands;
    EXPECT_EQ(b.Served(), want) << lands;  // told when the write landed
  }
}

TEST(SharedConfig, TwoGatewaysWritingARemovedObjectAgainKeepEveryTarget) {
  FakeCluster cluster;
  Gateway a(cluster), b(cluster);
  ASSERT_TRUE(a.AddTarget(RbdTarget("one", "img1")).ok());
  cluster.data.clear();
  ++cluster.version;
  // Gateway 1 writes it again between gateway 2's read and its write.
  b.object->queue_posts = true;  // gateway 1's notify waits for gateway 2's reread to end
  cluster.race = [&] { a.object->Resync(); };
  b.object->Resync();
  b.object->RunPosted();  // its reread: the write loses the race, and it keeps what it serves
  EXPECT_TRUE(cluster.race == nullptr);
  EXPECT_EQ(b.Served(), std::vector<std::string>{"one"});
  EXPECT_EQ(InObject(cluster), std::vector<std::string>{"one"});
  b.object->RunPosted();  // gateway 1's notify
  EXPECT_EQ(b.Served(), std::vector<std::string>{"one"});
  EXPECT_EQ(a.Served(), std::vector<std::string>{"one"});
}

TEST(SharedConfig, ALocalCopyThatGaveWayDoesNotComeBack) {
  FakeCluster cluster;
  Gateway b(cluster);
  ASSERT_TRUE(b.AddTarget(RbdTarget("one", "img-shared")).ok());
  v1::State initial;
  *initial.add_targets() = RbdTarget("one", "img-local");
  Gateway a(cluster, initial);
  EXPECT_TRUE(a.InFile().empty());
  ASSERT_TRUE(b.DeleteAll().ok());
  EXPECT_TRUE(a.Served().empty());
  ASSERT_TRUE(a.AddTarget(RbdTarget("two", "img2")).ok());
  EXPECT_EQ(InObject(cluster), std::vector<std::string>{"two"});
}

TEST(SharedConfig, LocationIsPoolOrPoolAndNamespace) {
  auto p = ParseSharedConfigLocation("rbd", "/c", "gw", "/k");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pool, "rbd");
  EXPECT_EQ(p->ns, "");
  EXPECT_EQ(p->client_id, "gw");
  p = ParseSharedConfigLocation("rbd/cfg", "", "", "");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ns, "cfg");
  for (const char* bad : {"", "/x", "rbd/", "a/b/c"}) {
    EXPECT_FALSE(ParseSharedConfigLocation(bad, "", "", "").ok()) << bad;
  }
}

}  // namespace shared_config_test
}  // namespace iscsigw::state
