// csi.v1.Node over a fake host: the service behind a real PluginServer on loopback, its host
// commands answered by FakeHostExec, which records every argv and plays scripted results. The
// tests pin the command sequences of each RPC, that repeating one changes nothing, that mkfs runs
// only on a blank device, and that no CHAP secret reaches a log line or an error message.
#include "csi/node_service.h"

#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "csi/plugin_server.h"
#include "csi/work_queue.h"

namespace iscsigw::csi {
namespace node_service_test {

namespace fs = std::filesystem;
using ::csi::v1::NodeServiceCapability;
using ::csi::v1::VolumeCapability;
using ::csi::v1::VolumeUsage;

constexpr char kIqn[] = "iqn.2026-11.io.iscsigw:pvc-1";
constexpr char kPortal[] = "10.0.2.2:3260";
constexpr char kPortal2[] = "10.0.2.2:3261";
constexpr char kByPath[] =
    "/dev/disk/by-path/ip-10.0.2.2:3260-iscsi-iqn.2026-11.io.iscsigw:pvc-1-lun-0";
constexpr char kByPath2[] =
    "/dev/disk/by-path/ip-10.0.2.2:3261-iscsi-iqn.2026-11.io.iscsigw:pvc-1-lun-0";
constexpr char kSecret[] = "initiator-s3cret-42";
constexpr char kSecretIn[] = "target-s3cret-4242";

ExecResult Exit(int code, std::string out = "", std::string err = "") {
  ExecResult r;
  r.exit_code = code;
  r.stdout_data = std::move(out);
  r.stderr_data = std::move(err);
  return r;
}

// Polls `done` until it holds or a few seconds pass; what it last said.
template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Records each command line (argv joined by spaces) and answers it with the result of the
// longest scripted prefix that matches (a one-time answer for that prefix first), else exit 0
// and no output. A command under a held prefix waits in Run until Release.
class FakeHostExec final : public HostExec {
 public:
  Result<ExecResult> Run(const std::vector<std::string>& argv, const ExecOptions&) override {
    std::string line;
    for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
    std::unique_lock lock(mu_);
    commands_.push_back(line);
    if (!held_.empty() && line.starts_with(held_)) {
      ++waiting_;
      cv_.wait(lock, [&] { return held_.empty(); });
      --waiting_;
    }
    const std::string* best = nullptr;
    auto consider = [&](const std::string& prefix) {
      if (line.starts_with(prefix) && (best == nullptr || prefix.size() > best->size())) {
        best = &prefix;
      }
    };
    for (const auto& entry : script_) consider(entry.first);
    for (const auto& entry : once_) consider(entry.first);
    if (best == nullptr) return Exit(0);
    if (auto it = once_.find(*best); it != once_.end() && !it->second.empty()) {
      ExecResult r = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) once_.erase(it);
      return r;
    }
    return script_.at(*best);
  }
  void Answer(const std::string& prefix, ExecResult result) {
    std::lock_guard lock(mu_);
    script_[prefix] = std::move(result);
  }
  // The next command under `prefix` gets `result` (before any Answer for it), once.
  void AnswerOnce(const std::string& prefix, ExecResult result) {
    std::lock_guard lock(mu_);
    once_[prefix].push_back(std::move(result));
  }
  // The commands run since the last call.
  std::vector<std::string> Take() {
    std::lock_guard lock(mu_);
    return std::exchange(commands_, {});
  }
  void Hold(std::string prefix) {
    std::lock_guard lock(mu_);
    held_ = std::move(prefix);
  }
  void Release() {
    std::lock_guard lock(mu_);
    held_.clear();
    cv_.notify_all();
  }
  bool Holding() {
    std::lock_guard lock(mu_);
    return waiting_ > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, ExecResult> script_;
  std::map<std::string, std::deque<ExecResult>> once_;
  std::vector<std::string> commands_;
  std::string held_;
  int waiting_ = 0;
};

class NodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("node-service-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // Every line the service logs, at every level, lands in log_ (and only there).
    log_sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    old_sinks_ = std::exchange(log::Ctl().sinks(), {log_sink_});
    old_level_ = log::Ctl().level();
    log::Ctl().set_level(spdlog::level::trace);
    fake_ = std::make_shared<FakeHostExec>();
    // A host with nothing logged in and nothing mounted, where the device appears at once and
    // holds no file system.
    fake_->Answer("iscsiadm -m session", Exit(21));
    for (const char* portal : {kPortal, kPortal2}) {
      fake_->Answer(std::string("iscsiadm -m node -T ") + kIqn + " -p " + portal + " -o show",
                    Exit(21));
    }
    fake_->Answer(std::string("readlink -e ") + kByPath, Exit(0, "/dev/sdb\n"));
    fake_->Answer(std::string("readlink -e ") + kByPath2, Exit(0, "/dev/sdc\n"));
    fake_->Answer("findmnt", Exit(1));
    fake_->Answer("blkid -p", Exit(2));
    fake_->Answer("blockdev --getsize64", Exit(0, "2147483648\n"));
    // ... and whatever file system it holds fills it.
    fake_->Answer("dumpe2fs -h", Exit(0,
                                      "Block count:              524288\n"
                                      "Block size:               4096\n"));
    fake_->Answer("xfs_info", Exit(0,
                                   "data     =                       bsize=4096   "
                                   "blocks=524288, imaxpct=25\n"));
    fake_->Answer("cat /etc/iscsi/initiatorname.iscsi",
                  Exit(0, "## generated\nInitiatorName=iqn.1993-08.org.debian:01:node-a\n"));
    Start();
  }

  void Start(std::string node_id = "", std::function<void(NodeOptions&)> more = {}) {
    NodeOptions o;
    o.node_id = std::move(node_id);
    o.host_exec = fake_;
    o.state_dir = (dir_ / "state").string();
    o.attach_timeout = std::chrono::milliseconds(300);
    o.poll_interval = std::chrono::milliseconds(5);
    // Two names a DNS server would answer; numeric hosts go through the real getaddrinfo.
    o.resolve_host = [](const std::string& host) -> Result<std::string> {
      if (host == "gw.example") return std::string("10.0.2.2");
      if (host == "gw6.example") return std::string("fd00::2");
      return ResolveHost(host);
    };
    if (more) more(o);
    std::vector<std::unique_ptr<grpc::Service>> services;
    auto node = std::make_unique<NodeService>(std::move(o));
    node_ = node.get();
    services.push_back(std::move(node));
    auto server =
        PluginServer::Start(Endpoint{Endpoint::Kind::kTcp, "127.0.0.1:0"}, std::move(services));
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server.value());
    stub_ = ::csi::v1::Node::NewStub(
        grpc::CreateChannel(server_->endpoint().address, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    server_.reset();
    log_sink_->flush();
    log::Ctl().sinks() = old_sinks_;
    log::Ctl().set_level(old_level_);
    fs::remove_all(dir_);
  }

  std::string Logs() {
    log_sink_->flush();
    return log_.str();
  }

  static VolumeCapability Mount(
      std::string fs_type = "",
      VolumeCapability::AccessMode::Mode mode = VolumeCapability::AccessMode::SINGLE_NODE_WRITER) {
    VolumeCapability cap;
    cap.mutable_mount()->set_fs_type(std::move(fs_type));
    cap.mutable_access_mode()->set_mode(mode);
    return cap;
  }
  static VolumeCapability Block() {
    VolumeCapability cap;
    cap.mutable_block();
    cap.mutable_access_mode()->set_mode(VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    return cap;
  }

  ::csi::v1::NodeStageVolumeRequest StageRequest(VolumeCapability cap = Mount(),
                                                 std::string portals = kPortal) {
    ::csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id("pvc-1");
    req.set_staging_target_path("/stage/pvc-1");
    *req.mutable_volume_capability() = std::move(cap);
    auto& ctx = *req.mutable_volume_context();
    ctx["targetIqn"] = kIqn;
    ctx["lun"] = "0";
    ctx["portals"] = std::move(portals);
    ctx["blockSize"] = "512";
    return req;
  }

  // pvc-2: a block volume at LUN 1 of pvc-1's target, its device `dev` (/dev/sdX).
  ::csi::v1::NodeStageVolumeRequest SecondVolumeOnTarget(const std::string& dev) {
    auto req = StageRequest(Block());
    req.set_volume_id("pvc-2");
    req.set_staging_target_path("/stage/pvc-2");
    (*req.mutable_volume_context())["lun"] = "1";
    fake_->Answer(
        std::string("readlink -e /dev/disk/by-path/ip-10.0.2.2:3260-iscsi-") + kIqn + "-lun-1",
        Exit(0, dev + "\n"));
    return req;
  }

  grpc::Status Stage(const ::csi::v1::NodeStageVolumeRequest& req) {
    grpc::ClientContext ctx;
    ::csi::v1::NodeStageVolumeResponse resp;
    return stub_->NodeStageVolume(&ctx, req, &resp);
  }
  grpc::Status Unstage(std::string volume_id = "pvc-1", std::string path = "/stage/pvc-1") {
    grpc::ClientContext ctx;
    ::csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(std::move(volume_id));
    req.set_staging_target_path(std::move(path));
    ::csi::v1::NodeUnstageVolumeResponse resp;
    return stub_->NodeUnstageVolume(&ctx, req, &resp);
  }
  grpc::Status Publish(VolumeCapability cap, bool readonly = false) {
    grpc::ClientContext ctx;
    ::csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id("pvc-1");
    req.set_staging_target_path("/stage/pvc-1");
    req.set_target_path("/pods/uid/volumes/pvc-1");
    req.set_readonly(readonly);
    *req.mutable_volume_capability() = std::move(cap);
    ::csi::v1::NodePublishVolumeResponse resp;
    return stub_->NodePublishVolume(&ctx, req, &resp);
  }
  grpc::Status Unpublish() {
    grpc::ClientContext ctx;
    ::csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id("pvc-1");
    req.set_target_path("/pods/uid/volumes/pvc-1");
    ::csi::v1::NodeUnpublishVolumeResponse resp;
    return stub_->NodeUnpublishVolume(&ctx, req, &resp);
  }

  // Looking for a node record, and making one.
  std::vector<std::string> ShowCommand(const std::string& portal) {
    return {std::string("iscsiadm -m node -T ") + kIqn + " -p " + portal + " -o show"};
  }
  std::vector<std::string> LoginCommands(const std::string& portal) {
    const std::string node = std::string("iscsiadm -m node -T ") + kIqn + " -p " + portal;
    return {node + " -o new", node + " -o update -n node.startup -v manual"};
  }

  fs::path dir_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> log_sink_;
  std::vector<spdlog::sink_ptr> old_sinks_;
  spdlog::level::level_enum old_level_ = spdlog::level::warn;
  std::shared_ptr<FakeHostExec> fake_;
  NodeService* node_ = nullptr;  // owned by server_
  std::unique_ptr<PluginServer> server_;
  std::unique_ptr<::csi::v1::Node::Stub> stub_;
};

std::vector<std::string> Concat(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

const std::string kNode = std::string("iscsiadm -m node -T ") + kIqn + " -p " + kPortal;

TEST_F(NodeServiceTest, StagesABlankVolumeWithoutChap) {
  ASSERT_TRUE(Stage(StageRequest()).ok());
  EXPECT_EQ(fake_->Take(), Concat({{"iscsiadm -m session"},
                                   ShowCommand(kPortal),
                                   LoginCommands(kPortal),
                                   {kNode + " --login", std::string("readlink -e ") + kByPath,
                                    "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                    "blkid -p -o export /dev/sdb", "blkid -p -o export /dev/sdb",
                                    "mkfs.ext4 -F -q /dev/sdb", "mkdir -p -- /stage/pvc-1",
                                    "mount -t ext4 /dev/sdb /stage/pvc-1"}}));
  std::ifstream record(dir_ / "state" / "volumes" / "pvc-1.json");
  std::stringstream text;
  text << record.rdbuf();
  EXPECT_NE(text.str().find("\"device\": \"/dev/sdb\""), std::string::npos) << text.str();
  EXPECT_NE(text.str().find(kIqn), std::string::npos) << text.str();
}

TEST_F(NodeServiceTest, StagesWithMutualChapAndNoSecretReachesTheLog) {
  auto req = StageRequest(Mount("xfs", VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY));
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(0, "TYPE=xfs\n"));
  auto& sec = *req.mutable_secrets();
  sec["node.session.auth.username"] = "node-user";
  sec["node.session.auth.password"] = kSecret;
  sec["node.session.auth.username_in"] = "gw-user";
  sec["node.session.auth.password_in"] = kSecretIn;
  ASSERT_TRUE(Stage(req).ok());
  const std::string update = kNode + " -o update -n ";
  EXPECT_EQ(fake_->Take(), Concat({{"iscsiadm -m session"},
                                   ShowCommand(kPortal),
                                   LoginCommands(kPortal),
                                   {update + "node.session.auth.authmethod -v CHAP",
                                    update + "node.session.auth.username -v node-user",
                                    update + "node.session.auth.password -v " + kSecret,
                                    update + "node.session.auth.username_in -v gw-user",
                                    update + "node.session.auth.password_in -v " + kSecretIn,
                                    kNode + " --login", std::string("readlink -e ") + kByPath,
                                    "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                    "blkid -p -o export /dev/sdb", "mkdir -p -- /stage/pvc-1",
                                    "mount -t xfs -o ro,nouuid /dev/sdb /stage/pvc-1"}}));
  const std::string logs = Logs();
  EXPECT_EQ(logs.find(kSecret), std::string::npos) << logs;
  EXPECT_EQ(logs.find(kSecretIn), std::string::npos) << logs;
  EXPECT_NE(logs.find("node.session.auth.password -v <redacted>"), std::string::npos) << logs;
  std::ifstream record(dir_ / "state" / "volumes" / "pvc-1.json");
  std::stringstream text;
  text << record.rdbuf();
  EXPECT_EQ(text.str().find(kSecret), std::string::npos);

  // A failing CHAP update names the command, never the secret.
  fake_->Answer(update + "node.session.auth.password ", Exit(7));
  const grpc::Status failed = Stage(req);
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(failed.error_message().find("-n node.session.auth.password -v <redacted>"),
            std::string::npos)
      << failed.error_message();
  EXPECT_EQ(failed.error_message().find(kSecret), std::string::npos);
  EXPECT_EQ(Logs().find(kSecret), std::string::npos);
}

TEST_F(NodeServiceTest, AVolumeWithItsOwnChapLogsInWithTheDerivedSecrets) {
  auto req = StageRequest();
  auto& sec = *req.mutable_secrets();
  sec["node.session.auth.username"] = "node-user";
  sec["node.session.auth.password"] = kSecret;
  sec["node.session.auth.username_in"] = "gw-user";
  sec["node.session.auth.password_in"] = kSecretIn;
  (*req.mutable_volume_context())["chapPerVolume"] = "true";
  ASSERT_TRUE(Stage(req).ok());
  const ChapSecrets own =
      ChapForVolume({"node-user", kSecret, "gw-user", kSecretIn}, "pvc-1").value();
  ASSERT_NE(own.secret, kSecret);
  const std::string update = kNode + " -o update -n ";
  const auto cmds = fake_->Take();
  auto has = [&](const std::string& c) {
    return std::find(cmds.begin(), cmds.end(), c) != cmds.end();
  };
  EXPECT_TRUE(has(update + "node.session.auth.password -v " + own.secret));
  EXPECT_TRUE(has(update + "node.session.auth.password_in -v " + own.secret_in));
  EXPECT_TRUE(has(update + "node.session.auth.username -v node-user"));
  for (const auto& c : cmds) {
    EXPECT_EQ(c.find(kSecret), std::string::npos) << "the Secret's own password reached " << c;
    EXPECT_EQ(c.find(kSecretIn), std::string::npos) << c;
  }
  const std::string logs = Logs();
  EXPECT_EQ(logs.find(own.secret), std::string::npos) << logs;

  // "false": the Secret's own secrets, as without the key.
  ASSERT_TRUE(Unstage().ok());
  fake_->Take();
  (*req.mutable_volume_context())["chapPerVolume"] = "false";
  ASSERT_TRUE(Stage(req).ok());
  const auto plain = fake_->Take();
  EXPECT_NE(
      std::find(plain.begin(), plain.end(), update + "node.session.auth.password -v " + kSecret),
      plain.end());

  // Without CHAP in the secret, or with a value that is not a boolean: refused before any login.
  ASSERT_TRUE(Unstage().ok());
  fake_->Take();
  (*req.mutable_volume_context())["chapPerVolume"] = "true";
  req.clear_secrets();
  EXPECT_EQ(Stage(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  (*req.mutable_volume_context())["chapPerVolume"] = "yes";
  (*req.mutable_secrets())["node.session.auth.username"] = "node-user";
  (*req.mutable_secrets())["node.session.auth.password"] = kSecret;
  EXPECT_EQ(Stage(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(fake_->Take().empty());
}

TEST_F(NodeServiceTest, FormatsOnlyABlankDevice) {
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(0, "DEVNAME=/dev/sdb\nTYPE=ext4\n"));
  ASSERT_TRUE(Stage(StageRequest()).ok());
  auto cmds = fake_->Take();
  for (const auto& c : cmds) EXPECT_FALSE(c.starts_with("mkfs")) << c;
  EXPECT_EQ(std::vector<std::string>(cmds.end() - 3, cmds.end()),
            (std::vector<std::string>{"mount -t ext4 /dev/sdb /stage/pvc-1",
                                      "blockdev --getsize64 /dev/sdb", "dumpe2fs -h /dev/sdb"}));

  // Another file system than the capability asks for: refused, not formatted over.
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(0, "TYPE=xfs\n"));
  grpc::Status s = Stage(StageRequest(Mount("ext4")));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  // A partition table without a file system: refused too.
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(0, "PTUUID=x\nPTTYPE=gpt\n"));
  s = Stage(StageRequest());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  // blkid failing outright: an error naming it, and no mkfs.
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(4));
  s = Stage(StageRequest());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("blkid -p -o export /dev/sdb: exit status 4"), std::string::npos)
      << s.error_message();
  for (const auto& c : fake_->Take()) EXPECT_FALSE(c.starts_with("mkfs")) << c;
}

TEST_F(NodeServiceTest, BlkidThatCannotReadTheDeviceIsNotABlankDevice) {
  // blkid -p exits 2 for "nothing found" and for "cannot open"; only the latter says why.
  fake_->Answer("blkid -p -o export /dev/sdb",
                Exit(2, "", "blkid: error: /dev/sdb: No medium found\n"));
  const grpc::Status s = Stage(StageRequest());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("blkid -p -o export /dev/sdb: exit status 2: blkid: error: "
                                   "/dev/sdb: No medium found"),
            std::string::npos)
      << s.error_message();
  for (const auto& c : fake_->Take()) EXPECT_FALSE(c.starts_with("mkfs")) << c;
}

TEST_F(NodeServiceTest, ASecondProbeRightBeforeMkfsMustAgreeTheDeviceIsBlank) {
  // The first probe saw nothing (the device's first reads came back empty), the second one the
  // file system that is there: it is mounted, not formatted over.
  fake_->AnswerOnce("blkid -p -o export /dev/sdb", Exit(2));
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(0, "TYPE=ext4\n"));
  ASSERT_TRUE(Stage(StageRequest()).ok());
  const auto cmds = fake_->Take();
  EXPECT_EQ(std::count(cmds.begin(), cmds.end(), "blkid -p -o export /dev/sdb"), 2) << cmds.size();
  for (const auto& c : cmds) EXPECT_FALSE(c.starts_with("mkfs")) << c;
  EXPECT_EQ(std::vector<std::string>(cmds.end() - 3, cmds.end()),
            (std::vector<std::string>{"mount -t ext4 /dev/sdb /stage/pvc-1",
                                      "blockdev --getsize64 /dev/sdb", "dumpe2fs -h /dev/sdb"}));
}

TEST_F(NodeServiceTest, NeverFormatsForAReadOnlyAccessMode) {
  for (auto mode : {VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY,
                    VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY}) {
    const grpc::Status s = Stage(StageRequest(Mount("ext4", mode)));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << mode;
    EXPECT_NE(s.error_message().find("holds no file system"), std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find(VolumeCapability::AccessMode::Mode_Name(mode)),
              std::string::npos)
        << s.error_message();
    for (const auto& c : fake_->Take()) {
      EXPECT_FALSE(c.starts_with("mkfs") || c.starts_with("mount")) << c;
    }
    ASSERT_TRUE(Unstage().ok());
  }
}

TEST_F(NodeServiceTest, AFileSystemSmallerThanItsDeviceIsGrownWhenStaged) {
  // A 1 GiB file system restored or cloned onto a 2 GiB volume.
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(0, "TYPE=ext4\n"));
  fake_->Answer("dumpe2fs -h /dev/sdb", Exit(0,
                                             "Block count:              262144\n"
                                             "Block size:               4096\n"));
  ASSERT_TRUE(Stage(StageRequest()).ok());
  auto cmds = fake_->Take();
  EXPECT_EQ(std::vector<std::string>(cmds.end() - 4, cmds.end()),
            (std::vector<std::string>{"mount -t ext4 /dev/sdb /stage/pvc-1",
                                      "blockdev --getsize64 /dev/sdb", "dumpe2fs -h /dev/sdb",
                                      "resize2fs /dev/sdb"}));
  ASSERT_TRUE(Unstage().ok());

  // xfs grows through its mount, which has nouuid: a clone shares its source's UUID.
  fake_->Answer("blkid -p -o export /dev/sdb", Exit(0, "TYPE=xfs\n"));
  fake_->Answer("xfs_info /stage/pvc-1", Exit(0,
                                              "meta-data=/dev/sdb  isize=512  agcount=4\n"
                                              "data     =          bsize=4096   "
                                              "blocks=262144, imaxpct=25\n"));
  fake_->Take();
  ASSERT_TRUE(Stage(StageRequest(Mount("xfs"))).ok());
  cmds = fake_->Take();
  EXPECT_EQ(std::vector<std::string>(cmds.end() - 4, cmds.end()),
            (std::vector<std::string>{"mount -t xfs -o nouuid /dev/sdb /stage/pvc-1",
                                      "blockdev --getsize64 /dev/sdb", "xfs_info /stage/pvc-1",
                                      "xfs_growfs -d /stage/pvc-1"}));
  ASSERT_TRUE(Unstage().ok());

  // A retry that finds it mounted by the try before still grows it.
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                Exit(0, "/dev/sdb rw,relatime\n"));
  ASSERT_TRUE(Stage(StageRequest(Mount("xfs"))).ok());
  cmds = fake_->Take();
  EXPECT_EQ(cmds.back(), "xfs_growfs -d /stage/pvc-1");
  ASSERT_TRUE(Unstage().ok());

  // Read-only: nothing can be grown, and nothing is tried.
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", Exit(1));
  fake_->Take();
  ASSERT_TRUE(
      Stage(StageRequest(Mount("xfs", VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY)))
          .ok());
  for (const auto& c : fake_->Take()) {
    EXPECT_FALSE(c.starts_with("xfs_growfs") || c.starts_with("xfs_info")) << c;
  }
}

TEST_F(NodeServiceTest, RepeatedStageAndUnstageChangeNothing) {
  ASSERT_TRUE(Stage(StageRequest()).ok());
  fake_->Take();
  // Now logged in and mounted.
  fake_->Answer("iscsiadm -m session",
                Exit(0, std::string("tcp: [3] ") + kPortal + ",1 " + kIqn + " (non-flash)\n" +
                            "tcp: [4] 10.0.2.2:3260,1 iqn.2026-11.io.iscsigw:other (non-flash)\n"));
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", Exit(0, "/dev/sdb\n"));
  ASSERT_TRUE(Stage(StageRequest()).ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"iscsiadm -m session", std::string("readlink -e ") + kByPath,
                                      "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      "blockdev --getsize64 /dev/sdb", "dumpe2fs -h /dev/sdb"}));
  // Something else mounted at the staging path: ALREADY_EXISTS.
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", Exit(0, "/dev/sdz\n"));
  EXPECT_EQ(Stage(StageRequest()).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", Exit(0, "/dev/sdb\n"));
  fake_->Take();

  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      "umount -- /stage/pvc-1", kNode + " --logout",
                                      kNode + " -o delete"}));
  EXPECT_FALSE(fs::exists(dir_ / "state" / "volumes" / "pvc-1.json"));
  // Again: nothing mounted, no record, and open-iscsi has nothing of the target left (only
  // another target's session): nothing logged out.
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", Exit(1));
  fake_->Answer("iscsiadm -m session",
                Exit(0, "tcp: [4] 10.0.2.2:3260,1 iqn.2026-11.io.iscsigw:other (non-flash)\n"));
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      "iscsiadm -m session", "iscsiadm -m node"}));
}

TEST_F(NodeServiceTest, UnstageToleratesWhatIsAlreadyGone) {
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  fake_->Take();
  // iscsiadm 21: no session to log out of, no node record to delete.
  fake_->Answer(kNode + " --logout", Exit(21));
  fake_->Answer(kNode + " -o delete", Exit(21));
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      kNode + " --logout", kNode + " -o delete"}));
  // Any other failure is an error naming the command.
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  fake_->Answer(kNode + " --logout", Exit(8));
  const grpc::Status s = Unstage();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find(kNode + " --logout: exit status 8"), std::string::npos)
      << s.error_message();
}

TEST_F(NodeServiceTest, ASessionThatWasThereBeforeIsNotLoggedOutOrDeleted) {
  // An administrator's session and node record for the target.
  fake_->Answer("iscsiadm -m session",
                Exit(0, std::string("tcp: [1] ") + kPortal + ",1 " + kIqn + " (non-flash)\n"));
  fake_->Answer(kNode + " -o show", Exit(0, "node.name = iqn...\n"));
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  for (const auto& c : fake_->Take()) {
    EXPECT_FALSE(c.starts_with("iscsiadm -m node")) << c;  // used as it is
  }
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1"});
  EXPECT_FALSE(fs::exists(dir_ / "state" / "volumes" / "pvc-1.json"));

  // Staged on it again, and meanwhile the administrator logged out and deleted the record: the
  // stage makes its own, which are then ours to end.
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  fake_->Answer("iscsiadm -m session", Exit(21));
  fake_->Answer(kNode + " -o show", Exit(21));
  fake_->Take();
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  auto cmds = fake_->Take();
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), kNode + " -o new"), cmds.end());
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), kNode + " --login"), cmds.end());
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      kNode + " --logout", kNode + " -o delete"}));
}

TEST_F(NodeServiceTest, ANodeRecordThatWasThereBeforeOutlivesOurSession) {
  // No session, but a node record (made by discovery, say): logged in to, not made anew.
  fake_->Answer(kNode + " -o show", Exit(0, "node.name = iqn...\n"));
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  auto cmds = fake_->Take();
  EXPECT_EQ(std::find(cmds.begin(), cmds.end(), kNode + " -o new"), cmds.end());
  EXPECT_EQ(std::find(cmds.begin(), cmds.end(), kNode + " -o update -n node.startup -v manual"),
            cmds.end());
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), kNode + " --login"), cmds.end());
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      kNode + " --logout"}));
}

TEST_F(NodeServiceTest, TwoVolumesOnOneTargetShareItsSessionUntilTheLastUnstages) {
  auto second = SecondVolumeOnTarget("/dev/sdc");
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  // pvc-1's login made the session pvc-2 finds.
  fake_->Answer("iscsiadm -m session",
                Exit(0, std::string("tcp: [1] ") + kPortal + ",1 " + kIqn + " (non-flash)\n"));
  ASSERT_TRUE(Stage(second).ok());
  fake_->Take();
  // pvc-1 goes first: pvc-2 still reads through the session.
  ASSERT_TRUE(Unstage().ok());
  for (const auto& c : fake_->Take()) EXPECT_FALSE(c.starts_with("iscsiadm")) << c;
  // The last volume on the target ends what the plugin made.
  ASSERT_TRUE(Unstage("pvc-2", "/stage/pvc-2").ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-2",
                                      kNode + " --logout", kNode + " -o delete"}));
}

TEST_F(NodeServiceTest, StagesAndUnstagesAMultipathMapOverSeveralPortals) {
  fake_->Answer("ls /sys/block/sdb/holders", Exit(0, "dm-0\n"));
  fake_->Answer("cat /sys/block/dm-0/dm/name", Exit(0, "mpatha\n"));
  fake_->Answer("readlink -e /dev/mapper/mpatha", Exit(0, "/dev/dm-0\n"));
  ASSERT_TRUE(Stage(StageRequest(Mount(), std::string(kPortal) + "," + kPortal2)).ok());
  const std::string node2 = std::string("iscsiadm -m node -T ") + kIqn + " -p " + kPortal2;
  EXPECT_EQ(
      fake_->Take(),
      Concat({{"iscsiadm -m session"},
              ShowCommand(kPortal),
              ShowCommand(kPortal2),
              LoginCommands(kPortal),
              {kNode + " --login"},
              LoginCommands(kPortal2),
              {node2 + " --login", std::string("readlink -e ") + kByPath,
               std::string("readlink -e ") + kByPath2, "ls /sys/block/sdb/holders",
               "cat /sys/block/dm-0/dm/name", "readlink -e /dev/mapper/mpatha",
               "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
               "blkid -p -o export /dev/mapper/mpatha", "blkid -p -o export /dev/mapper/mpatha",
               "mkfs.ext4 -F -q /dev/mapper/mpatha", "mkdir -p -- /stage/pvc-1",
               "mount -t ext4 /dev/mapper/mpatha /stage/pvc-1"}}));
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                Exit(0, "/dev/mapper/mpatha\n"));
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{
                "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", "umount -- /stage/pvc-1",
                "readlink -e /dev/mapper/mpatha", "multipath -f mpatha", kNode + " --logout",
                kNode + " -o delete", node2 + " --logout", node2 + " -o delete"}));
}

TEST_F(NodeServiceTest, NoMultipathMapIsAnErrorThatNamesIt) {
  fake_->Answer("ls /sys/block/sdb/holders", Exit(0, ""));
  const grpc::Status s = Stage(StageRequest(Mount(), std::string(kPortal) + "," + kPortal2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("no multipath map over /dev/sdb, /dev/sdc"), std::string::npos)
      << s.error_message();
}

TEST_F(NodeServiceTest, ADeviceThatNeverAppearsFailsAfterTheDeadline) {
  fake_->Answer(std::string("readlink -e ") + kByPath, Exit(1));
  const grpc::Status s = Stage(StageRequest());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find(std::string(kByPath) + " did not appear"), std::string::npos)
      << s.error_message();
  // The record was written before the login, so Unstage logs out what the half stage did.
  fake_->Take();
  ASSERT_TRUE(Unstage().ok());
  auto cmds = fake_->Take();
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), kNode + " --logout"), cmds.end());
}

TEST_F(NodeServiceTest, RecordsCarryAnUnstageAcrossARestartOnTheSameStateDir) {
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  // A new process on the same directory: the record, not open-iscsi, says what to end.
  server_.reset();
  Start();
  fake_->Take();
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      kNode + " --logout", kNode + " -o delete"}));
}

// What open-iscsi lists on a host where pvc-1 was staged over two portals (a multipath map over
// them) by a plugin whose records are gone, next to another target's session and node record.
void HostWithUnrecordedVolume(FakeHostExec& fake) {
  const std::string other = "iqn.2026-11.io.iscsigw:pvc-10";
  fake.Answer("iscsiadm -m session",
              Exit(0, std::string("tcp: [1] ") + kPortal + ",1 " + kIqn + " (non-flash)\n" +
                          "tcp: [2] " + kPortal2 + ",1 " + kIqn + " (non-flash)\n" + "tcp: [3] " +
                          kPortal + ",1 " + other + " (non-flash)\n"));
  fake.Answer("iscsiadm -m node",
              Exit(0, std::string(kPortal) + ",1 " + kIqn + "\n" + kPortal2 + ",1 " + kIqn + "\n" +
                          kPortal + ",1 " + other + "\n" + kPortal + ",1 " + kIqn + "\n"));
  fake.Answer("ls /sys/block/sdb/holders", Exit(0, "dm-0\n"));
  fake.Answer("ls /sys/block/sdc/holders", Exit(0, "dm-0\n"));
  fake.Answer("cat /sys/block/dm-0/dm/name", Exit(0, "mpatha\n"));
  fake.Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
              Exit(0, "/dev/mapper/mpatha\n"));
}

TEST_F(NodeServiceTest, UnstageWithoutARecordEndsWhatOpenIscsiHasOfTheVolumesTarget) {
  HostWithUnrecordedVolume(*fake_);
  ASSERT_TRUE(Unstage().ok());
  const std::string node2 = std::string("iscsiadm -m node -T ") + kIqn + " -p " + kPortal2;
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{
                "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", "umount -- /stage/pvc-1",
                "iscsiadm -m session", "iscsiadm -m node", std::string("readlink -e ") + kByPath,
                "ls /sys/block/sdb/holders", "cat /sys/block/dm-0/dm/name",
                std::string("readlink -e ") + kByPath2, "ls /sys/block/sdc/holders",
                "cat /sys/block/dm-0/dm/name", "multipath -f mpatha", kNode + " --logout",
                node2 + " --logout", kNode + " -o delete", node2 + " -o delete"}));
  EXPECT_NE(Logs().find("no record on this node"), std::string::npos) << Logs();

  // Done: nothing of the target is left, and a repeat finds nothing to end.
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", Exit(1));
  fake_->Answer("iscsiadm -m session",
                Exit(0, std::string("tcp: [3] ") + kPortal +
                            ",1 iqn.2026-11.io.iscsigw:pvc-10 (non-flash)\n"));
  fake_->Answer("iscsiadm -m node",
                Exit(0, std::string(kPortal) + ",1 iqn.2026-11.io.iscsigw:pvc-10\n"));
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      "iscsiadm -m session", "iscsiadm -m node"}));
  // ... and with nothing at all: iscsiadm's "no objects found".
  fake_->Answer("iscsiadm -m session", Exit(21));
  fake_->Answer("iscsiadm -m node", Exit(21, "", "iscsiadm: No records found\n"));
  ASSERT_TRUE(Unstage().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                                      "iscsiadm -m session", "iscsiadm -m node"}));
}

TEST_F(NodeServiceTest, UnstageWithoutARecordLeavesAPortalAnotherRecordedVolumeUses) {
  // pvc-2, LUN 1 of pvc-1's target, staged and recorded at the first portal.
  auto second = SecondVolumeOnTarget("/dev/sdd");
  ASSERT_TRUE(Stage(second).ok());
  HostWithUnrecordedVolume(*fake_);
  fake_->Take();
  ASSERT_TRUE(Unstage().ok());
  const std::string node2 = std::string("iscsiadm -m node -T ") + kIqn + " -p " + kPortal2;
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{
                "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", "umount -- /stage/pvc-1",
                "iscsiadm -m session", "iscsiadm -m node", std::string("readlink -e ") + kByPath2,
                "ls /sys/block/sdc/holders", "cat /sys/block/dm-0/dm/name", "multipath -f mpatha",
                node2 + " --logout", node2 + " -o delete"}));
  EXPECT_TRUE(fs::exists(dir_ / "state" / "volumes" / "pvc-2.json"));
}

TEST_F(NodeServiceTest, UnstageWithoutARecordReportsAnIscsiadmThatFails) {
  HostWithUnrecordedVolume(*fake_);
  fake_->Answer(kNode + " --logout", Exit(8, "", "iscsiadm: session in use\n"));
  grpc::Status s = Unstage();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find(kNode + " --logout: exit status 8"), std::string::npos)
      << s.error_message();
  // No node record is deleted under a session still logged in.
  for (const auto& c : fake_->Take()) EXPECT_FALSE(c.ends_with("-o delete")) << c;
  // Listing fails: no answer that says all is gone.
  fake_->Answer("iscsiadm -m session", Exit(1, "", "iscsiadm: can not connect to iSCSI daemon\n"));
  s = Unstage();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("iscsiadm -m session: exit status 1"), std::string::npos)
      << s.error_message();
  fake_->Answer("iscsiadm -m session", Exit(21));
  fake_->Answer("iscsiadm -m node", Exit(6, "", "iscsiadm: Could not read records\n"));
  EXPECT_EQ(Unstage().error_code(), grpc::StatusCode::INTERNAL);
}

TEST_F(NodeServiceTest, UnstageWithoutARecordOfAnIdThatNamesNoTargetIsOkAndTouchesNoTarget) {
  // A static volume's handle need not be a plain name: a kubelet retry after an unstage that
  // worked finds no record, and must get OK (an unstage is idempotent), not an error for ever.
  HostWithUnrecordedVolume(*fake_);
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/x", Exit(0, "/dev/sdb\n"));
  for (const std::string& id : std::vector<std::string>{"PVC-1", "iqn.2026-11.io.iscsigw:pvc-1",
                                                        "pvc_1", "a:b", std::string(65, 'a')}) {
    const grpc::Status s = Unstage(id, "/stage/x");
    EXPECT_TRUE(s.ok()) << id << ": " << s.error_message();
    // The staging path is unmounted all the same; open-iscsi is not asked, so no session is
    // logged out and no node record deleted.
    EXPECT_EQ(fake_->Take(),
              (std::vector<std::string>{"findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/x",
                                        "umount -- /stage/x"}))
        << id;
  }
}

TEST_F(NodeServiceTest, PublishesAndUnpublishesAFileSystemIdempotently) {
  // Not staged yet: nothing mounted at the staging path.
  EXPECT_EQ(Publish(Mount()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  fake_->Take();
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                Exit(0, "/dev/sdb rw,relatime\n"));
  ASSERT_TRUE(Publish(Mount(), /*readonly=*/true).ok());
  EXPECT_EQ(fake_->Take(), (std::vector<std::string>{
                               "findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1",
                               "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                               "mkdir -p -- /pods/uid/volumes/pvc-1",
                               "mount --bind -o ro /stage/pvc-1 /pods/uid/volumes/pvc-1"}));
  // Published: the staging mount's source, read-only as asked.
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1",
                Exit(0, "/dev/sdb ro,relatime\n"));
  ASSERT_TRUE(Publish(Mount(), true).ok());
  EXPECT_EQ(fake_->Take(), (std::vector<std::string>{
                               "findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1",
                               "findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1"}));
  ASSERT_TRUE(Unpublish().ok());
  EXPECT_EQ(fake_->Take(),
            (std::vector<std::string>{
                "findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1",
                "umount -- /pods/uid/volumes/pvc-1", "rm -df -- /pods/uid/volumes/pvc-1"}));
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1", Exit(1));
  ASSERT_TRUE(Unpublish().ok());
  EXPECT_EQ(fake_->Take(), (std::vector<std::string>{
                               "findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1",
                               "rm -df -- /pods/uid/volumes/pvc-1"}));
}

TEST_F(NodeServiceTest, PublishRefusesWhatElseIsMountedAtTheTarget) {
  const std::string target = "findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1";
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1",
                Exit(0, "/dev/sdb rw,relatime\n"));
  // Another file system, a directory of this one, this one read-only when rw is asked for.
  for (const std::string other :
       {"/dev/sdz rw,relatime", "/dev/sdb[/lost+found] rw,relatime", "/dev/sdb ro,relatime"}) {
    fake_->Answer(target, Exit(0, other + "\n"));
    const grpc::Status s = Publish(Mount());
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << other;
    EXPECT_NE(s.error_message().find("target_path /pods/uid/volumes/pvc-1 has "), std::string::npos)
        << s.error_message();
  }
  for (const auto& c : fake_->Take()) EXPECT_FALSE(c.starts_with("mount")) << c;
  fake_->Answer(target, Exit(0, "/dev/sdb rw,relatime\n"));
  EXPECT_TRUE(Publish(Mount()).ok());

  // Raw block: the device node bound onto the file shows as devtmpfs[/sdX]; its numbers say
  // whether it is this volume's.
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  fake_->Answer(target, Exit(0, "udev[/sdz] rw,nosuid\n"));
  fake_->Answer("stat -L -c %t:%T -- /dev/sdb", Exit(0, "8:10\n"));
  fake_->Answer("stat -L -c %t:%T -- /pods/uid/volumes/pvc-1", Exit(0, "41:90\n"));
  fake_->Take();
  EXPECT_EQ(Publish(Block()).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  fake_->Answer("stat -L -c %t:%T -- /pods/uid/volumes/pvc-1", Exit(0, "8:10\n"));
  EXPECT_EQ(Publish(Block(), /*readonly=*/true).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_TRUE(Publish(Block()).ok());
  for (const auto& c : fake_->Take()) EXPECT_FALSE(c.starts_with("mount")) << c;
}

TEST_F(NodeServiceTest, RestagingWithAnythingElseIsAlreadyExistsAndKeepsTheRecord) {
  auto staged = StageRequest(Mount("ext4"));
  (*staged.mutable_volume_capability()->mutable_mount()->add_mount_flags()) = "noatime";
  ASSERT_TRUE(Stage(staged).ok());
  const fs::path record = dir_ / "state" / "volumes" / "pvc-1.json";
  std::stringstream before;
  before << std::ifstream(record).rdbuf();
  fake_->Take();
  std::vector<std::pair<std::string, ::csi::v1::NodeStageVolumeRequest>> others;
  auto with = [&](std::string what, auto change) {
    auto req = staged;
    change(req);
    others.emplace_back(std::move(what), std::move(req));
  };
  with("targetIqn", [](auto& r) {
    (*r.mutable_volume_context())["targetIqn"] = "iqn.2026-11.io.iscsigw:pvc-9";
  });
  with("lun", [](auto& r) { (*r.mutable_volume_context())["lun"] = "1"; });
  with("portals", [](auto& r) { (*r.mutable_volume_context())["portals"] = kPortal2; });
  with("access", [](auto& r) { *r.mutable_volume_capability() = Block(); });
  with("access",
       [](auto& r) { r.mutable_volume_capability()->mutable_mount()->set_fs_type("xfs"); });
  with("access mode", [](auto& r) {
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(
        VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY);
  });
  with("mount_flags",
       [](auto& r) { r.mutable_volume_capability()->mutable_mount()->clear_mount_flags(); });
  for (const auto& [what, req] : others) {
    const grpc::Status s = Stage(req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << what;
    EXPECT_NE(s.error_message().find("staged on this node with " + what + " "), std::string::npos)
        << s.error_message();
    std::stringstream after;
    after << std::ifstream(record).rdbuf();
    EXPECT_EQ(after.str(), before.str()) << what;
  }
  EXPECT_TRUE(fake_->Take().empty());  // decided before anything reached the host
  // The same again, ext4 being the default: fine.
  staged.mutable_volume_capability()->mutable_mount()->clear_fs_type();
  EXPECT_TRUE(Stage(staged).ok());
}

TEST_F(NodeServiceTest, PublishesARawBlockDeviceOntoAFile) {
  EXPECT_EQ(Publish(Block()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(Stage(StageRequest(Block())).ok());
  // Block access: logged in, nothing formatted or mounted.
  for (const auto& c : fake_->Take()) {
    EXPECT_FALSE(c.starts_with("mkfs") || c.starts_with("mount") || c.starts_with("blkid")) << c;
  }
  ASSERT_TRUE(Publish(Block()).ok());
  EXPECT_EQ(fake_->Take(), (std::vector<std::string>{
                               "findmnt -n -o SOURCE,OPTIONS --mountpoint /pods/uid/volumes/pvc-1",
                               "mkdir -p -- /pods/uid/volumes", "touch -- /pods/uid/volumes/pvc-1",
                               "mount --bind /dev/sdb /pods/uid/volumes/pvc-1"}));
}

TEST_F(NodeServiceTest, ExpandRescansAndGrowsTheFileSystem) {
  ::csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id("pvc-1");
  req.set_volume_path("/pods/uid/volumes/pvc-1");
  req.mutable_capacity_range()->set_required_bytes(2147483648);
  {
    grpc::ClientContext ctx;
    ::csi::v1::NodeExpandVolumeResponse resp;
    EXPECT_EQ(stub_->NodeExpandVolume(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  ASSERT_TRUE(Stage(StageRequest()).ok());
  fake_->Take();
  grpc::ClientContext ctx;
  ::csi::v1::NodeExpandVolumeResponse resp;
  ASSERT_TRUE(stub_->NodeExpandVolume(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.capacity_bytes(), 2147483648);
  EXPECT_EQ(fake_->Take(), (std::vector<std::string>{kNode + " -R", "blockdev --getsize64 /dev/sdb",
                                                     "resize2fs /dev/sdb"}));
}

TEST_F(NodeServiceTest, StatsReportBytesAndInodesOrNotFound) {
  ::csi::v1::NodeGetVolumeStatsRequest req;
  req.set_volume_id("pvc-1");
  req.set_volume_path(dir_.string());
  grpc::ClientContext ctx;
  ::csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(stub_->NodeGetVolumeStats(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.usage_size(), 2);
  EXPECT_EQ(resp.usage(0).unit(), VolumeUsage::BYTES);
  EXPECT_GT(resp.usage(0).total(), 0);
  EXPECT_LE(resp.usage(0).available(), resp.usage(0).total());
  EXPECT_EQ(resp.usage(1).unit(), VolumeUsage::INODES);
  EXPECT_GT(resp.usage(1).total(), 0);

  req.set_volume_path((dir_ / "gone").string());
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->NodeGetVolumeStats(&ctx2, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(NodeServiceTest, StatsOfAHungMountAnswerInTimeAndBlockNoWorker) {
  // A probe that never returns until the test ends, as statvfs on a mount whose I/O hangs.
  auto gate = std::make_shared<std::promise<void>>();
  std::shared_future<void> open = gate->get_future().share();
  server_.reset();
  Start("", [open](NodeOptions& o) {
    o.workers = 1;
    // A healthy probe (a thread started, statvfs) must finish inside it on a loaded machine.
    o.stats_timeout = std::chrono::milliseconds(1000);
    o.max_stats_probes = 2;
    o.stat_volume = [open](const std::string& path) -> Result<VolumeStats> {
      if (path == "/hung") open.wait();
      VolumeStats v;
      v.bytes_total = 1000;
      return v;
    };
  });
  auto stats = [&](const std::string& path) {
    ::csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id("pvc-1");
    req.set_volume_path(path);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ::csi::v1::NodeGetVolumeStatsResponse resp;
    return stub_->NodeGetVolumeStats(&ctx, req, &resp);
  };
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(stats("/hung").error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The volume's other calls, on the one worker, are not held up by it.
  EXPECT_TRUE(Stage(StageRequest()).ok());
  EXPECT_TRUE(stats("/pods/uid/volumes/pvc-1").ok());
  // Two hung probes are the most allowed: a third call is refused at once.
  EXPECT_EQ(stats("/hung").error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(stats("/pods/uid/volumes/pvc-1").error_code(), grpc::StatusCode::UNAVAILABLE);
  gate->set_value();
  EXPECT_TRUE(Eventually([&] { return stats("/pods/uid/volumes/pvc-1").ok(); }));
}

TEST_F(NodeServiceTest, InfoIsTheHostsInitiatorNameAndCapabilitiesAreFixed) {
  grpc::ClientContext ctx;
  ::csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(stub_->NodeGetInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.node_id(), "iqn.1993-08.org.debian:01:node-a");
  EXPECT_EQ(fake_->Take(), std::vector<std::string>{"cat /etc/iscsi/initiatorname.iscsi"});

  grpc::ClientContext ctx2;
  ::csi::v1::NodeGetCapabilitiesResponse caps;
  ASSERT_TRUE(stub_->NodeGetCapabilities(&ctx2, {}, &caps).ok());
  std::vector<int> types;
  for (const auto& c : caps.capabilities()) types.push_back(c.rpc().type());
  EXPECT_EQ(types, (std::vector<int>{NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME,
                                     NodeServiceCapability::RPC::EXPAND_VOLUME,
                                     NodeServiceCapability::RPC::GET_VOLUME_STATS}));

  server_.reset();
  Start("node-a");
  grpc::ClientContext ctx3;
  ASSERT_TRUE(stub_->NodeGetInfo(&ctx3, {}, &info).ok());
  EXPECT_EQ(info.node_id(), "node-a");
  EXPECT_TRUE(fake_->Take().empty());
}

TEST_F(NodeServiceTest, InfoNamesTheNodesAddressesAfterItsInitiatorName) {
  server_.reset();
  Start("", [](NodeOptions& o) { o.node_addresses = {"10.0.0.5", "fd00::5"}; });
  grpc::ClientContext ctx;
  ::csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(stub_->NodeGetInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.node_id(), "iqn.1993-08.org.debian:01:node-a@10.0.0.5,fd00::5");
  auto parsed = ParseNodeId(info.node_id());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->initiator, "iqn.1993-08.org.debian:01:node-a");

  server_.reset();
  Start("node-a", [](NodeOptions& o) { o.node_addresses = {"10.0.0.5"}; });
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub_->NodeGetInfo(&ctx2, {}, &info).ok());
  EXPECT_EQ(info.node_id(), "node-a@10.0.0.5");
}

TEST_F(NodeServiceTest, AnInitiatorNameWithAnAtIsNoNodeId) {
  fake_->Answer("cat /etc/iscsi/initiatorname.iscsi",
                Exit(0, "InitiatorName=iqn.1993-08.org.debian:01:node-a@10.0.0.9\n"));
  grpc::ClientContext ctx;
  ::csi::v1::NodeGetInfoResponse info;
  EXPECT_EQ(stub_->NodeGetInfo(&ctx, {}, &info).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(NodeServiceTest, RefusesIncompleteRequests) {
  auto code = [&](::csi::v1::NodeStageVolumeRequest req) {
    grpc::Status s = Stage(req);
    return s.error_code();
  };
  auto req = StageRequest();
  req.clear_volume_id();
  EXPECT_EQ(code(req), grpc::StatusCode::INVALID_ARGUMENT);
  req = StageRequest();
  req.clear_staging_target_path();
  EXPECT_EQ(code(req), grpc::StatusCode::INVALID_ARGUMENT);
  req = StageRequest();
  req.clear_volume_capability();
  EXPECT_EQ(code(req), grpc::StatusCode::INVALID_ARGUMENT);
  req = StageRequest(Mount("btrfs"));
  EXPECT_EQ(code(req), grpc::StatusCode::INVALID_ARGUMENT);
  req = StageRequest();
  req.mutable_volume_context()->erase("targetIqn");
  EXPECT_EQ(code(req), grpc::StatusCode::INVALID_ARGUMENT);
  req = StageRequest(Mount(), "10.0.2.2");
  EXPECT_EQ(code(req), grpc::StatusCode::INVALID_ARGUMENT);
  req = StageRequest();
  (*req.mutable_secrets())["node.session.auth.username"] = "only-a-name";
  EXPECT_EQ(code(req), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(fake_->Take().empty());  // nothing reached the host
  EXPECT_EQ(Unstage("", "/x").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Unstage("pvc-1", "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(NodeServiceTest, APortalGivenByNameIsUsedAtItsAddress) {
  ASSERT_TRUE(Stage(StageRequest(Mount(), "gw.example:3260")).ok());
  auto cmds = fake_->Take();
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), kNode + " --login"), cmds.end());
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), std::string("readlink -e ") + kByPath), cmds.end());
  for (const auto& c : cmds) EXPECT_EQ(c.find("gw.example"), std::string::npos) << c;
  std::ifstream record(dir_ / "state" / "volumes" / "pvc-1.json");
  std::stringstream text;
  text << record.rdbuf();
  EXPECT_NE(text.str().find("\"gw.example:3260\""), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\"10.0.2.2:3260\""), std::string::npos) << text.str();

  // iscsiadm lists the session by address: the name's portal is found logged in.
  fake_->Answer("iscsiadm -m session",
                Exit(0, std::string("tcp: [3] 10.0.2.2:3260,1 ") + kIqn + " (non-flash)\n"));
  fake_->Answer("findmnt -n -o SOURCE,OPTIONS --mountpoint /stage/pvc-1", Exit(0, "/dev/sdb\n"));
  ASSERT_TRUE(Stage(StageRequest(Mount(), "gw.example:3260")).ok());
  for (const auto& c : fake_->Take()) EXPECT_EQ(c.find("--login"), std::string::npos) << c;
  ASSERT_TRUE(Unstage().ok());
  cmds = fake_->Take();
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), kNode + " --logout"), cmds.end());
}

TEST_F(NodeServiceTest, AnIpv6PortalIsBracketedForIscsiadmAndBareInTheByPathName) {
  const std::string node = std::string("iscsiadm -m node -T ") + kIqn + " -p [fd00::2]:3260";
  fake_->Answer(
      std::string("readlink -e /dev/disk/by-path/ip-fd00::2:3260-iscsi-") + kIqn + "-lun-0",
      Exit(0, "/dev/sdd\n"));
  for (const std::string portal : {"[fd00::2]:3260", "gw6.example:3260", "[fd00:0::2]:3260"}) {
    ASSERT_TRUE(Stage(StageRequest(Block(), portal)).ok()) << portal;
    auto cmds = fake_->Take();
    EXPECT_NE(std::find(cmds.begin(), cmds.end(), node + " --login"), cmds.end()) << portal;
    ASSERT_TRUE(Unstage().ok());
    cmds = fake_->Take();
    EXPECT_NE(std::find(cmds.begin(), cmds.end(), node + " --logout"), cmds.end()) << portal;
  }
}

TEST_F(NodeServiceTest, RefusesAWildcardOrUnbracketedIpv6Portal) {
  for (const std::string portal : {"0.0.0.0:3260", "[::]:3260", "[0::0]:3260"}) {
    const grpc::Status s = Stage(StageRequest(Mount(), portal));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << portal;
    EXPECT_NE(s.error_message().find(portal + ": "), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find("wildcard"), std::string::npos) << s.error_message();
  }
  for (const std::string portal : {"fd00::2:3260", "[fd00::2]3260", "10.0.2.2:0", "[]:3260"}) {
    EXPECT_EQ(Stage(StageRequest(Mount(), portal)).error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << portal;
  }
  for (const auto& c : fake_->Take()) EXPECT_EQ(c.find("--login"), std::string::npos) << c;
}

TEST(ResolveHost, WritesNumericAddressesTheCanonicalWay) {
  EXPECT_EQ(ResolveHost("10.0.2.2").value(), "10.0.2.2");
  EXPECT_EQ(ResolveHost("fd00:0:0::2").value(), "fd00::2");
  EXPECT_EQ(ResolveHost("0.0.0.0").value(), "0.0.0.0");
  EXPECT_EQ(ResolveHost("::").value(), "::");
}

TEST_F(NodeServiceTest, RefusesRelativePathsAndMalformedTargetNamesBeforeAnyCommand) {
  auto req = StageRequest();
  req.set_staging_target_path("stage/pvc-1");
  grpc::Status s = Stage(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("staging_target_path stage/pvc-1 is not an absolute path"),
            std::string::npos)
      << s.error_message();
  req.set_staging_target_path("-rf");
  EXPECT_EQ(Stage(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const std::string& iqn : std::vector<std::string>{
           "iqn.2026-11.io.iscsigw:pvc 1", "iqn.2026-11.io.iscsigw:PVC-1", "iqn.2026-1.io:x",
           "iqn.2026-11.", "iqn.2026-11.io.iscsigw:" + std::string(201, 'a'), "eui.0123456789abcde",
           "naa.0123456789abcdef0", "pvc-1", "--login", "iqn.2026-11.io:x/../../etc"}) {
    req = StageRequest();
    (*req.mutable_volume_context())["targetIqn"] = iqn;
    s = Stage(req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << iqn;
    EXPECT_NE(s.error_message().find("targetIqn"), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(Unstage("pvc-1", "stage/pvc-1").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext ctx;
  ::csi::v1::NodePublishVolumeRequest pub;
  pub.set_volume_id("pvc-1");
  pub.set_staging_target_path("/stage/pvc-1");
  pub.set_target_path("pods/uid/volumes/pvc-1");
  *pub.mutable_volume_capability() = Mount();
  ::csi::v1::NodePublishVolumeResponse pub_resp;
  EXPECT_EQ(stub_->NodePublishVolume(&ctx, pub, &pub_resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext ctx2;
  ::csi::v1::NodeUnpublishVolumeRequest unpub;
  unpub.set_volume_id("pvc-1");
  unpub.set_target_path("-x");
  ::csi::v1::NodeUnpublishVolumeResponse unpub_resp;
  EXPECT_EQ(stub_->NodeUnpublishVolume(&ctx2, unpub, &unpub_resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  for (const bool stats : {false, true}) {
    grpc::ClientContext c;
    if (stats) {
      ::csi::v1::NodeGetVolumeStatsRequest r;
      r.set_volume_id("pvc-1");
      r.set_volume_path(".");
      ::csi::v1::NodeGetVolumeStatsResponse resp;
      EXPECT_EQ(stub_->NodeGetVolumeStats(&c, r, &resp).error_code(),
                grpc::StatusCode::INVALID_ARGUMENT);
    } else {
      ::csi::v1::NodeExpandVolumeRequest r;
      r.set_volume_id("pvc-1");
      r.set_volume_path("pods/uid/volumes/pvc-1");
      ::csi::v1::NodeExpandVolumeResponse resp;
      EXPECT_EQ(stub_->NodeExpandVolume(&c, r, &resp).error_code(),
                grpc::StatusCode::INVALID_ARGUMENT);
    }
  }
  EXPECT_TRUE(fake_->Take().empty());  // nothing reached the host

  // Each of the three formats, well formed, is taken.
  for (const std::string& iqn :
       std::vector<std::string>{"iqn.2026-11.io.iscsigw:pvc-1", "eui.0123456789abcdef",
                                "naa.0123456789abcdef0123456789abcdef"}) {
    req = StageRequest(Block());
    (*req.mutable_volume_context())["targetIqn"] = iqn;
    fake_->Answer("readlink -e /dev/disk/by-path/ip-10.0.2.2:3260-iscsi-" + iqn + "-lun-0",
                  Exit(0, "/dev/sdb\n"));
    EXPECT_TRUE(Stage(req).ok()) << iqn;
    ASSERT_TRUE(Unstage().ok());
  }
}

TEST_F(NodeServiceTest, ShutdownDoesNotStartQueuedWork) {
  server_.reset();
  Start("", [](NodeOptions& o) { o.workers = 1; });
  fake_->Hold("iscsiadm -m session");
  std::thread running([&] { (void)Stage(StageRequest()); });
  ASSERT_TRUE(Eventually([&] { return fake_->Holding(); }));
  // A second volume's stage waits behind the first on the one worker.
  auto req = StageRequest();
  req.set_volume_id("pvc-2");
  req.set_staging_target_path("/stage/pvc-2");
  (*req.mutable_volume_context())["targetIqn"] = "iqn.2026-11.io.iscsigw:pvc-2";
  grpc::Status queued_status;
  std::thread queued([&] { queued_status = Stage(req); });
  ASSERT_TRUE(Eventually([&] { return node_->QueuedForTest() == 1; }));
  // The server gives up on both calls at once; the running one is left to end, the queued one
  // must not start.
  std::thread stopper([&] { server_->Shutdown(std::chrono::milliseconds(0)); });
  queued.join();
  EXPECT_FALSE(queued_status.ok());
  fake_->Release();
  running.join();
  stopper.join();
  for (const auto& c : fake_->Take()) EXPECT_EQ(c.find("pvc-2"), std::string::npos) << c;
  EXPECT_FALSE(fs::exists(dir_ / "state" / "volumes" / "pvc-2.json"));
}

TEST(RedactedCommandLine, HidesPasswordValuesOnly) {
  EXPECT_EQ(RedactedCommandLine({"iscsiadm", "-m", "node", "-o", "update", "-n",
                                 "node.session.auth.password_in", "-v", "x"}),
            "iscsiadm -m node -o update -n node.session.auth.password_in -v <redacted>");
  EXPECT_EQ(RedactedCommandLine(
                {"iscsiadm", "-o", "update", "-n", "node.session.auth.username", "-v", "user"}),
            "iscsiadm -o update -n node.session.auth.username -v user");
}

TEST(KeyedWorkQueue, RunsOneJobPerKeyAtATimeAndKeysInParallel) {
  std::mutex mu;
  std::condition_variable cv;
  int running_a = 0, max_a = 0, done = 0;
  bool b_ran_while_a_ran = false, b_ran = false;
  {
    KeyedWorkQueue q(3, 16, 4);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(q.Submit("a",
                         [&](bool) {
                           std::unique_lock lock(mu);
                           max_a = std::max(max_a, ++running_a);
                           cv.notify_all();
                           // Each "a" job holds its key until "b" has run, however slowly the
                           // machine schedules it: a queue that ran keys one after the other
                           // would let it run only after the 10 s, when no "a" runs.
                           cv.wait_for(lock, std::chrono::seconds(10), [&] { return b_ran; });
                           --running_a;
                           ++done;
                           cv.notify_all();
                         }),
                KeyedWorkQueue::Admit::kQueued);
    }
    ASSERT_EQ(q.Submit("b",
                       [&](bool) {
                         std::unique_lock lock(mu);
                         // Its worker may start before the first "a" job's does: it waits
                         // (bounded) for one to be running.
                         cv.wait_for(lock, std::chrono::seconds(10), [&] { return running_a > 0; });
                         b_ran_while_a_ran = running_a > 0;
                         b_ran = true;
                         ++done;
                         cv.notify_all();
                       }),
              KeyedWorkQueue::Admit::kQueued);
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == 4; });
  }
  EXPECT_EQ(max_a, 1);
  EXPECT_TRUE(b_ran_while_a_ran);
}

TEST(KeyedWorkQueue, BoundsWhatWaitsAndCancelsItAtTheEnd) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, started = false;
  int cancelled = 0;
  std::thread releaser;
  {
    KeyedWorkQueue q(1, 3, 2);
    ASSERT_EQ(q.Submit("a",
                       [&](bool) {
                         std::unique_lock lock(mu);
                         started = true;
                         cv.notify_all();
                         cv.wait(lock, [&] { return release; });
                       }),
              KeyedWorkQueue::Admit::kQueued);
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return started; });
    }
    auto count = [&](bool c) {
      std::lock_guard lock(mu);
      cancelled += c;
    };
    EXPECT_EQ(q.Submit("a", count), KeyedWorkQueue::Admit::kQueued);
    EXPECT_EQ(q.Submit("a", count), KeyedWorkQueue::Admit::kQueued);
    EXPECT_EQ(q.Submit("a", count), KeyedWorkQueue::Admit::kKeyBusy);
    EXPECT_EQ(q.Submit("b", count), KeyedWorkQueue::Admit::kQueued);
    EXPECT_EQ(q.Submit("c", count), KeyedWorkQueue::Admit::kQueueFull);
    // The destructor cancels the three waiting jobs, then waits for the running one: released
    // once they are cancelled (or after 10 s, when they are not), not after a guess at how long
    // the destructor takes to get there.
    releaser = std::thread([&] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (;;) {
        std::unique_lock lock(mu);
        if (cancelled == 3 || std::chrono::steady_clock::now() > give_up) break;
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      std::lock_guard lock(mu);
      release = true;
      cv.notify_all();
    });
  }
  releaser.join();
  EXPECT_EQ(cancelled, 3);
}

}  // namespace node_service_test
}  // namespace iscsigw::csi
