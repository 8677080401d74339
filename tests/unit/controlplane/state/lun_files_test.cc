#include "controlplane/state/lun_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace iscsigw::state {
namespace lun_files_test {

class LunFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-lunfiles-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto made = api::AllowedPaths::Make({dir_});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    allowed_ = made.value();
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }

  void WriteAt(const std::string& path, off_t off, const std::string& data, off_t size) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, size), 0);
    ASSERT_EQ(::pwrite(fd, data.data(), data.size(), off), static_cast<ssize_t>(data.size()));
    ::close(fd);
  }

  std::string ReadAt(const std::string& path, off_t off, size_t n) {
    std::string out(n, '\0');
    const int fd = ::open(path.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, out.data(), n, off), static_cast<ssize_t>(n));
    ::close(fd);
    return out;
  }

  std::string dir_;
  std::shared_ptr<const api::AllowedPaths> allowed_;
};

TEST(ResolveLunPath, KeepsAbsolutePathsAndResolvesPlainRelativeOnes) {
  EXPECT_EQ(ResolveLunPath("", "/srv/a.img").value(), "/srv/a.img");
  EXPECT_EQ(ResolveLunPath("/luns", "a.img").value(), "/luns/a.img");
  EXPECT_EQ(ResolveLunPath("/luns/", "ns/a.img").value(), "/luns/ns/a.img");
}

TEST(ResolveLunPath, RefusesWhatCouldLeaveTheDirectory) {
  for (const char* bad : {"../a", "a/..", "./a", "a//b", "a/", "..", ".", "snapshots/s"}) {
    auto r = ResolveLunPath("/luns", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ResolveLunPath("/luns", std::string(256, 'a')).ok());
  auto none = ResolveLunPath("", "a.img");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--lun-dir"), std::string::npos);
}

TEST_F(LunFilesTest, CopyKeepsDataAndHolesAndGrowsToTheAskedSize) {
  const std::string src = dir_ + "/src";
  WriteAt(src, 64 << 20, "middle", 256 << 20);
  auto r = CopyLunFile(*allowed_, src, dir_ + "/dst", 512 << 20);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().size_bytes, 512u << 20);
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/dst").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 512 << 20);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_LT(st.st_blocks * 512, 1 << 20);  // still sparse
  EXPECT_EQ(ReadAt(dir_ + "/dst", 64 << 20, 6), "middle");
  EXPECT_EQ(ReadAt(dir_ + "/dst", 0, 4), std::string(4, '\0'));
}

TEST_F(LunFilesTest, CopyRefusesAnExistingTargetAndAShrink) {
  const std::string src = dir_ + "/src";
  WriteAt(src, 0, "x", 1 << 20);
  WriteAt(dir_ + "/taken", 0, "keep", 4);
  auto taken = CopyLunFile(*allowed_, src, dir_ + "/taken", 0);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ReadAt(dir_ + "/taken", 0, 4), "keep");
  auto small = CopyLunFile(*allowed_, src, dir_ + "/small", 4096);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(::access((dir_ + "/small").c_str(), F_OK), 0);
}

TEST_F(LunFilesTest, CloneOnlyRefusesASparseCopy) {
  const std::string src = dir_ + "/src";
  WriteAt(src, 0, "x", 1 << 20);
  // The test directory's file system (ext4 or tmpfs) cannot share blocks.
  if (SharesBlocks(dir_)) GTEST_SKIP() << "this file system shares blocks";
  auto r = CopyLunFile(*allowed_, src, dir_ + "/dst", 0, true, "the source is in use");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("the source is in use"), std::string::npos);
  EXPECT_NE(::access((dir_ + "/dst").c_str(), F_OK), 0);
}

TEST_F(LunFilesTest, RemoveTakesOnlyRegularFiles) {
  const std::string file = dir_ + "/f";
  WriteAt(file, 0, "x", 1);
  EXPECT_TRUE(RemoveLunFile(*allowed_, file).ok());
  EXPECT_NE(::access(file.c_str(), F_OK), 0);
  EXPECT_TRUE(RemoveLunFile(*allowed_, file).ok());  // already gone
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Status s = RemoveLunFile(*allowed_, fifo);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);  // never a LUN file
  EXPECT_EQ(::access(fifo.c_str(), F_OK), 0);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink("/etc/hostname", link.c_str()), 0);
  EXPECT_FALSE(RemoveLunFile(*allowed_, link).ok());  // a symlink is not followed, nor removed
  EXPECT_EQ(::access("/etc/hostname", F_OK), 0);
}

// Copies and removals go only where the allowed paths say: not outside the directory, not
// through a symbolic link planted in it.
TEST_F(LunFilesTest, CopiesAndRemovalsStayInTheAllowedPaths) {
  const std::string src = dir_ + "/src";
  WriteAt(src, 0, "x", 4096);
  auto out = CopyLunFile(*allowed_, src, "/tmp/iscsigw-lunfiles-escape", 0);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(::access("/tmp/iscsigw-lunfiles-escape", F_OK), 0);
  auto in = CopyLunFile(*allowed_, "/etc/hostname", dir_ + "/stolen", 0);
  EXPECT_EQ(in.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(::access((dir_ + "/stolen").c_str(), F_OK), 0);
  ASSERT_EQ(::symlink("/tmp", (dir_ + "/up").c_str()), 0);
  EXPECT_EQ(CopyLunFile(*allowed_, src, dir_ + "/up/copy", 0).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(RemoveLunFile(*allowed_, "/etc/hostname").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(::access("/etc/hostname", F_OK), 0);
}

TEST_F(LunFilesTest, PrepareMakesTheSnapshotDirectory) {
  ASSERT_TRUE(PrepareLunDir(dir_ + "/luns").ok());
  struct stat st {};
  ASSERT_EQ(::stat(SnapshotDir(dir_ + "/luns").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  WriteAt(dir_ + "/plain", 0, "x", 1);
  EXPECT_EQ(PrepareLunDir(dir_ + "/plain").code(), StatusCode::kFailedPrecondition);
  auto cap = CapacityOf(dir_ + "/luns");
  ASSERT_TRUE(cap.ok());
  EXPECT_GT(cap.value().total_bytes, 0u);
  EXPECT_LE(cap.value().available_bytes, cap.value().total_bytes);
}

}  // namespace lun_files_test
}  // namespace iscsigw::state
