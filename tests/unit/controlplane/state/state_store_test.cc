#include "controlplane/state/state_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <vector>

#include "controlplane/state/limits.h"
#include "controlplane/state/state_file.h"
#include "controlplane/state/text_check.h"

namespace iscsigw::state {
namespace state_store_test {

namespace fs = std::filesystem;

class StateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-state-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  static v1::State OneTarget(const std::string& name) {
    v1::State st;
    auto* t = st.add_targets();
    t->set_name(name);
    auto* l = t->add_luns();
    l->set_id(0);
    l->mutable_ram();
    l->set_size_bytes(1 << 20);
    return st;
  }

  std::string dir_;
};

TEST_F(StateDir, MissingFileIsAnEmptyState) {
  auto st = LoadStateDir(dir_);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->targets_size(), 0);
}

TEST_F(StateDir, UpdatePersistsAtomicallyWithMode0600AndReloads) {
  StateStore store(dir_, v1::State(), nullptr);
  ASSERT_TRUE(store.Start().ok());
  Status s = store.Update([](v1::State* st) {
    *st = OneTarget("db");
    st->mutable_targets(0)->mutable_chap()->set_user("u");
    st->mutable_targets(0)->mutable_chap()->set_secret("twelve-bytes!");
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.message();
  struct stat sb {};
  ASSERT_EQ(::stat((dir_ + "/state.json").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_FALSE(fs::exists(dir_ + "/state.json.tmp"));

  auto loaded = LoadStateDir(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_EQ(loaded->targets_size(), 1);
  EXPECT_EQ(loaded->targets(0).name(), "iqn.2026-11.io.iscsigw:db");
  EXPECT_EQ(loaded->targets(0).luns(0).size_bytes(), 1u << 20);
  EXPECT_EQ(loaded->targets(0).chap().secret(), "twelve-bytes!");
}

TEST_F(StateDir, StaleTempFileDoesNotLeakItsMode) {
  Write("state.json.tmp", "junk");
  ::chmod((dir_ + "/state.json.tmp").c_str(), 0644);
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/state.json", "{}", 0600).ok());
  struct stat sb {};
  ASSERT_EQ(::stat((dir_ + "/state.json").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_EQ(Read("state.json"), "{}");
}

// A link planted under the temp file's name: never followed, its target untouched.
TEST_F(StateDir, APlantedTempLinkIsNotFollowed) {
  const std::string victim = dir_ + "/victim";
  { std::ofstream(victim) << "keep"; }
  ASSERT_EQ(::symlink(victim.c_str(), (dir_ + "/state.json.tmp").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/state.json", "{}", 0600).ok());
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep");
  EXPECT_FALSE(fs::is_symlink(dir_ + "/state.json"));
}

TEST(TrustedDir, OnlyTheDaemonsOwnDirectory) {
  auto dir = [](uid_t uid, gid_t gid, mode_t mode) {
    struct stat st {};
    st.st_uid = uid;
    st.st_gid = gid;
    st.st_mode = S_IFDIR | mode;
    return st;
  };
  const uid_t me = 10001;
  const gid_t group = 10001;
  auto check = [&](const struct stat& st) { return CheckTrustedDir("/s", st, me, group); };
  EXPECT_TRUE(check(dir(me, group, 0700)).ok());
  EXPECT_TRUE(check(dir(me, 4242, 0750)).ok());   // another group may read, not write
  EXPECT_TRUE(check(dir(0, group, 02770)).ok());  // a Kubernetes fsGroup volume
  EXPECT_TRUE(check(dir(me, group, 0770)).ok());  // our own group may write
  EXPECT_TRUE(CheckTrustedDir("/s", dir(0, 0, 0700), 0, 0).ok());  // root's own

  const struct stat refused[] = {
      dir(me, group, 0777),    // any user writes
      dir(me, group, 01777),   // sticky does not make it private
      dir(me, 4242, 0770),     // another group writes
      dir(4242, group, 0700),  // another user's
      dir(0, 4242, 0700),      // root's, for another group
  };
  for (const struct stat& st : refused) {
    Status s = check(st);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << std::oct << st.st_mode;
    EXPECT_NE(s.message().find("state dir /s"), std::string::npos) << s.message();
  }
  struct stat file = dir(me, group, 0600);
  file.st_mode = S_IFREG | 0600;
  EXPECT_FALSE(check(file).ok());
}

TEST_F(StateDir, FailedEditChangesNothing) {
  StateStore store(dir_, OneTarget("iqn.2026-11.io.iscsigw:a"), nullptr);
  ASSERT_TRUE(store.Start().ok());
  const std::string before = Read("state.json");
  Status s = store.Update([](v1::State* st) {
    st->mutable_targets(0)->mutable_luns(0)->set_size_bytes(1000);  // not a multiple of 512
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "lun 0 of iqn.2026-11.io.iscsigw:a: size_bytes 1000 is not a multiple of block_size "
            "512");
  EXPECT_EQ(Read("state.json"), before);
  EXPECT_EQ(store.Get().targets(0).luns(0).size_bytes(), 1u << 20);
  s = store.Update([](v1::State*) { return NotFound("target x not found"); });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(Read("state.json"), before);
}

// The state file replaced, its directory not synced (a failing disk): the file holds the change,
// which a restart would serve, so the change stays in effect and the answer says it may not
// survive a crash, never "nothing changed".
TEST_F(StateDir, AFailedDirectorySyncAfterTheRenameKeepsTheChangeAndSaysSo) {
  StateStore store(dir_, OneTarget("iqn.2026-11.io.iscsigw:a"), nullptr);
  ASSERT_TRUE(store.Start().ok());
  internal::fsync_dir = [](int) {
    errno = EIO;
    return -1;
  };
  Status s = store.Update([](v1::State* st) {
    *st->add_targets() = OneTarget("iqn.2026-11.io.iscsigw:b").targets(0);
    return Status::Ok();
  });
  internal::fsync_dir = ::fsync;
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("nothing changed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("in the state file, but not made durable"), std::string::npos)
      << s.message();
  EXPECT_EQ(store.Get().targets_size(), 2);  // in effect, as the file says
  auto loaded = LoadStateDir(dir_);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->targets_size(), 2);
  EXPECT_FALSE(store.health().ok());  // until a write is made durable again
  ASSERT_TRUE(store.Update([](v1::State*) { return Status::Ok(); }).ok());
  EXPECT_TRUE(store.health().ok());
}

TEST_F(StateDir, CorruptFileIsReportedWithItsPathAndLeftAlone) {
  Write("state.json", "{\"targets\": [ {\"name\": ");
  auto st = LoadStateDir(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("state file " + dir_ + "/state.json: "), std::string::npos)
      << st.status().message();
  EXPECT_EQ(Read("state.json"), "{\"targets\": [ {\"name\": ");
}

TEST_F(StateDir, UnknownFieldIsNamed) {
  Write("state.json", R"({"targets": [{"name": "a", "lunz": []}]})");
  auto st = LoadStateDir(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("lunz"), std::string::npos) << st.status().message();
}

TEST_F(StateDir, SemanticallyInvalidFileNamesFileAndField) {
  Write("state.json",
        R"({"targets": [{"name": "a", "luns": [{"id": 0, "ram": {}, "sizeBytes": "1000"}]}]})");
  auto st = LoadStateDir(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(),
            "state file " + dir_ +
                "/state.json: lun 0 of iqn.2026-11.io.iscsigw:a: size_bytes 1000 is not a "
                "multiple of block_size 512");
}

TEST_F(StateDir, ShortChapSecretInFileIsRefused) {
  Write("state.json", R"({"targets": [{"name": "a", "chap": {"user": "u", "secret": "short"}}]})");
  auto st = LoadStateDir(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("chap.secret is 5 bytes"), std::string::npos)
      << st.status().message();
}

v1::State DemoBootstrap(uint64_t size = 1 << 20) {
  v1::State boot;
  auto* t = boot.add_targets();
  t->set_name("demo");
  t->set_allow_any_initiator(true);
  t->add_acl()->set_initiator("iqn.2026-11.io.example:a");
  auto* l = t->add_luns();
  l->set_id(0);
  l->mutable_ram();
  l->set_size_bytes(size);
  return boot;
}

// One start: the bootstrap merged into what was persisted, then normalised, as iscsigwd does.
v1::State Start(const v1::State& boot, v1::State persisted) {
  auto lines = MergeBootstrap(boot, &persisted);
  EXPECT_TRUE(lines.ok()) << lines.status().message();
  Normalize(&persisted);
  return persisted;
}

TEST(Bootstrap, AnUnchangedDeclarationLeavesTheApiChangesAlone) {
  const v1::State boot = DemoBootstrap();
  v1::State persisted = Start(boot, v1::State());
  ASSERT_EQ(persisted.targets_size(), 1);
  // The operator changes the target through the API; a restart with the same bootstrap keeps it.
  persisted.mutable_targets(0)->set_allow_any_initiator(false);
  persisted.mutable_targets(0)->mutable_luns(0)->set_size_bytes(2 << 20);
  v1::State again = Start(boot, persisted);
  EXPECT_EQ(again.SerializeAsString(), persisted.SerializeAsString());
  EXPECT_FALSE(again.targets(0).allow_any_initiator());
  EXPECT_EQ(again.targets(0).luns(0).size_bytes(), 2u << 20);

  // A target deleted through the API stays deleted, a LUN too.
  v1::State no_lun = persisted;
  no_lun.mutable_targets(0)->clear_luns();
  EXPECT_EQ(Start(boot, no_lun).targets(0).luns_size(), 0);
  v1::State deleted = persisted;
  deleted.clear_targets();
  EXPECT_EQ(Start(boot, deleted).targets_size(), 0);
}

TEST(Bootstrap, AChangedDeclarationIsApplied) {
  v1::State persisted = Start(DemoBootstrap(), v1::State());
  persisted.mutable_targets(0)->add_acl()->set_initiator("iqn.2026-11.io.example:api");
  auto* api_lun = persisted.mutable_targets(0)->add_luns();
  api_lun->set_id(5);
  api_lun->mutable_null();
  api_lun->set_size_bytes(1 << 20);

  v1::State boot = DemoBootstrap(4 << 20);
  auto* t = boot.mutable_targets(0);
  t->set_alias("new alias");
  t->set_allow_any_initiator(false);
  t->clear_acl();
  t->add_acl()->set_initiator("iqn.2026-11.io.example:b");
  auto* l1 = t->add_luns();
  l1->set_id(1);
  l1->mutable_null();
  l1->set_size_bytes(1 << 20);
  v1::State after = persisted;
  auto lines = MergeBootstrap(boot, &after);
  ASSERT_TRUE(lines.ok()) << lines.status().message();
  Normalize(&after);
  const auto& got = after.targets(0);
  EXPECT_EQ(got.alias(), "new alias");
  EXPECT_FALSE(got.allow_any_initiator());
  std::vector<std::string> acl;
  for (const auto& e : got.acl()) acl.push_back(e.initiator());
  // a was declared and is not any more; api was never declared; b is new.
  EXPECT_EQ(acl,
            (std::vector<std::string>{"iqn.2026-11.io.example:api", "iqn.2026-11.io.example:b"}));
  ASSERT_EQ(got.luns_size(), 3);
  EXPECT_EQ(got.luns(0).size_bytes(), 4u << 20);  // grown
  EXPECT_EQ(got.luns(1).id(), 5u);                // the API's LUN is left alone
  EXPECT_EQ(got.luns(2).id(), 1u);                // created
  EXPECT_EQ(got.luns(0).serial(), persisted.targets(0).luns(0).serial());
  EXPECT_GE(lines.value().size(), 3u);

  // Now it is recorded: a restart with the same file changes nothing more.
  EXPECT_EQ(Start(boot, after).SerializeAsString(), after.SerializeAsString());
  // And a target deleted through the API comes back only when its declaration changes.
  v1::State deleted = after;
  deleted.clear_targets();
  EXPECT_EQ(Start(boot, deleted).targets_size(), 0);
  boot.mutable_targets(0)->set_alias("changed again");
  EXPECT_EQ(Start(boot, deleted).targets_size(), 1);
}

TEST(Bootstrap, ChangesThatCannotBeMadeInPlaceStopTheStart) {
  const v1::State persisted = Start(DemoBootstrap(4 << 20), v1::State());
  struct Case {
    const char* what;
    std::function<void(v1::Lun*)> change;
  } cases[] = {
      {"cannot shrink", [](v1::Lun* l) { l->set_size_bytes(1 << 20); }},
      {"backing ram cannot become null", [](v1::Lun* l) { l->mutable_null(); }},
      {"block_size 512 cannot become 4096", [](v1::Lun* l) { l->set_block_size(4096); }},
      {"serial", [](v1::Lun* l) { l->set_serial("other"); }},
  };
  for (const auto& c : cases) {
    v1::State boot = DemoBootstrap(4 << 20);
    c.change(boot.mutable_targets(0)->mutable_luns(0));
    v1::State into = persisted;
    auto r = MergeBootstrap(boot, &into);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.status().message().find(c.what), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("lun 0 of iqn.2026-11.io.iscsigw:demo"), std::string::npos);
  }
}

TEST(Bootstrap, WhatIsNoLongerDeclaredIsLeftInPlace) {
  v1::State persisted = Start(DemoBootstrap(), v1::State());
  v1::State empty;
  v1::State after = persisted;
  auto lines = MergeBootstrap(empty, &after);
  ASSERT_TRUE(lines.ok());
  ASSERT_EQ(after.targets_size(), 1);
  EXPECT_EQ(after.targets(0).luns_size(), 1);
  EXPECT_EQ(after.bootstrap().targets_size(), 0);
  ASSERT_EQ(lines.value().size(), 1u);
  EXPECT_NE(lines.value()[0].find("no longer declared"), std::string::npos);
}

TEST(Bootstrap, DiscoveryChapFollowsItsDeclaration) {
  v1::State boot;
  boot.mutable_discovery_chap()->set_user("disc");
  boot.mutable_discovery_chap()->set_secret("0123456789abcdef");
  v1::State persisted = Start(boot, v1::State());
  EXPECT_EQ(persisted.discovery_chap().user(), "disc");
  persisted.clear_discovery_chap();  // cleared through the API: stays cleared
  EXPECT_FALSE(Start(boot, persisted).has_discovery_chap());
  v1::State set = Start(boot, v1::State());
  EXPECT_FALSE(Start(v1::State(), set).has_discovery_chap());  // no longer declared: cleared
}

TEST(Bootstrap, RefusesWhatOnlyTheGatewaySets) {
  v1::State boot = DemoBootstrap();
  auto* l = boot.mutable_targets(0)->mutable_luns(0);
  l->mutable_file()->set_path("/etc/important");
  l->mutable_file()->set_created(true);
  v1::State into;
  EXPECT_FALSE(MergeBootstrap(boot, &into).ok());
  v1::State snap;
  snap.add_snapshots()->set_name("s");
  EXPECT_FALSE(MergeBootstrap(snap, &into).ok());
  // An image a declaration marks as the gateway's would be removed by DeleteLun.
  v1::State image = DemoBootstrap();
  auto* r = image.mutable_targets(0)->mutable_luns(0)->mutable_rbd();
  r->set_pool("rbd");
  r->set_image("db");
  r->set_created(true);
  auto refused = MergeBootstrap(image, &into);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rbd.created"), std::string::npos);
}

TEST(Normalize, APhysicalBlockOfTheLogicalSizeIsTheDefault) {
  v1::State st;
  auto* t = st.add_targets();
  t->set_name("t");
  auto* same = t->add_luns();
  same->mutable_ram();
  same->set_size_bytes(1 << 20);
  same->set_block_size(4096);
  same->set_physical_block_size(4096);
  auto* e512 = t->add_luns();
  e512->set_id(1);
  e512->mutable_ram();
  e512->set_size_bytes(1 << 20);
  e512->set_physical_block_size(4096);  // over the default 512: 512e
  Normalize(&st);
  EXPECT_EQ(st.targets(0).luns(0).physical_block_size(), 0u);
  EXPECT_EQ(st.targets(0).luns(1).block_size(), 512u);
  EXPECT_EQ(st.targets(0).luns(1).physical_block_size(), 4096u);
  auto cfg = ToConfig(st);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg.value().targets[0].luns[1].physical_block_size, 4096u);
  // 512 over 4096-byte blocks is refused by the data plane's checks.
  auto* bad = t->add_luns();
  bad->set_id(2);
  bad->set_block_size(4096);
  bad->set_physical_block_size(512);
  api::LunSpec spec;
  spec.id = 2;
  spec.block_size = 4096;
  spec.physical_block_size = 512;
  spec.size_bytes = 1 << 20;
  EXPECT_FALSE(api::ValidateLun("iqn.2026-11.io.iscsigw:t", spec).ok());
}

TEST(Normalize, FoldsInitiatorShorthandIntoAcl) {
  v1::State st;
  auto* t = st.add_targets();
  t->set_name("x");
  t->add_initiators("iqn.2026-11.io.test:a");
  t->add_acl()->set_initiator("iqn.2026-11.io.test:a");
  t->add_initiators("iqn.2026-11.io.test:b");
  Normalize(&st);
  EXPECT_EQ(st.targets(0).name(), "iqn.2026-11.io.iscsigw:x");
  EXPECT_EQ(st.targets(0).initiators_size(), 0);
  ASSERT_EQ(st.targets(0).acl_size(), 2);
  EXPECT_EQ(st.targets(0).acl(1).initiator(), "iqn.2026-11.io.test:b");
}

TEST_F(StateDir, UpdatePastALimitIsResourceExhaustedAndChangesNothing) {
  Limits limits;
  limits.max_targets = 2;
  limits.max_luns_per_target = 1;
  limits.max_acl_entries_per_target = 1;
  StateStore store(dir_, v1::State(), nullptr, limits);
  ASSERT_TRUE(store.Start().ok());
  auto add_target = [](const std::string& name) {
    return [name](v1::State* st) {
      st->add_targets()->set_name(name);
      return Status::Ok();
    };
  };
  ASSERT_TRUE(store.Update(add_target("a")).ok());
  ASSERT_TRUE(store.Update(add_target("b")).ok());
  const std::string before = Read("state.json");
  Status s = store.Update(add_target("c"));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "targets: the gateway already has 2 targets, the limit (--max-targets)");
  EXPECT_EQ(Read("state.json"), before);
  EXPECT_EQ(store.Snapshot()->targets_size(), 2);

  auto add_acl = [](const std::string& initiator) {
    return [initiator](v1::State* st) {
      st->mutable_targets(0)->add_acl()->set_initiator(initiator);
      return Status::Ok();
    };
  };
  ASSERT_TRUE(store.Update(add_acl("iqn.2026-11.io.test:1")).ok());
  s = store.Update(add_acl("iqn.2026-11.io.test:2"));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "acl of iqn.2026-11.io.iscsigw:a: already has 1 entries, the limit per target "
            "(--max-acl-entries)");
  s = store.Update([](v1::State* st) {
    for (uint32_t id : {0u, 1u}) {
      auto* l = st->mutable_targets(1)->add_luns();
      l->set_id(id);
      l->mutable_null();
      l->set_size_bytes(1 << 20);
    }
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Read("state.json").find("luns"), std::string::npos);
}

TEST(Limits, AStateAlreadyOverALimitMayShrinkButNotGrow) {
  Limits limits;
  limits.max_targets = 1;
  limits.max_acl_entries_per_target = 1;
  v1::State over;
  for (const char* name : {"a", "b", "c"}) over.add_targets()->set_name(name);
  for (const char* i : {"iqn.2026-11.io.test:1", "iqn.2026-11.io.test:2"}) {
    over.mutable_targets(0)->add_acl()->set_initiator(i);
  }
  EXPECT_EQ(CheckLimits(over, v1::State(), limits).code(), StatusCode::kResourceExhausted);

  v1::State fewer = over;
  fewer.mutable_targets()->RemoveLast();
  EXPECT_TRUE(CheckLimits(fewer, over, limits).ok());
  v1::State more = over;
  more.add_targets()->set_name("d");
  EXPECT_EQ(CheckLimits(more, over, limits).code(), StatusCode::kResourceExhausted);
  v1::State same_count_other_change = over;
  same_count_other_change.mutable_targets(1)->set_alias("renamed");
  EXPECT_TRUE(CheckLimits(same_count_other_change, over, limits).ok());
  v1::State more_acl = over;
  more_acl.mutable_targets(0)->add_acl()->set_initiator("iqn.2026-11.io.test:3");
  EXPECT_EQ(CheckLimits(more_acl, over, limits).code(), StatusCode::kResourceExhausted);
}

TEST(Limits, DefaultsMatchWhatTheScsiEngineAddresses) {
  Limits limits;
  EXPECT_EQ(limits.max_targets, 4096u);
  EXPECT_EQ(limits.max_luns_per_target, 256u);
  EXPECT_EQ(limits.max_acl_entries_per_target, 4096u);
  // LUN ids are 0..255: a 257th LUN could not have an id of its own.
  api::LunSpec lun;
  lun.id = kMaxLunsPerTargetCeiling;
  lun.block_size = 512;
  lun.size_bytes = 4096;
  EXPECT_FALSE(api::ValidateLun("t", lun).ok());
  lun.id = kMaxLunsPerTargetCeiling - 1;
  EXPECT_TRUE(api::ValidateLun("t", lun).ok());
}

TEST(TextCheck, FindsControlCharactersAndMalformedUtf8) {
  struct Case {
    std::string text;
    std::string problem;
  };
  const Case cases[] = {
      {"iqn.2026-11.io.x:plain", ""},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe", ""},  // 2-, 3- and 4-byte forms
      {"a\nb", "byte 1 is control character U+000A"},
      {std::string("a\0b", 3), "byte 1 is control character U+0000"},
      {"\x7f", "byte 0 is control character U+007F"},
      {"x\xc2\x85", "byte 1 is control character U+0085"},  // C1 NEL
      {"\xff", "byte 0 (0xff) is not valid UTF-8"},
      {"ab\xc3(", "byte 3 (0x28) is not valid UTF-8"},
      {"\xc0\xaf", "byte 0 (0xc0) is not valid UTF-8"},                 // overlong '/'
      {"\xe0\x80\xaf", "byte 0 starts an invalid UTF-8 sequence"},      // overlong '/'
      {"\xed\xa0\x80", "byte 0 starts an invalid UTF-8 sequence"},      // surrogate
      {"\xf4\x90\x80\x80", "byte 0 starts an invalid UTF-8 sequence"},  // past U+10FFFF
      {"ab\xe2\x82", "byte 2: truncated UTF-8 sequence"},
  };
  for (const auto& c : cases) EXPECT_EQ(TextProblem(c.text), c.problem) << c.text;
}

TEST(TextCheck, EscapeTextLeavesOnlyWellFormedPrintableUtf8) {
  EXPECT_EQ(EscapeText("iqn.2026-11.io.x:caf\xc3\xa9"), "iqn.2026-11.io.x:caf\xc3\xa9");
  EXPECT_EQ(EscapeText("a\nb\x1b[2J"), "a\\x0ab\\x1b[2J");
  EXPECT_EQ(EscapeText(std::string("\0\xff\xe2\x80", 4)), "\\x00\\xff\\xe2\\x80");
  EXPECT_EQ(EscapeText("x\xc2\x85y"), "x\\xc2\\x85y");  // C1 NEL, both bytes
  EXPECT_EQ(EscapeText("back\\slash"), "back\\\\slash");
  EXPECT_EQ(TextProblem(EscapeText("\xed\xa0\x80\x01")), "");
}

TEST(TextCheck, NamesTheFieldPathInNestedAndRepeatedFields) {
  v1::State st;
  st.add_targets()->set_name("a");
  auto* t = st.add_targets();
  t->set_name("b");
  t->add_acl()->set_initiator("iqn.2026-11.io.test:ok");
  t->add_acl()->add_sources("10.0.0.0/8\r");
  Status s = CheckTextFields(st);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "targets[1].acl[1].sources[0]: byte 10 is control character U+000D");
  EXPECT_TRUE(CheckTextFields(v1::State()).ok());
}

TEST_F(StateDir, JsonEscapesOfControlCharactersAreRefusedAtLoad) {
  Write("state.json", R"({"targets": [{"name": "x", "alias": "a\u001b[2Jb"}]})");
  auto st = LoadStateDir(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), "state file " + dir_ +
                                       "/state.json: targets[0].alias: byte 1 is control "
                                       "character U+001B");
}

TEST(ToConfig, RefusesOverlongAliasPathAndNonAsciiSerial) {
  v1::State st;
  auto* t = st.add_targets();
  t->set_name("x");
  t->set_alias(std::string(256, 'a'));
  EXPECT_EQ(ToConfig(st).status().message(),
            "target iqn.2026-11.io.iscsigw:x: alias is longer than 255 bytes");
  t->set_alias(std::string(255, 'a'));
  auto* l = t->add_luns();
  l->set_id(0);
  l->mutable_file()->set_path("/" + std::string(4095, 'p'));
  EXPECT_EQ(ToConfig(st).status().message(),
            "lun 0 of iqn.2026-11.io.iscsigw:x: file.path is longer than 4095 bytes");
  l->mutable_null();
  l->set_size_bytes(4096);
  l->set_block_size(512);
  l->set_serial("s\xc3\xa9rie");
  EXPECT_EQ(ToConfig(st).status().message(),
            "lun 0 of iqn.2026-11.io.iscsigw:x: serial must be printable ASCII");
  l->set_serial("serial-1");
  EXPECT_TRUE(ToConfig(st).ok()) << ToConfig(st).status().message();
}

TEST(ToConfig, RbdBackingBecomesAnRbdLunSpec) {
  v1::State st;
  auto* t = st.add_targets();
  t->set_name("x");
  auto* l = t->add_luns();
  l->set_id(3);
  l->set_block_size(512);
  auto* r = l->mutable_rbd();
  r->set_pool("rbd");
  r->set_image("vol1");
  r->set_namespace_("tenant");
  r->set_conf("/etc/ceph/ceph.conf");
  r->set_client_id("gw");
  r->set_keyring("/etc/ceph/ceph.client.gw.keyring");
  r->set_create(true);
  // Creating an image needs its size; an existing one may give its own (0).
  EXPECT_EQ(ToConfig(st).status().message(),
            "lun 3 of iqn.2026-11.io.iscsigw:x: size_bytes must be set to create an rbd image");
  l->set_size_bytes(64 << 20);
  auto cfg = ToConfig(st);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const api::LunSpec& ls = cfg.value().targets[0].luns[0];
  EXPECT_EQ(ls.backing, api::BackingKind::kRbd);
  EXPECT_EQ(ls.rbd, (api::RbdSpec{"rbd", "vol1", "tenant", "/etc/ceph/ceph.conf", "gw",
                                  "/etc/ceph/ceph.client.gw.keyring"}));
  EXPECT_TRUE(ls.create);
  r->set_create(false);
  l->set_size_bytes(0);
  EXPECT_TRUE(ToConfig(st).ok());
  r->set_image("vol@snap");
  EXPECT_EQ(ToConfig(st).status().message(),
            "lun 3 of iqn.2026-11.io.iscsigw:x: rbd.image vol@snap: character '@' is not allowed");
  r->set_image("vol1");
  r->clear_pool();
  EXPECT_EQ(ToConfig(st).status().message(),
            "lun 3 of iqn.2026-11.io.iscsigw:x: rbd.pool is empty");
  r->set_pool("rbd");
  r->set_conf("ceph.conf");
  EXPECT_EQ(ToConfig(st).status().message(),
            "lun 3 of iqn.2026-11.io.iscsigw:x: rbd.conf must be an absolute path");
  r->set_conf("/etc/ceph/ceph.conf");
  r->set_keyring(std::string("/etc/ceph/k\0ey", 14));
  EXPECT_EQ(ToConfig(st).status().message(),
            "lun 3 of iqn.2026-11.io.iscsigw:x: rbd.keyring holds a control character");
  r->clear_keyring();
  EXPECT_TRUE(ToConfig(st).ok()) << ToConfig(st).status().message();
}

TEST(FaultSpec, RangeAndCapAreCarriedAndAnOverflowingRangeRefused) {
  iscsigw::v1::FaultInjection f;
  f.set_delay_ms(10000);
  f.add_ops("write");
  f.set_offset(1 << 20);
  f.set_length(4096);
  f.set_max_faults(2);
  backing::FaultSpec spec;
  ASSERT_TRUE(ToFaultSpec(f, "lun 0: fault: ", &spec).ok());
  EXPECT_EQ(spec.offset, 1u << 20);
  EXPECT_EQ(spec.length, 4096u);
  EXPECT_EQ(spec.max_faults, 2u);
  EXPECT_FALSE(spec.reads);
  f.set_offset(UINT64_MAX - 10);
  const Status s = ToFaultSpec(f, "lun 0: fault: ", &spec);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overflows"), std::string::npos) << s.message();
}

TEST(FaultSpec, ANanProbabilityIsRefused) {
  // Accepted before, and then a bootstrap declaring it was re-applied at every start.
  iscsigw::v1::FaultInjection f;
  f.set_error("EIO");
  f.set_probability(std::numeric_limits<double>::quiet_NaN());
  backing::FaultSpec spec;
  const Status s = ToFaultSpec(f, "lun 0: fault: ", &spec);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside [0, 1]"), std::string::npos) << s.message();
}

}  // namespace state_store_test
}  // namespace iscsigw::state
