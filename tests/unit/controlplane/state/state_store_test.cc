#include "controlplane/state/state_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "controlplane/state/state_file.h"

namespace iscsigw::state {
namespace {

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

TEST(Bootstrap, MergeIsIdempotentAndKeepsPersistedChanges) {
  v1::State boot;
  auto* t = boot.add_targets();
  t->set_name("demo");
  t->set_allow_any_initiator(true);
  auto* l = t->add_luns();
  l->set_id(0);
  l->mutable_ram();
  l->set_size_bytes(1 << 20);

  v1::State persisted;
  MergeBootstrap(boot, &persisted);
  Normalize(&persisted);
  // The operator changes the target afterwards; a restart with the same bootstrap keeps that.
  persisted.mutable_targets(0)->set_allow_any_initiator(false);
  persisted.mutable_targets(0)->mutable_luns(0)->set_size_bytes(2 << 20);
  v1::State again = persisted;
  MergeBootstrap(boot, &again);
  Normalize(&again);
  EXPECT_EQ(again.SerializeAsString(), persisted.SerializeAsString());
  ASSERT_EQ(again.targets_size(), 1);
  EXPECT_FALSE(again.targets(0).allow_any_initiator());
  EXPECT_EQ(again.targets(0).luns(0).size_bytes(), 2u << 20);
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

}  // namespace
}  // namespace iscsigw::state
