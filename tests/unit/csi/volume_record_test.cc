// RecordStore on a real directory: what is saved comes back, and the files are made so that
// nothing planted in or next to the directory is written through or read as a record.
#include "csi/volume_record.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace iscsigw::csi {
namespace volume_record_test {

namespace fs = std::filesystem;

class RecordStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("record-store-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static VolumeRecord Record(std::string id) {
    VolumeRecord r;
    r.volume_id = std::move(id);
    r.target_iqn = "iqn.2026-11.io.iscsigw:pvc-1";
    r.portals = {"10.0.2.2:3260"};
    r.staging_path = "/stage/pvc-1";
    r.fs_type = "ext4";
    r.device = "/dev/sdb";
    return r;
  }

  static std::string Read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  fs::path dir_;
};

TEST_F(RecordStoreTest, SavesAndLoadsARecord) {
  RecordStore store((dir_ / "volumes").string());
  VolumeRecord r = Record("pvc-1");
  r.lun = 3;
  r.multipath_map = "mpatha";
  r.read_only = true;
  r.mount_flags = {"noatime", "discard"};
  ASSERT_TRUE(store.Save(r).ok());
  auto got = store.Load("pvc-1");
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_TRUE(got.value().has_value());
  EXPECT_EQ(got.value()->lun, 3);
  EXPECT_EQ(got.value()->portals, r.portals);
  EXPECT_EQ(got.value()->device, "/dev/sdb");
  EXPECT_EQ(got.value()->multipath_map, "mpatha");
  EXPECT_TRUE(got.value()->access_known);
  EXPECT_TRUE(got.value()->read_only);
  EXPECT_EQ(got.value()->mount_flags, r.mount_flags);
  auto none = store.Load("pvc-2");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.value().has_value());
  ASSERT_TRUE(store.Remove("pvc-1").ok());
  ASSERT_TRUE(store.Remove("pvc-1").ok());
  EXPECT_FALSE(store.Load("pvc-1").value().has_value());
}

TEST_F(RecordStoreTest, KeepsResolvedAddressesAndReadsOlderRecordsWithout) {
  RecordStore store((dir_ / "volumes").string());
  VolumeRecord r = Record("pvc-1");
  r.portals = {"gw.example:3260", "[fd00::2]:3260"};
  r.addresses = {"10.0.2.2:3260", "[fd00::2]:3260"};
  ASSERT_TRUE(store.Save(r).ok());
  EXPECT_EQ(store.Load("pvc-1").value()->addresses, r.addresses);
  // Written before portals were resolved: the portals were the addresses.
  std::ofstream(store.PathOf("pvc-2"))
      << R"({"volumeId": "pvc-2", "targetIqn": "iqn.2026-11.io.iscsigw:pvc-2", "lun": 0,
            "portals": ["10.0.2.2:3260"], "stagingPath": "/stage/pvc-2", "device": "/dev/sdc"})";
  auto old = store.Load("pvc-2");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old.value()->addresses, std::vector<std::string>{"10.0.2.2:3260"});
  // ... and the plugin that wrote it took every session and node record for its own.
  EXPECT_EQ(old.value()->logged_in, std::vector<std::string>{"10.0.2.2:3260"});
  EXPECT_EQ(old.value()->made_node_records, std::vector<std::string>{"10.0.2.2:3260"});
  // ... and did not write down its read-only flag and mount flags: a re-stage cannot check them.
  EXPECT_FALSE(old.value()->access_known);
}

TEST_F(RecordStoreTest, LoadsEveryRecordAndSkipsTemporaryFiles) {
  RecordStore store((dir_ / "volumes").string());
  auto none = store.LoadAll();
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none.value().empty());
  VolumeRecord r = Record("pvc-1");
  r.addresses = r.portals;
  r.logged_in = r.portals;
  ASSERT_TRUE(store.Save(r).ok());
  ASSERT_TRUE(store.Save(Record("pvc-2")).ok());
  std::ofstream(dir_ / "volumes" / ".tmp-abcdef") << "{";
  auto all = store.LoadAll();
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all.value().size(), 2u);
  for (const auto& got : all.value()) {
    EXPECT_EQ(got.logged_in, got.volume_id == "pvc-1" ? r.portals : std::vector<std::string>{});
  }
  std::ofstream(dir_ / "volumes" / "broken.json") << "{";
  EXPECT_FALSE(store.LoadAll().ok());
}

TEST_F(RecordStoreTest, AVolumeIdTooLongForAFileNameIsHashed) {
  RecordStore store((dir_ / "volumes").string());
  // 128 bytes of '/' escape to 384: longer than any file name may be.
  for (const std::string& id : {std::string(128, '/'), std::string(251, 'a')}) {
    const fs::path path = store.PathOf(id);
    EXPECT_LE(path.filename().string().size(), 255u) << path;
    EXPECT_TRUE(path.filename().string().starts_with("+sha256-")) << path;
    ASSERT_TRUE(store.Save(Record(id)).ok()) << path;
    auto got = store.Load(id);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_TRUE(got.value().has_value());
    EXPECT_EQ(got.value()->volume_id, id);
  }
  // One that fits keeps its readable name.
  EXPECT_EQ(fs::path(store.PathOf(std::string(250, 'a'))).filename(),
            std::string(250, 'a') + ".json");
}

TEST_F(RecordStoreTest, KeepsItsDirectoryPrivate) {
  const fs::path volumes = dir_ / "volumes";
  fs::create_directories(volumes);
  fs::permissions(volumes, fs::perms::all);
  RecordStore store(volumes.string());
  ASSERT_TRUE(store.Save(Record("pvc-1")).ok());
  struct stat st {};
  ASSERT_EQ(::lstat(volumes.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::lstat((volumes / "pvc-1.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // The temporary file is gone once the record is in place.
  for (const auto& e : fs::directory_iterator(volumes)) {
    EXPECT_EQ(e.path().filename(), "pvc-1.json");
  }
}

TEST_F(RecordStoreTest, DoesNotWriteThroughASymlinkWhereATemporaryFileWasOnce) {
  const fs::path volumes = dir_ / "volumes";
  fs::create_directories(volumes);
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, volumes / "pvc-1.json.tmp");
  RecordStore store(volumes.string());
  ASSERT_TRUE(store.Save(Record("pvc-1")).ok());
  EXPECT_EQ(Read(victim), "keep me");
  EXPECT_TRUE(fs::is_symlink(volumes / "pvc-1.json.tmp"));
  EXPECT_TRUE(store.Load("pvc-1").value().has_value());
}

TEST_F(RecordStoreTest, DoesNotReadASymlinkAsARecord) {
  RecordStore store((dir_ / "volumes").string());
  RecordStore elsewhere((dir_ / "elsewhere").string());
  ASSERT_TRUE(elsewhere.Save(Record("pvc-1")).ok());
  ASSERT_TRUE(store.Save(Record("pvc-2")).ok());
  fs::create_symlink(elsewhere.PathOf("pvc-1"), store.PathOf("pvc-1"));
  auto got = store.Load("pvc-1");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("symlink"), std::string::npos) << got.status().message();
}

}  // namespace volume_record_test
}  // namespace iscsigw::csi
