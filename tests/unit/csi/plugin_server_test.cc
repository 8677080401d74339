// The endpoint forms iscsigw-csi accepts, and the stale-socket rule: a socket nobody listens on is
// removed, a live one or a file that is not a socket is left alone and refused.
#include "csi/plugin_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace iscsigw::csi {
namespace plugin_server_test {

namespace fs = std::filesystem;

TEST(Endpoint, ParsesUnixAndTcpForms) {
  auto u = ParseEndpoint("unix:///csi/csi.sock");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->kind, Endpoint::Kind::kUnix);
  EXPECT_EQ(u->address, "/csi/csi.sock");
  EXPECT_EQ(u->ToString(), "unix:///csi/csi.sock");
  auto short_form = ParseEndpoint("unix:/var/lib/kubelet/plugins/x/csi.sock");
  ASSERT_TRUE(short_form.ok());
  EXPECT_EQ(short_form->address, "/var/lib/kubelet/plugins/x/csi.sock");
  auto t = ParseEndpoint("tcp://127.0.0.1:0");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->kind, Endpoint::Kind::kTcp);
  EXPECT_EQ(t->address, "127.0.0.1:0");
  EXPECT_EQ(t->ToString(), "tcp://127.0.0.1:0");
}

TEST(Endpoint, RefusesWhatItCannotServe) {
  for (const char* bad : {"", "/csi/csi.sock", "unix://relative.sock", "unix://", "tcp://host",
                          "tcp://:50", "tcp://host:", "tcp://host:8x", "http://h:1"}) {
    auto e = ParseEndpoint(bad);
    EXPECT_FALSE(e.ok()) << bad;
    if (!e.ok()) {
      EXPECT_NE(e.status().message().find("--endpoint"), std::string::npos) << bad;
    }
  }
  EXPECT_FALSE(ParseEndpoint("unix:///" + std::string(200, 'a')).ok());
}

class StaleSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-csi-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A bound unix socket at `path`, listening or not; returns its descriptor.
  int Bind(const std::string& path, bool listen) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    if (listen) {
      EXPECT_EQ(::listen(fd, 1), 0);
    }
    return fd;
  }

  std::string dir_;
};

TEST_F(StaleSocketTest, RemovesASocketNobodyListensOn) {
  const std::string path = dir_ + "/csi.sock";
  ::close(Bind(path, false));  // what a killed plugin leaves behind
  ASSERT_TRUE(fs::exists(path));
  EXPECT_TRUE(RemoveStaleSocket(path).ok());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(RemoveStaleSocket(path).ok());  // nothing there is fine too
}

TEST_F(StaleSocketTest, RefusesALiveSocket) {
  const std::string path = dir_ + "/csi.sock";
  const int fd = Bind(path, true);
  const Status s = RemoveStaleSocket(path);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("another process is listening"), std::string::npos);
  EXPECT_TRUE(fs::exists(path));
  ::close(fd);
}

TEST_F(StaleSocketTest, LeavesAFileThatIsNotASocket) {
  const std::string path = dir_ + "/csi.sock";
  std::ofstream(path) << "data";
  EXPECT_FALSE(RemoveStaleSocket(path).ok());
  EXPECT_TRUE(fs::exists(path));
}

}  // namespace plugin_server_test
}  // namespace iscsigw::csi
