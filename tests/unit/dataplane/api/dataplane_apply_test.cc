// Dataplane::Apply publishes a whole configuration or none of it: when a store of the new one
// cannot be opened (or opens at a size the LUN cannot have), the LUNs, their sizes and the targets
// the gateway serves stay those of the old one, and the change can be made once it is fixed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dataplane/api/dataplane.h"
#include "dataplane/backing/allowed_paths.h"
#include "tests/unit/dataplane/iscsi/test_initiator.h"

// Its own namespace: the api tests compile in one unity batch.
namespace iscsigw::api::dataplane_apply_test {
namespace {

using iscsi::test::TestInitiator;

constexpr char kTarget[] = "iqn.2026-12.io.iscsigw:apply-a";
constexpr char kKept[] = "iqn.2026-12.io.iscsigw:apply-b";
constexpr char kNew[] = "iqn.2026-12.io.iscsigw:apply-c";
constexpr uint64_t kMiB = 1u << 20;

LunSpec Ram(uint32_t id, uint64_t size = kMiB) {
  LunSpec l;
  l.id = id;
  l.backing = BackingKind::kRam;
  l.size_bytes = size;
  return l;
}

TargetSpec Target(const std::string& name, std::vector<LunSpec> luns) {
  TargetSpec t;
  t.name = name;
  t.allow_any_initiator = true;
  t.luns = std::move(luns);
  return t;
}

class DataplaneApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/iscsigw-apply-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Options o;
    o.portals = {"127.0.0.1:0"};
    o.reactors = 1;
    auto paths = backing::AllowedPaths::Make({dir_});
    ASSERT_TRUE(paths.ok()) << paths.status().message();
    o.backing.paths = paths.value();
    auto r = Dataplane::Start(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    dp_ = std::move(r.value());
  }
  void TearDown() override {
    if (dp_) dp_->Stop();
    std::filesystem::remove_all(dir_);
  }

  // Target A with LUN 0 of 1 MiB, target B with LUN 0.
  Config Old() const {
    Config c;
    c.targets = {Target(kTarget, {Ram(0)}), Target(kKept, {Ram(0)})};
    return c;
  }
  // A's LUN 0 grown, a LUN 1 added to it, B gone, a new target C with LUN 0 and `last`.
  Config New(const LunSpec& last) const {
    Config c;
    c.targets = {Target(kTarget, {Ram(0, 2 * kMiB), Ram(1)}), Target(kNew, {Ram(0), last})};
    return c;
  }

  // Whether a login to `target` is accepted: the target is in the snapshot the gateway serves.
  bool Serves(const char* target) {
    TestInitiator ini;
    if (!ini.Connect(dp_->portals().at(0))) return false;
    auto r = ini.Login({{"InitiatorName", "iqn.2026-12.io.iscsigw:host"},
                        {"TargetName", target},
                        {"SessionType", "Normal"},
                        {"HeaderDigest", "None"},
                        {"DataDigest", "None"}});
    return r.has_value() && r->login_status() == 0;
  }

  void ExpectOldIntact() {
    const auto a0 = dp_->LunStatusOf(kTarget, 0);
    ASSERT_TRUE(a0.has_value());
    EXPECT_EQ(a0->size_bytes, kMiB);  // not grown
    EXPECT_FALSE(dp_->LunStatusOf(kTarget, 1).has_value());
    EXPECT_TRUE(dp_->LunStatusOf(kKept, 0).has_value());
    EXPECT_FALSE(dp_->LunStatusOf(kNew, 0).has_value());
    EXPECT_FALSE(dp_->LunStatusOf(kNew, 1).has_value());
    EXPECT_TRUE(Serves(kTarget));
    EXPECT_TRUE(Serves(kKept));
    EXPECT_FALSE(Serves(kNew));
  }

  std::string dir_;
  std::unique_ptr<Dataplane> dp_;
};

TEST_F(DataplaneApplyTest, AStoreThatDoesNotOpenLeavesTheOldConfigurationIntact) {
  ASSERT_TRUE(dp_->Apply(Old()).ok());
  LunSpec missing;
  missing.id = 1;
  missing.backing = BackingKind::kFile;
  missing.path = dir_ + "/missing.img";  // create unset: not made
  missing.size_bytes = kMiB;

  const Status s = dp_->Apply(New(missing));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.message();
  EXPECT_NE(s.message().find(std::string("lun 1 of ") + kNew + ": file.path"), std::string::npos)
      << s.message();
  ASSERT_NO_FATAL_FAILURE(ExpectOldIntact());
  EXPECT_FALSE(std::filesystem::exists(missing.path));

  // Once the store can open, the same change applies whole.
  missing.create = true;
  const Status again = dp_->Apply(New(missing));
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(dp_->LunStatusOf(kTarget, 0)->size_bytes, 2 * kMiB);
  EXPECT_TRUE(dp_->LunStatusOf(kTarget, 1).has_value());
  EXPECT_FALSE(dp_->LunStatusOf(kKept, 0).has_value());
  EXPECT_TRUE(dp_->LunStatusOf(kNew, 1).has_value());
  EXPECT_FALSE(Serves(kKept));
  EXPECT_TRUE(Serves(kNew));
}

// The store opens, then is refused: a file whose size is no multiple of the block size.
TEST_F(DataplaneApplyTest, AStoreOpenedAtAWrongSizeIsClosedAndNothingApplied) {
  ASSERT_TRUE(dp_->Apply(Old()).ok());
  const std::string path = dir_ + "/odd.img";
  {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, kMiB + 100), 0);
    ::close(fd);
  }
  LunSpec odd;
  odd.id = 1;
  odd.backing = BackingKind::kFile;
  odd.path = path;

  const Status s = dp_->Apply(New(odd));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find("is not a multiple of block_size 512"), std::string::npos)
      << s.message();
  ASSERT_NO_FATAL_FAILURE(ExpectOldIntact());
}

}  // namespace
}  // namespace iscsigw::api::dataplane_apply_test
