// GatewayService through a real gRPC server: an in-process channel and a TCP channel on a port the
// server picked, over a real data plane on loopback and a state directory of its own.
#include "controlplane/service/gateway_service.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "controlplane/service/health.h"
#include "controlplane/service/server.h"
#include "controlplane/service/status_map.h"
#include "controlplane/state/state_store.h"

namespace iscsigw::service {
namespace gateway_service_test {

namespace fs = std::filesystem;
using grpc::StatusCode;

constexpr const char* kPrefix = "iqn.2026-11.io.iscsigw:";

class ServiceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-service-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    api::Options opts;
    opts.portals = {"127.0.0.1:0"};
    opts.reactors = 1;
    auto allowed = api::AllowedPaths::Make({dir_});
    ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
    opts.backing.paths = allowed.value();
    opts.backing.rbd_pools = {"allowed", "shared/tenant"};
    opts.backing.rbd_confs = {dir_ + "/ceph.conf"};
    auto dp = api::Dataplane::Start(opts);
    ASSERT_TRUE(dp.ok()) << dp.status().message();
    dp_ = std::move(dp).value();
    state::Limits limits;
    ServiceOptions so;
    so.version = "test";
    so.backing = opts.backing;
    Configure(&limits, &so);
    store_ = std::make_unique<state::StateStore>(dir_, v1::State(), dp_.get(), limits);
    ASSERT_TRUE(store_->Start().ok());
    auto srv = ControlServer::Start(
        "127.0.0.1:0", {}, std::make_unique<GatewayServiceImpl>(store_.get(), dp_.get(), so));
    ASSERT_TRUE(srv.ok()) << srv.status().message();
    server_ = std::move(srv).value();
    channel_ = GetParam()
                   ? server_->InProcessChannel()
                   : grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::GatewayService::NewStub(channel_);
  }

  // Limits and options of the service under test, before it starts.
  virtual void Configure(state::Limits*, ServiceOptions*) {}

  void TearDown() override {
    stub_.reset();
    channel_.reset();
    server_.reset();
    dp_->Stop();
    dp_.reset();
    fs::remove_all(dir_);
  }

  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method m, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return ((*stub_).*m)(&ctx, req, resp);
  }

  grpc::Status CreateTarget(const std::string& name, v1::Target* out = nullptr,
                            const std::string& request_id = "") {
    v1::CreateTargetRequest req;
    req.mutable_target()->set_name(name);
    req.set_request_id(request_id);
    v1::Target resp;
    auto s = Call(&v1::GatewayService::Stub::CreateTarget, req, &resp);
    if (out) *out = resp;
    return s;
  }

  grpc::Status CreateRamLun(const std::string& target, uint32_t id, uint64_t size,
                            v1::Lun* out = nullptr, const std::string& request_id = "",
                            uint32_t block_size = 512) {
    v1::CreateLunRequest req;
    req.set_target(target);
    req.set_request_id(request_id);
    req.mutable_lun()->set_id(id);
    req.mutable_lun()->mutable_ram();
    req.mutable_lun()->set_size_bytes(size);
    req.mutable_lun()->set_block_size(block_size);
    v1::Lun resp;
    auto s = Call(&v1::GatewayService::Stub::CreateLun, req, &resp);
    if (out) *out = resp;
    return s;
  }

  std::string StateFile() {
    std::ifstream in(dir_ + "/state.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::string dir_;
  std::unique_ptr<api::Dataplane> dp_;
  std::unique_ptr<state::StateStore> store_;
  std::unique_ptr<ControlServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GatewayService::Stub> stub_;
};

INSTANTIATE_TEST_SUITE_P(Channels, ServiceTest, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "InProcess" : "Tcp"; });

TEST_P(ServiceTest, CreateGetAndDuplicateTarget) {
  v1::Target t;
  ASSERT_TRUE(CreateTarget("db", &t).ok());
  EXPECT_EQ(t.name(), std::string(kPrefix) + "db");

  v1::GetTargetRequest get;
  get.set_name("db");
  v1::Target got;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::GetTarget, get, &got).ok());
  EXPECT_EQ(got.name(), std::string(kPrefix) + "db");
  EXPECT_FALSE(got.allow_any_initiator());

  auto s = CreateTarget(std::string(kPrefix) + "db");
  EXPECT_EQ(s.error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(s.error_message(), "target iqn.2026-11.io.iscsigw:db already exists");
}

TEST_P(ServiceTest, InvalidTargetNamesAreRefusedWithTheReason) {
  auto s = CreateTarget("Upper");
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "target iqn.2026-11.io.iscsigw:Upper: name iqn.2026-11.io.iscsigw:Upper: character "
            "'U' is not allowed (lower-case letters, digits, '.', '-', ':')");
  s = CreateTarget("iqn.2026.bad");
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("iqn.YYYY-MM.reversed.domain"), std::string::npos);
  s = CreateTarget("");
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "target.name is empty");
  s = CreateTarget("eui.0123");
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
}

TEST_P(ServiceTest, NotFoundNamesTheObject) {
  v1::GetTargetRequest get;
  get.set_name("nope");
  v1::Target t;
  auto s = Call(&v1::GatewayService::Stub::GetTarget, get, &t);
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "target iqn.2026-11.io.iscsigw:nope not found");

  ASSERT_TRUE(CreateTarget("t").ok());
  v1::GetLunRequest gl;
  gl.set_target("t");
  gl.set_id(3);
  v1::Lun l;
  s = Call(&v1::GatewayService::Stub::GetLun, gl, &l);
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "lun 3 of iqn.2026-11.io.iscsigw:t not found");

  v1::DeleteTargetRequest dt;
  dt.set_name("gone");
  v1::DeleteTargetResponse dr;
  EXPECT_EQ(Call(&v1::GatewayService::Stub::DeleteTarget, dt, &dr).error_code(),
            StatusCode::NOT_FOUND);

  v1::TerminateSessionRequest ts;
  ts.set_tsih(77);
  v1::TerminateSessionResponse tr;
  s = Call(&v1::GatewayService::Stub::TerminateSession, ts, &tr);
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "session 77 not found");
  ts.set_tsih(0);
  EXPECT_EQ(Call(&v1::GatewayService::Stub::TerminateSession, ts, &tr).error_code(),
            StatusCode::INVALID_ARGUMENT);
}

TEST_P(ServiceTest, RetriedCreateWithRequestIdDoesNotFailOrDuplicate) {
  v1::Target a, b;
  ASSERT_TRUE(CreateTarget("idem", &a, "req-1").ok());
  ASSERT_TRUE(CreateTarget("idem", &b, "req-1").ok());
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  v1::Lun l1, l2;
  ASSERT_TRUE(CreateRamLun("idem", 0, 1 << 20, &l1, "req-2").ok());
  ASSERT_TRUE(CreateRamLun("idem", 0, 1 << 20, &l2, "req-2").ok());
  EXPECT_EQ(l1.serial(), l2.serial());
  EXPECT_EQ(l1.device_id(), l2.device_id());
  v1::ListLunsRequest ll;
  ll.set_target("idem");
  v1::ListLunsResponse lr;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ListLuns, ll, &lr).ok());
  EXPECT_EQ(lr.luns_size(), 1);
  // The same request id for a different request is a client bug.
  auto s = CreateTarget("other", nullptr, "req-1");
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "request_id req-1 was used for a different request");
  // Without a request id, a repeat is ALREADY_EXISTS.
  EXPECT_EQ(CreateRamLun("idem", 0, 1 << 20).error_code(), StatusCode::ALREADY_EXISTS);
}

TEST_P(ServiceTest, LunValidationMessages) {
  ASSERT_TRUE(CreateTarget("v").ok());
  auto s = CreateRamLun("v", 0, 1000);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "lun 0 of iqn.2026-11.io.iscsigw:v: size_bytes 1000 is not a multiple of block_size "
            "512");
  s = CreateRamLun("v", 256, 1 << 20);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "lun 256 of iqn.2026-11.io.iscsigw:v: id 256 is out of range 0..255");
  s = CreateRamLun("v", 1, 1 << 20, nullptr, "", 1024);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "lun 1 of iqn.2026-11.io.iscsigw:v: block_size 1024 is not 512 or 4096");
  s = CreateRamLun("missing", 0, 1 << 20);
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND);
  v1::CreateLunRequest nob;
  nob.set_target("v");
  nob.mutable_lun()->set_size_bytes(4096);
  v1::Lun out;
  s = Call(&v1::GatewayService::Stub::CreateLun, nob, &out);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "lun 0 of iqn.2026-11.io.iscsigw:v: backing is not set (ram, null, file or rbd)");
  v1::CreateLunRequest file;
  file.set_target("v");
  file.mutable_lun()->set_id(2);
  file.mutable_lun()->mutable_file()->set_path(dir_ + "/absent.img");
  file.mutable_lun()->set_size_bytes(1 << 20);
  s = Call(&v1::GatewayService::Stub::CreateLun, file, &out);
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "lun 2 of iqn.2026-11.io.iscsigw:v: file.path " + dir_ +
                                   "/absent.img does not exist (set file.create to create it)");
}

// docs/security.md, "Backing paths": a LUN reaches only what the daemon's flags allow, and a
// refusal touches nothing (no file created outside, no symbolic link followed).
TEST_P(ServiceTest, BackingsOutsideThePolicyArePermissionDenied) {
  ASSERT_TRUE(CreateTarget("fence").ok());
  ASSERT_EQ(::symlink("/etc/passwd", (dir_ + "/passwd.img").c_str()), 0);
  ASSERT_EQ(::symlink("/tmp", (dir_ + "/up").c_str()), 0);
  const std::string escape = "/tmp/iscsigw-service-escape-" + std::to_string(::getpid());
  uint32_t id = 0;
  for (const std::string& path :
       {std::string("/etc/passwd"), dir_ + "/passwd.img", dir_ + "/../etc/passwd",
        dir_ + "/up/" + escape.substr(5), escape}) {
    v1::CreateLunRequest req;
    req.set_target("fence");
    req.mutable_lun()->set_id(id++);
    req.mutable_lun()->mutable_file()->set_path(path);
    req.mutable_lun()->mutable_file()->set_create(true);
    req.mutable_lun()->set_size_bytes(1 << 20);
    v1::Lun out;
    grpc::Status s = Call(&v1::GatewayService::Stub::CreateLun, req, &out);
    EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << path << ": " << s.error_message();
    EXPECT_NE(s.error_message().find("--backing-allow"), std::string::npos) << s.error_message();
  }
  EXPECT_NE(::access(escape.c_str(), F_OK), 0);

  auto rbd = [&](const std::string& pool, const std::string& ns, const std::string& conf,
                 const std::string& keyring) {
    v1::CreateLunRequest req;
    req.set_target("fence");
    req.mutable_lun()->set_id(9);
    auto* r = req.mutable_lun()->mutable_rbd();
    r->set_pool(pool);
    r->set_namespace_(ns);
    r->set_image("img");
    r->set_conf(conf);
    r->set_keyring(keyring);
    v1::Lun out;
    return Call(&v1::GatewayService::Stub::CreateLun, req, &out);
  };
  const std::string conf = dir_ + "/ceph.conf";
  for (const auto& [pool, ns] :
       {std::pair<std::string, std::string>{"other", ""}, {"shared", ""}, {"shared", "else"}}) {
    grpc::Status s = rbd(pool, ns, conf, "");
    EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << pool << "/" << ns;
    EXPECT_NE(s.error_message().find("--rbd-allow"), std::string::npos) << s.error_message();
  }
  grpc::Status s = rbd("allowed", "", "/home/someone/ceph.conf", "");
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("--rbd-conf"), std::string::npos) << s.error_message();
  s = rbd("allowed", "", "", "/etc/shadow");
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message().find("/etc/shadow"), std::string::npos);  // never named back
  // Allowed pools pass the policy (the open then fails: there is no cluster here).
  EXPECT_NE(rbd("allowed", "any", "", "").error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(rbd("shared", "tenant", conf, "").error_code(), StatusCode::PERMISSION_DENIED);
}

TEST_P(ServiceTest, LunIdentityIsGeneratedAndPersisted) {
  ASSERT_TRUE(CreateTarget("ident").ok());
  v1::Lun l;
  ASSERT_TRUE(CreateRamLun("ident", 5, 4 << 20, &l).ok());
  EXPECT_EQ(l.serial().size(), 16u);
  EXPECT_EQ(l.device_id() >> 60, 6u);
  EXPECT_EQ(l.size_bytes(), 4u << 20);
  auto persisted = state::LoadStateDir(dir_);
  ASSERT_TRUE(persisted.ok());
  EXPECT_EQ(persisted->targets(0).luns(0).serial(), l.serial());
  EXPECT_EQ(persisted->targets(0).luns(0).device_id(), l.device_id());
}

TEST_P(ServiceTest, ThickFileLunIsCreatedAndAllocated) {
  ASSERT_TRUE(CreateTarget("files").ok());
  v1::CreateLunRequest req;
  req.set_target("files");
  req.mutable_lun()->set_id(0);
  req.mutable_lun()->mutable_file()->set_path(dir_ + "/thick.img");
  req.mutable_lun()->mutable_file()->set_create(true);
  req.mutable_lun()->mutable_file()->set_thick(true);
  req.mutable_lun()->set_size_bytes(8 << 20);
  v1::Lun out;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::CreateLun, req, &out).ok());
  struct stat sb {};
  ASSERT_EQ(::stat((dir_ + "/thick.img").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_size, 8 << 20);
  EXPECT_GE(static_cast<uint64_t>(sb.st_blocks) * 512, 8u << 20);
}

TEST_P(ServiceTest, ResizeGrowsOnlineAndRefusesShrink) {
  ASSERT_TRUE(CreateTarget("grow").ok());
  ASSERT_TRUE(CreateRamLun("grow", 0, 1 << 20).ok());
  v1::ResizeLunRequest req;
  req.set_target("grow");
  req.set_id(0);
  req.set_size_bytes(3 << 20);
  v1::Lun out;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ResizeLun, req, &out).ok());
  EXPECT_EQ(out.size_bytes(), 3u << 20);
  EXPECT_EQ(dp_->LunStatusOf(std::string(kPrefix) + "grow", 0)->size_bytes, 3u << 20);
  req.set_size_bytes(2 << 20);
  auto s = Call(&v1::GatewayService::Stub::ResizeLun, req, &out);
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "lun 0 of iqn.2026-11.io.iscsigw:grow: size_bytes 2097152 is smaller than the current "
            "3145728; shrinking is not supported");
  req.set_size_bytes((4 << 20) + 100);
  EXPECT_EQ(Call(&v1::GatewayService::Stub::ResizeLun, req, &out).error_code(),
            StatusCode::INVALID_ARGUMENT);
  req.set_id(9);
  req.set_size_bytes(8 << 20);
  EXPECT_EQ(Call(&v1::GatewayService::Stub::ResizeLun, req, &out).error_code(),
            StatusCode::NOT_FOUND);
}

TEST_P(ServiceTest, AclAddListRemove) {
  ASSERT_TRUE(CreateTarget("acl").ok());
  v1::AddAclEntryRequest add;
  add.set_target("acl");
  add.mutable_entry()->set_initiator("iqn.2026-11.io.test:host1");
  add.mutable_entry()->add_sources("10.0.0.0/8");
  v1::AclEntry e;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::AddAclEntry, add, &e).ok());
  EXPECT_EQ(Call(&v1::GatewayService::Stub::AddAclEntry, add, &e).error_code(),
            StatusCode::ALREADY_EXISTS);
  add.mutable_entry()->set_initiator("iqn.2026-11.io.test:host2");
  add.mutable_entry()->set_sources(0, "10.1.2.3/8");
  auto s = Call(&v1::GatewayService::Stub::AddAclEntry, add, &e);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "acl entry iqn.2026-11.io.test:host2 of iqn.2026-11.io.iscsigw:acl: source "
            "'10.1.2.3/8' is not an address or CIDR with zero host bits");
  add.mutable_entry()->clear_sources();
  add.mutable_entry()->set_initiator("Not An IQN");
  EXPECT_EQ(Call(&v1::GatewayService::Stub::AddAclEntry, add, &e).error_code(),
            StatusCode::INVALID_ARGUMENT);

  v1::ListAclEntriesRequest list;
  list.set_target("acl");
  v1::ListAclEntriesResponse lr;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ListAclEntries, list, &lr).ok());
  ASSERT_EQ(lr.entries_size(), 1);
  EXPECT_EQ(lr.entries(0).initiator(), "iqn.2026-11.io.test:host1");
  EXPECT_EQ(lr.entries(0).sources(0), "10.0.0.0/8");

  v1::RemoveAclEntryRequest rm;
  rm.set_target("acl");
  rm.set_initiator("iqn.2026-11.io.test:host1");
  v1::RemoveAclEntryResponse rr;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::RemoveAclEntry, rm, &rr).ok());
  s = Call(&v1::GatewayService::Stub::RemoveAclEntry, rm, &rr);
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(),
            "acl entry iqn.2026-11.io.test:host1 of iqn.2026-11.io.iscsigw:acl not found");

  v1::SetAllowAnyInitiatorRequest any;
  any.set_target("acl");
  any.set_allow_any_initiator(true);
  v1::Target t;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::SetAllowAnyInitiator, any, &t).ok());
  EXPECT_TRUE(t.allow_any_initiator());
}

TEST_P(ServiceTest, ChapSecretsAreWriteOnlyAndStored0600) {
  ASSERT_TRUE(CreateTarget("sec").ok());
  v1::SetChapRequest req;
  req.set_target("sec");
  req.mutable_chap()->set_user("alice");
  req.mutable_chap()->set_secret("short");
  v1::ChapConfig out;
  auto s = Call(&v1::GatewayService::Stub::SetChap, req, &out);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "target iqn.2026-11.io.iscsigw:sec: chap.secret is 5 bytes; RFC 7143 requires at "
            "least 12");
  req.mutable_chap()->set_secret("alice-secret-xyz");
  req.mutable_chap()->set_mutual_user("tgt");
  req.mutable_chap()->set_mutual_secret("alice-secret-xyz");
  EXPECT_EQ(Call(&v1::GatewayService::Stub::SetChap, req, &out).error_code(),
            StatusCode::INVALID_ARGUMENT);
  req.mutable_chap()->set_mutual_secret("target-secret-xyz");
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::SetChap, req, &out).ok());
  EXPECT_EQ(out.user(), "alice");
  EXPECT_TRUE(out.secret().empty());
  EXPECT_TRUE(out.mutual_secret().empty());
  EXPECT_TRUE(out.secret_set());
  EXPECT_TRUE(out.mutual_secret_set());

  v1::GetTargetRequest get;
  get.set_name("sec");
  v1::Target t;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::GetTarget, get, &t).ok());
  EXPECT_EQ(t.DebugString().find("secret-xyz"), std::string::npos) << t.DebugString();
  EXPECT_TRUE(t.chap().secret_set());
  v1::ListTargetsResponse lr;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ListTargets, v1::ListTargetsRequest(), &lr).ok());
  EXPECT_EQ(lr.DebugString().find("secret-xyz"), std::string::npos);

  // On disk, for the next start, with mode 0600.
  EXPECT_NE(StateFile().find("alice-secret-xyz"), std::string::npos);
  struct stat sb {};
  ASSERT_EQ(::stat((dir_ + "/state.json").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);

  // Discovery CHAP, then clear both.
  v1::SetChapRequest disc;
  disc.mutable_chap()->set_user("disc");
  disc.mutable_chap()->set_secret("discovery-secret");
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::SetChap, disc, &out).ok());
  EXPECT_NE(StateFile().find("discovery-secret"), std::string::npos);
  v1::ClearChapRequest clear;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ClearChap, clear, &out).ok());
  clear.set_target("sec");
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ClearChap, clear, &out).ok());
  EXPECT_EQ(StateFile().find("secret-xyz"), std::string::npos);
  EXPECT_EQ(StateFile().find("discovery-secret"), std::string::npos);
}

TEST_P(ServiceTest, ListTargetsPages) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(CreateTarget("p" + std::to_string(i)).ok());
  v1::ListTargetsRequest req;
  req.set_page_size(2);
  std::vector<std::string> names;
  int pages = 0;
  for (;;) {
    v1::ListTargetsResponse resp;
    ASSERT_TRUE(Call(&v1::GatewayService::Stub::ListTargets, req, &resp).ok());
    ++pages;
    for (const auto& t : resp.targets()) names.push_back(t.name());
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names.front(), std::string(kPrefix) + "p0");
  EXPECT_EQ(names.back(), std::string(kPrefix) + "p4");
  req.set_page_size(-1);
  v1::ListTargetsResponse resp;
  EXPECT_EQ(Call(&v1::GatewayService::Stub::ListTargets, req, &resp).error_code(),
            StatusCode::INVALID_ARGUMENT);
}

TEST_P(ServiceTest, DeleteLunAndTarget) {
  ASSERT_TRUE(CreateTarget("del").ok());
  ASSERT_TRUE(CreateRamLun("del", 0, 1 << 20).ok());
  v1::DeleteLunRequest dl;
  dl.set_target("del");
  dl.set_id(0);
  v1::DeleteLunResponse dlr;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::DeleteLun, dl, &dlr).ok());
  EXPECT_FALSE(dp_->LunStatusOf(std::string(kPrefix) + "del", 0).has_value());
  EXPECT_EQ(Call(&v1::GatewayService::Stub::DeleteLun, dl, &dlr).error_code(),
            StatusCode::NOT_FOUND);
  v1::DeleteTargetRequest dt;
  dt.set_name("del");
  v1::DeleteTargetResponse dtr;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::DeleteTarget, dt, &dtr).ok());
  EXPECT_EQ(dtr.sessions_terminated(), 0u);
  EXPECT_EQ(store_->Get().targets_size(), 0);
}

TEST_P(ServiceTest, GatewayInfo) {
  ASSERT_TRUE(CreateTarget("info").ok());
  v1::GatewayInfo info;
  ASSERT_TRUE(
      Call(&v1::GatewayService::Stub::GetGatewayInfo, v1::GetGatewayInfoRequest(), &info).ok());
  EXPECT_EQ(info.version(), "test");
  EXPECT_EQ(info.reactors(), 1u);
  ASSERT_EQ(info.portals_size(), 1);
  EXPECT_EQ(info.portals(0), dp_->portals()[0]);
  EXPECT_EQ(info.state_dir(), dir_);
  EXPECT_TRUE(info.state_dir_healthy());
  EXPECT_EQ(info.targets(), 1u);
  EXPECT_EQ(info.sessions(), 0u);
}

// Levels of the process-wide loggers: each test puts them back to what it found.
class LevelsRestorer {
 public:
  LevelsRestorer() {
    for (size_t i = 0; i < log::kLoggerNames.size(); ++i)
      saved_[i] = *log::GetLevel(log::kLoggerNames[i]);
  }
  ~LevelsRestorer() {
    for (size_t i = 0; i < log::kLoggerNames.size(); ++i)
      (void)log::SetLevel(log::kLoggerNames[i], saved_[i]);
  }

 private:
  std::array<spdlog::level::level_enum, log::kLoggerNames.size()> saved_{};
};

std::vector<std::string> Levels(const v1::LogLevels& l) {
  std::vector<std::string> out;
  for (const auto& x : l.loggers()) out.push_back(x.logger() + "=" + x.level());
  return out;
}

TEST_P(ServiceTest, LogLevelsReadAndSetPerLoggerOrAll) {
  LevelsRestorer restore;
  log::SetLevel(spdlog::level::info);
  v1::LogLevels got;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::GetLogLevel, v1::GetLogLevelRequest(), &got).ok());
  EXPECT_EQ(Levels(got), (std::vector<std::string>{"pdu=info", "iscsi=info", "scsi=info",
                                                   "backing=info", "ctl=info"}));

  v1::SetLogLevelRequest set;
  set.set_logger("iscsi");
  set.set_level("debug");
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::SetLogLevel, set, &got).ok());
  EXPECT_EQ(Levels(got), std::vector<std::string>{"iscsi=debug"});
  EXPECT_TRUE(log::Iscsi().should_log(spdlog::level::debug));
  EXPECT_FALSE(log::Scsi().should_log(spdlog::level::debug));

  v1::GetLogLevelRequest one;
  one.set_logger("scsi");
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::GetLogLevel, one, &got).ok());
  EXPECT_EQ(Levels(got), std::vector<std::string>{"scsi=info"});

  set.clear_logger();
  set.set_level("warn");
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::SetLogLevel, set, &got).ok());
  EXPECT_EQ(Levels(got), (std::vector<std::string>{"pdu=warn", "iscsi=warn", "scsi=warn",
                                                   "backing=warn", "ctl=warn"}));
  EXPECT_FALSE(log::Iscsi().should_log(spdlog::level::info));
}

TEST_P(ServiceTest, LogLevelRefusesUnknownLoggerAndLevelNamingTheField) {
  LevelsRestorer restore;
  log::SetLevel(spdlog::level::info);
  v1::SetLogLevelRequest set;
  set.set_logger("nosuch");
  set.set_level("debug");
  v1::LogLevels got;
  auto s = Call(&v1::GatewayService::Stub::SetLogLevel, set, &got);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "logger nosuch is unknown (pdu, iscsi, scsi, backing, ctl)");

  set.set_logger("iscsi");
  set.set_level("verbose");
  s = Call(&v1::GatewayService::Stub::SetLogLevel, set, &got);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "level verbose is unknown (trace, debug, info, warn, error, critical, off)");
  set.clear_level();
  s = Call(&v1::GatewayService::Stub::SetLogLevel, set, &got);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "level is empty (trace, debug, info, warn, error, critical, off)");
  // Nothing changed.
  EXPECT_EQ(log::GetLevel("iscsi"), spdlog::level::info);

  v1::GetLogLevelRequest get;
  get.set_logger("Iscsi");
  s = Call(&v1::GatewayService::Stub::GetLogLevel, get, &got);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "logger Iscsi is unknown (pdu, iscsi, scsi, backing, ctl)");
}

// Changes are logged at info with the RPC, the caller and the object; secrets never are.
TEST_P(ServiceTest, ChangesAreLoggedWithRpcCallerAndObject) {
  LevelsRestorer restore;
  std::ostringstream out;
  log::Init(spdlog::level::info, log::Format::kText,
            std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  ASSERT_TRUE(CreateTarget("audit").ok());
  ASSERT_TRUE(CreateRamLun("audit", 0, 1 << 20).ok());
  v1::AddAclEntryRequest add;
  add.set_target("audit");
  add.mutable_entry()->set_initiator("iqn.2026-11.io.test:host1");
  v1::AclEntry e;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::AddAclEntry, add, &e).ok());
  v1::SetAllowAnyInitiatorRequest any;
  any.set_target("audit");
  any.set_allow_any_initiator(true);
  v1::Target t;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::SetAllowAnyInitiator, any, &t).ok());
  v1::SetChapRequest chap;
  chap.set_target("audit");
  chap.mutable_chap()->set_user("alice");
  chap.mutable_chap()->set_secret("audit-secret-xyz");
  v1::ChapConfig cc;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::SetChap, chap, &cc).ok());
  v1::ClearChapRequest clear;
  clear.set_target("audit");
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ClearChap, clear, &cc).ok());
  EXPECT_EQ(CreateTarget("audit").error_code(), StatusCode::ALREADY_EXISTS);
  log::Shutdown();

  const std::string s = out.str();
  const std::string from = GetParam() ? " from " : " from ipv4:127.0.0.1:";
  const std::string tgt = std::string(kPrefix) + "audit";
  for (const std::string& line : {
           "CreateTarget" + from,
           ": target " + tgt + " created (0 ACL entries)",
           "CreateLun" + from,
           ": lun 0 of " + tgt + " created: ram store, 1048576 bytes, block size 512",
           ": acl of " + tgt + ": iqn.2026-11.io.test:host1 added",
           "SetAllowAnyInitiator" + from,
           ": target " + tgt + ": allow_any_initiator on",
           ": target " + tgt + ": CHAP set for user alice",
           "ClearChap" + from,
           ": target " + tgt + ": CHAP cleared",
           ": refused: ALREADY_EXISTS: target " + tgt + " already exists",
       }) {
    EXPECT_NE(s.find(line), std::string::npos) << line << "\n" << s;
  }
  EXPECT_EQ(s.find("audit-secret-xyz"), std::string::npos) << s;
  EXPECT_NE(s.find("info [ctl]"), std::string::npos) << s;
}

TEST_P(ServiceTest, HealthServiceReportsServing) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty;  // an empty HealthCheckRequest: the whole server
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

// A probe of the state directory that hangs (as on a hung mount): the liveness thread turns
// readiness NOT_SERVING once it has run past ReadinessProbeLimit, liveness stays SERVING, and the
// probe's own answer comes back when it ends.
class HungDirProbeTest : public ServiceTest {
 protected:
  void Configure(state::Limits*, ServiceOptions* so) override {
    so->health_interval = std::chrono::milliseconds(50);
    so->before_dir_probe_for_test = [this] {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !hang_; });
    };
  }
  void TearDown() override {
    Hang(false);  // a failed test must not leave the readiness thread hung
    ServiceTest::TearDown();
  }
  void Hang(bool on) {
    {
      std::lock_guard lock(mu_);
      hang_ = on;
    }
    cv_.notify_all();
  }
  // The status grpc.health.v1 answers for `service` (1 SERVING, 2 NOT_SERVING), -1 on failure.
  int HealthOf(const std::string& service) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const std::string req = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
    grpc::Slice slice(req);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status st) { done.set_value(st); });
    if (!done.get_future().get().ok()) return -1;
    std::vector<grpc::Slice> slices;
    if (!response.Dump(&slices).ok()) return -1;
    std::string bytes;
    for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    return bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : -1;
  }
  bool Becomes(const std::string& service, int want, std::chrono::seconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      if (HealthOf(service) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool hang_ = false;  // guarded by mu_
};

INSTANTIATE_TEST_SUITE_P(Channels, HungDirProbeTest, ::testing::Values(true),
                         [](const auto&) { return "InProcess"; });

TEST_P(HungDirProbeTest, ReadinessTurnsNotServingWhileTheProbeHangsAndLivenessStays) {
  constexpr int kServing = 1, kNotServing = 2;
  ASSERT_EQ(HealthOf("iscsigw.readiness"), kServing);
  const auto hung_at = std::chrono::steady_clock::now();
  Hang(true);
  // 10 s (ReadinessProbeLimit of a 50 ms interval), and room for a loaded machine.
  ASSERT_TRUE(Becomes("iscsigw.readiness", kNotServing, std::chrono::seconds(40)));
  EXPECT_GE(std::chrono::steady_clock::now() - hung_at,
            ReadinessProbeLimit(std::chrono::milliseconds(50)));
  EXPECT_EQ(HealthOf(""), kNotServing);
  EXPECT_EQ(HealthOf("iscsigw.v1.GatewayService"), kNotServing);
  EXPECT_EQ(HealthOf("iscsigw.liveness"), kServing);
  Hang(false);
  EXPECT_TRUE(Becomes("iscsigw.readiness", kServing, std::chrono::seconds(20)));
  EXPECT_EQ(HealthOf(""), kServing);
}

class SmallLimitsTest : public ServiceTest {
 protected:
  void Configure(state::Limits* limits, ServiceOptions*) override {
    limits->max_targets = 3;
    limits->max_luns_per_target = 2;
    limits->max_acl_entries_per_target = 2;
  }

  grpc::Status AddAcl(const std::string& target, const std::string& initiator) {
    v1::AddAclEntryRequest req;
    req.set_target(target);
    req.mutable_entry()->set_initiator(initiator);
    v1::AclEntry resp;
    return Call(&v1::GatewayService::Stub::AddAclEntry, req, &resp);
  }
};

INSTANTIATE_TEST_SUITE_P(Channels, SmallLimitsTest, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "InProcess" : "Tcp"; });

TEST_P(SmallLimitsTest, CreatesPastALimitAreResourceExhaustedAndChangeNothing) {
  ASSERT_TRUE(CreateTarget("a").ok());
  ASSERT_TRUE(CreateTarget("b").ok());
  ASSERT_TRUE(CreateTarget("c").ok());
  const std::string before = StateFile();
  auto s = CreateTarget("d");
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(),
            "targets: the gateway already has 3 targets, the limit (--max-targets)");
  // A duplicate is still a duplicate, not a full gateway.
  EXPECT_EQ(CreateTarget("a").error_code(), StatusCode::ALREADY_EXISTS);

  ASSERT_TRUE(CreateRamLun("a", 0, 1 << 20).ok());
  ASSERT_TRUE(CreateRamLun("a", 7, 1 << 20).ok());
  s = CreateRamLun("a", 1, 1 << 20);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(),
            "target iqn.2026-11.io.iscsigw:a: already has 2 LUNs, the limit per target "
            "(--max-luns-per-target)");
  EXPECT_TRUE(CreateRamLun("b", 1, 1 << 20).ok()) << "the limit is per target";

  ASSERT_TRUE(AddAcl("a", "iqn.2026-11.io.x:1").ok());
  ASSERT_TRUE(AddAcl("a", "iqn.2026-11.io.x:2").ok());
  s = AddAcl("a", "iqn.2026-11.io.x:3");
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(),
            "acl of iqn.2026-11.io.iscsigw:a: already has 2 entries, the limit per target "
            "(--max-acl-entries)");
  // A target created with more ACL entries than the limit is refused whole.
  v1::CreateTargetRequest big;
  big.mutable_target()->set_name("e");
  for (int i = 0; i < 3; ++i)
    big.mutable_target()->add_initiators("iqn.2026-11.io.x:" + std::to_string(i));
  v1::DeleteTargetRequest del;
  del.set_name("c");
  v1::DeleteTargetResponse deleted;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::DeleteTarget, del, &deleted).ok());
  v1::Target out;
  s = Call(&v1::GatewayService::Stub::CreateTarget, big, &out);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(store_->Snapshot()->targets_size(), 2);
}

class NoQueueTest : public ServiceTest {
 protected:
  void Configure(state::Limits*, ServiceOptions* so) override { so->max_queued_changes = 0; }
};

INSTANTIATE_TEST_SUITE_P(Channels, NoQueueTest, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "InProcess" : "Tcp"; });

TEST_P(NoQueueTest, ChangesPastTheQueueBoundAreResourceExhausted) {
  auto s = CreateTarget("a");
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "0 changes (0 bytes) are already queued; retry later");
  EXPECT_EQ(store_->Snapshot()->targets_size(), 0);
  // Reads do not queue.
  v1::GatewayInfo info;
  EXPECT_TRUE(
      Call(&v1::GatewayService::Stub::GetGatewayInfo, v1::GetGatewayInfoRequest(), &info).ok());
}

TEST_P(ServiceTest, ControlCharactersAreRefusedNamingTheFieldNotTheValue) {
  v1::CreateTargetRequest req;
  req.mutable_target()->set_name("db");
  req.mutable_target()->set_alias("line\nbreak");
  v1::Target out;
  auto s = Call(&v1::GatewayService::Stub::CreateTarget, req, &out);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "target.alias: byte 4 is control character U+000A");

  ASSERT_TRUE(CreateTarget("db").ok());
  v1::SetChapRequest chap;
  chap.set_target("db");
  chap.mutable_chap()->set_user("user");
  chap.mutable_chap()->set_secret(
      std::string("0123456789ab\x01"
                  "cd"));
  v1::ChapConfig cc;
  s = Call(&v1::GatewayService::Stub::SetChap, chap, &cc);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "chap.secret: byte 12 is control character U+0001");

  v1::AddAclEntryRequest acl;
  acl.set_target("db");
  acl.mutable_entry()->set_initiator("iqn.2026-11.io.x:a");
  for (int i = 0; i < 9; ++i)
    acl.mutable_entry()->add_sources("10.0." + std::to_string(i) + ".0/24");
  v1::AclEntry ae;
  s = Call(&v1::GatewayService::Stub::AddAclEntry, acl, &ae);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "acl entry iqn.2026-11.io.x:a of iqn.2026-11.io.iscsigw:db: 9 sources; at most 8");

  v1::GetTargetRequest get;
  get.set_name("db\x7f");
  s = Call(&v1::GatewayService::Stub::GetTarget, get, &out);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "name: byte 2 is control character U+007F");
}

TEST_P(ServiceTest, RequestIdIsBounded) {
  auto s = CreateTarget("db", nullptr, std::string(129, 'r'));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "request_id is longer than 128 bytes");
  EXPECT_TRUE(CreateTarget("db", nullptr, std::string(128, 'r')).ok());
  EXPECT_TRUE(CreateTarget("db", nullptr, std::string(128, 'r')).ok()) << "replayed";
}

TEST_P(ServiceTest, ListTargetsPagesEndBeforeTheyOutgrowAClientsReceiveLimit) {
  // Four targets of about 0.9 MB each: a page of 100 would be 3.5 MB.
  for (int t = 0; t < 4; ++t) {
    v1::CreateTargetRequest req;
    req.mutable_target()->set_name("big" + std::to_string(t));
    for (int i = 0; i < 4000; ++i) {
      auto* e = req.mutable_target()->add_acl();
      e->set_initiator("iqn.2026-11.io.x:" + std::to_string(i) + "-" + std::string(195, 'y'));
    }
    v1::Target out;
    ASSERT_TRUE(Call(&v1::GatewayService::Stub::CreateTarget, req, &out).ok()) << t;
  }
  v1::ListTargetsRequest req;
  v1::ListTargetsResponse page;
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ListTargets, req, &page).ok());
  EXPECT_EQ(page.targets_size(), 3);
  EXPECT_LE(page.ByteSizeLong(), size_t{3} << 20);
  ASSERT_EQ(page.next_page_token(), std::string(kPrefix) + "big2");
  req.set_page_token(page.next_page_token());
  ASSERT_TRUE(Call(&v1::GatewayService::Stub::ListTargets, req, &page).ok());
  ASSERT_EQ(page.targets_size(), 1);
  EXPECT_EQ(page.targets(0).name(), std::string(kPrefix) + "big3");
  EXPECT_EQ(page.next_page_token(), "");
}

TEST_P(ServiceTest, RequestThatCannotBeParsedIsInvalidArgument) {
  auto raw_call = [&](const std::string& method, const std::string& bytes) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  // CreateTargetRequest{target: Target{name: "iqn.2026-11.io.iscsigw:\xff"}}, encoded by hand:
  // proto3 strings must be UTF-8, so the server cannot parse it.
  const std::string name = std::string(kPrefix) + "\xff";
  const std::string target = std::string("\x0a") + static_cast<char>(name.size()) + name;
  const std::string bytes = std::string("\x0a") + static_cast<char>(target.size()) + target;
  auto s = raw_call("/iscsigw.v1.GatewayService/CreateTarget", bytes);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "the request could not be parsed: a string field is not valid UTF-8, or the message "
            "is malformed");
  EXPECT_EQ(store_->Snapshot()->targets_size(), 0);
  // A method the service does not have stays UNIMPLEMENTED.
  EXPECT_EQ(raw_call("/iscsigw.v1.GatewayService/NoSuchMethod", "").error_code(),
            StatusCode::UNIMPLEMENTED);
}

TEST_P(ServiceTest, OversizedRequestIsResourceExhausted) {
  v1::CreateTargetRequest req;
  req.mutable_target()->set_name("db");
  req.mutable_target()->set_alias(std::string(kMaxRequestBytes, 'a'));
  v1::Target out;
  auto s = Call(&v1::GatewayService::Stub::CreateTarget, req, &out);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(store_->Snapshot()->targets_size(), 0);
  EXPECT_TRUE(CreateTarget("db").ok()) << "the server is still serving";
}

TEST(StatusMap, EveryCodeMapsToItsGrpcCode) {
  EXPECT_EQ(ToGrpcStatus(Status::Ok()).error_code(), StatusCode::OK);
  EXPECT_EQ(ToGrpcStatus(InvalidArgument("x")).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(NotFound("x")).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(AlreadyExists("x")).error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(ToGrpcStatus(FailedPrecondition("x")).error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcStatus(Status(iscsigw::StatusCode::kUnavailable, "x")).error_code(),
            StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(IoError("disk")).error_code(), StatusCode::INTERNAL);
  EXPECT_EQ(ToGrpcStatus(NotFound("target x not found")).error_message(), "target x not found");
}

}  // namespace gateway_service_test
}  // namespace iscsigw::service
