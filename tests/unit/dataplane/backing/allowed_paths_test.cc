#include "dataplane/backing/file/allowed_paths.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace iscsigw::backing {
namespace allowed_paths_test {

namespace fs = std::filesystem;

void WriteFile(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string ReadAll(int fd) {
  char buf[64] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The allowed directory `luns` and, beside it, `outside` with a secret the gateway must never
// open. Parametrized: openat2 (false) or the openat(O_NOFOLLOW) walk (true).
class AllowedPathsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-allowed-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    top_ = tmpl;
    luns_ = top_ / "luns";
    outside_ = top_ / "outside";
    fs::create_directories(luns_ / "sub");
    fs::create_directories(outside_);
    WriteFile(luns_ / "a.img", "OK");
    WriteFile(luns_ / "sub" / "b.img", "OK");
    WriteFile(outside_ / "secret", "SECRET");
    auto made = AllowedPaths::Make({luns_.string()}, GetParam());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    allowed_ = made.value();
  }
  void TearDown() override { fs::remove_all(top_); }

  // Opens `p` read-only; "" when refused, else what the file holds.
  std::string OpenRead(const fs::path& p, StatusCode* code = nullptr) {
    auto r = allowed_->Open(p.string(), O_RDONLY);
    if (code) *code = r.ok() ? StatusCode::kOk : r.status().code();
    return r.ok() ? ReadAll(r.value().get()) : std::string();
  }

  fs::path top_, luns_, outside_;
  std::shared_ptr<const AllowedPaths> allowed_;
};

TEST_P(AllowedPathsTest, OpensFilesBeneathTheRoot) {
  EXPECT_EQ(OpenRead(luns_ / "a.img"), "OK");
  EXPECT_EQ(OpenRead(luns_ / "sub" / "b.img"), "OK");
  StatusCode code;
  OpenRead(luns_ / "missing.img", &code);
  EXPECT_EQ(code, StatusCode::kNotFound);
}

TEST_P(AllowedPathsTest, RefusesEverythingElseWithPermissionDenied) {
  const std::string l = luns_.string();
  for (const std::string& p :
       {outside_.string() + "/secret", l + "/../outside/secret", l + "/./a.img", l + "//a.img",
        l + "/sub/../a.img", std::string("luns/a.img"), l, l + "x/a.img",
        std::string("/etc/passwd"), std::string("")}) {
    Status check = allowed_->Check(p);
    EXPECT_EQ(check.code(), StatusCode::kPermissionDenied) << p;
    EXPECT_NE(check.message().find("--backing-allow"), std::string::npos) << check.message();
    auto opened = allowed_->Open(p, O_RDONLY);
    EXPECT_FALSE(opened.ok()) << p;
  }
}

TEST_P(AllowedPathsTest, NeverFollowsASymbolicLink) {
  fs::create_symlink(outside_ / "secret", luns_ / "link.img");
  fs::create_symlink(outside_, luns_ / "dirlink");
  fs::create_symlink(luns_ / "a.img", luns_ / "inside.img");  // even one that stays inside
  fs::create_symlink("../outside/secret", luns_ / "rel.img");
  for (const fs::path& p : {luns_ / "link.img", luns_ / "dirlink" / "secret", luns_ / "inside.img",
                            luns_ / "rel.img"}) {
    StatusCode code;
    EXPECT_EQ(OpenRead(p, &code), "") << p;
    EXPECT_EQ(code, StatusCode::kPermissionDenied) << p;
  }
  // Creating through a dangling link must not create its target.
  fs::create_symlink(outside_ / "planted", luns_ / "new.img");
  auto created = allowed_->Open((luns_ / "new.img").string(), O_RDWR | O_CREAT | O_EXCL, 0600);
  EXPECT_FALSE(created.ok());
  EXPECT_FALSE(fs::exists(outside_ / "planted"));
}

TEST_P(AllowedPathsTest, CreatesAndRemovesBeneathTheRootOnly) {
  auto created =
      allowed_->Open((luns_ / "sub" / "c.img").string(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  struct stat st {};
  ASSERT_EQ(::fstat(created.value().get(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = allowed_->Open((luns_ / "sub" / "c.img").string(), O_RDWR | O_CREAT | O_EXCL, 0600);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);

  EXPECT_TRUE(allowed_->Unlink((luns_ / "sub" / "c.img").string()).ok());
  EXPECT_FALSE(fs::exists(luns_ / "sub" / "c.img"));
  EXPECT_TRUE(allowed_->Unlink((luns_ / "sub" / "c.img").string()).ok());  // gone: Ok
  EXPECT_EQ(allowed_->Unlink((outside_ / "secret").string()).code(), StatusCode::kPermissionDenied);
  // A symbolic link on the way to the file: nothing outside is removed.
  fs::create_symlink(outside_, luns_ / "dirlink");
  EXPECT_EQ(allowed_->Unlink((luns_ / "dirlink" / "secret").string()).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(fs::exists(outside_ / "secret"));
}

TEST_P(AllowedPathsTest, AFifoIsNotALunAndDoesNotHoldTheCaller) {
  ASSERT_EQ(::mkfifo((luns_ / "fifo.img").c_str(), 0600), 0);
  auto r = allowed_->Open((luns_ / "fifo.img").string(), O_RDONLY);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// A directory on the way swapped, as fast as another thread can, with a symbolic link to the
// outside: not one open may reach the secret.
TEST_P(AllowedPathsTest, ARacingRenameNeverReachesOutside) {
  WriteFile(luns_ / "sub" / "secret", "OK");
  fs::create_symlink(outside_, luns_ / "swap");
  std::atomic<bool> stop{false};
  std::thread attacker([&] {
    const std::string a = (luns_ / "sub").string(), b = (luns_ / "swap").string();
    while (!stop.load()) ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
  });
  int opened = 0, leaked = 0;
  for (int i = 0; i < 20000; ++i) {
    for (const char* name : {"sub", "swap"}) {
      auto r = allowed_->Open((luns_ / name / "secret").string(), O_RDONLY);
      if (!r.ok()) continue;
      ++opened;
      if (ReadAll(r.value().get()) != "OK") ++leaked;
    }
  }
  stop = true;
  attacker.join();
  EXPECT_EQ(leaked, 0);
  EXPECT_GT(opened, 0);  // the race was run, not refused wholesale
}

INSTANTIATE_TEST_SUITE_P(Resolution, AllowedPathsTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Walk" : "Openat2"; });

TEST(AllowedPathsMake, RefusesRootsThatAreNotDirectoriesOrDevices) {
  EXPECT_FALSE(AllowedPaths::Make({"relative/dir"}).ok());
  EXPECT_FALSE(AllowedPaths::Make({"/nonexistent/iscsigw"}).ok());
  char tmpl[] = "/tmp/iscsigw-allowed-file-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto file_root = AllowedPaths::Make({tmpl});
  EXPECT_FALSE(file_root.ok());
  ::unlink(tmpl);
  EXPECT_TRUE(AllowedPaths::None()->empty());
  EXPECT_EQ(AllowedPaths::None()->Check("/tmp/x").code(), StatusCode::kPermissionDenied);
}

// A device root allows exactly that device: the node named, and only while it is that device.
TEST(AllowedPathsDevice, OnlyTheNamedDevice) {
  char tmpl[] = "/tmp/iscsigw-allowed-dev-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const std::string dev = (dir / "disk").string(), other = (dir / "other").string();
  // Loop devices 0 and 1 (major 7): opening an unbound one succeeds.
  ASSERT_EQ(::mknod(dev.c_str(), S_IFBLK | 0600, makedev(7, 0)), 0) << std::strerror(errno);
  ASSERT_EQ(::mknod(other.c_str(), S_IFBLK | 0600, makedev(7, 1)), 0);
  auto made = AllowedPaths::Make({dev});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const auto& allowed = *made.value();
  auto ok = allowed.Open(dev, O_RDONLY);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(allowed.Open(other, O_RDONLY).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(allowed.Open(dev, O_RDWR | O_CREAT | O_EXCL, 0600).status().code(),
            StatusCode::kAlreadyExists);  // a device is never created
  EXPECT_EQ(allowed.Unlink(dev).code(), StatusCode::kPermissionDenied);
  // The node replaced by another device: refused.
  ASSERT_EQ(::rename(other.c_str(), dev.c_str()), 0);
  EXPECT_EQ(allowed.Open(dev, O_RDONLY).status().code(), StatusCode::kPermissionDenied);
  fs::remove_all(dir);
}

}  // namespace allowed_paths_test
}  // namespace iscsigw::backing
