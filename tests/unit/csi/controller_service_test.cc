// csi.v1.Controller against a fake gateway: FakeGateway keeps targets, LUNs and snapshots in
// memory, runs its changes one at a time and remembers request_ids as iscsigwd does, and can be
// told to take long over a copy, to have an earlier call's LUN land first, or to refuse. The tests
// pin what CreateVolume does when a gateway create does not settle in time (no rollback, a
// retryable code, the volume found on retry), which deadline each gateway call gets, and that
// the gateway's refusals of a snapshot or a copy reach the CO as FAILED_PRECONDITION.
#include "csi/controller_service.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "csi/volume_model.h"

namespace iscsigw::csi {
namespace controller_service_test {

namespace gw = iscsigw::v1;
using ::csi::v1::VolumeCapability;
using std::chrono::milliseconds;
using Clock = std::chrono::system_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string Short(const std::string& name) {
  return name.starts_with(kGatewayIqnPrefix) ? name.substr(kGatewayIqnPrefix.size()) : name;
}

std::string Key(google::protobuf::Message* req, const std::string& id) {
  // The request as the gateway fingerprints it: without its request_id.
  const auto* field = req->GetDescriptor()->FindFieldByName("request_id");
  req->GetReflection()->SetString(req, field, "");
  std::string out = req->SerializeAsString();
  req->GetReflection()->SetString(req, field, id);
  return out;
}

class FakeGateway final : public gw::GatewayService::Service {
 public:
  // Behaviour, set before the calls.
  milliseconds copy_time{0};             // a CreateLun with a source takes this long
  bool earlier_lun_lands_first = false;  // CreateLun finds LUN 0 made by an earlier call
  grpc::Status lun_refusal;              // CreateLun answers this (not OK) without making anything
  grpc::Status snapshot_refusal;         // CreateSnapshot likewise

  FakeGateway() {
    info_.add_portals("192.0.2.1:3260");
    info_.set_lun_dir("/luns");
  }

  void SetPortals(std::vector<std::string> portals, std::vector<std::string> advertised) {
    std::lock_guard lock(mu_);
    info_.clear_portals();
    info_.clear_advertised();
    for (auto& p : portals) info_.add_portals(p);
    for (auto& p : advertised) info_.add_advertised(p);
  }
  void AddSnapshot(const std::string& name, const std::string& target, uint64_t bytes) {
    std::lock_guard lock(mu_);
    gw::Snapshot sn;
    sn.set_name(name);
    sn.set_source_target(std::string(kGatewayIqnPrefix) + target);
    sn.set_size_bytes(bytes);
    sn.set_block_size(512);
    snapshots_.push_back(sn);
  }
  void AddTarget(const std::string& name, const std::string& alias) {
    std::lock_guard lock(mu_);
    gw::Target t;
    t.set_name(std::string(kGatewayIqnPrefix) + name);
    t.set_alias(alias);
    targets_[name] = t;
  }
  void AddSession(const std::string& target, const std::string& initiator) {
    std::lock_guard lock(mu_);
    gw::Session s;
    s.set_tsih(static_cast<uint32_t>(sessions_.size() + 1));
    s.set_target(std::string(kGatewayIqnPrefix) + target);
    s.set_initiator_name(initiator);
    sessions_.push_back(s);
  }

  // Observations.
  std::optional<gw::Target> Target(const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = targets_.find(name);
    if (it == targets_.end()) return std::nullopt;
    return it->second;
  }
  int DeleteTargetCalls() {
    std::lock_guard lock(mu_);
    return delete_target_calls_;
  }
  int LunsMade() {
    std::lock_guard lock(mu_);
    return luns_made_;
  }
  std::vector<std::string> LunRequestIds() {
    std::lock_guard lock(mu_);
    return lun_request_ids_;
  }
  // How far ahead the deadline of the last call of `rpc` was when it arrived.
  milliseconds DeadlineOf(const std::string& rpc) {
    std::lock_guard lock(mu_);
    return deadlines_.at(rpc);
  }

  grpc::Status GetGatewayInfo(grpc::ServerContext* ctx, const gw::GetGatewayInfoRequest*,
                              gw::GatewayInfo* out) override {
    Arrived(ctx, "GetGatewayInfo");
    std::lock_guard lock(mu_);
    *out = info_;
    return grpc::Status::OK;
  }

  grpc::Status GetTarget(grpc::ServerContext* ctx, const gw::GetTargetRequest* req,
                         gw::Target* out) override {
    Arrived(ctx, "GetTarget");
    std::lock_guard lock(mu_);
    auto it = targets_.find(Short(req->name()));
    if (it == targets_.end()) return {grpc::StatusCode::NOT_FOUND, "no target " + req->name()};
    *out = it->second;
    return grpc::Status::OK;
  }

  grpc::Status CreateTarget(grpc::ServerContext* ctx, const gw::CreateTargetRequest* req,
                            gw::Target* out) override {
    Arrived(ctx, "CreateTarget");
    std::lock_guard work(worker_);
    std::lock_guard lock(mu_);
    gw::CreateTargetRequest copy = *req;
    const std::string key = Key(&copy, req->request_id());
    if (grpc::Status s; Replay(req->request_id(), key, out, &s)) return s;
    const std::string name = Short(req->target().name());
    if (targets_.contains(name)) return {grpc::StatusCode::ALREADY_EXISTS, name + " exists"};
    gw::Target t = req->target();
    t.set_name(std::string(kGatewayIqnPrefix) + name);
    t.mutable_chap()->set_secret_set(!t.chap().secret().empty());
    t.mutable_chap()->clear_secret();
    t.mutable_chap()->clear_mutual_secret();
    targets_[name] = t;
    *out = t;
    Remember(req->request_id(), key, *out);
    return grpc::Status::OK;
  }

  grpc::Status CreateLun(grpc::ServerContext* ctx, const gw::CreateLunRequest* req,
                         gw::Lun* out) override {
    Arrived(ctx, "CreateLun");
    {
      std::lock_guard lock(mu_);
      lun_request_ids_.push_back(req->request_id());
    }
    std::lock_guard work(worker_);  // one change at a time, as the gateway's worker
    gw::CreateLunRequest copy = *req;
    const std::string key = Key(&copy, req->request_id());
    {
      std::lock_guard lock(mu_);
      if (grpc::Status s; Replay(req->request_id(), key, out, &s)) return s;
      if (!lun_refusal.ok()) return lun_refusal;
    }
    // The copy goes on whether or not its caller still waits, as iscsigwd's does.
    if (req->source_case() != gw::CreateLunRequest::SOURCE_NOT_SET) {
      std::this_thread::sleep_for(copy_time);
    }
    std::lock_guard lock(mu_);
    auto it = targets_.find(Short(req->target()));
    if (it == targets_.end()) return {grpc::StatusCode::NOT_FOUND, "no target " + req->target()};
    gw::Lun lun = req->lun();
    if (lun.size_bytes() == 0) lun.set_size_bytes(SourceBytes(*req));
    lun.mutable_file()->set_created(true);
    const bool exists = !it->second.luns().empty();
    if (earlier_lun_lands_first && !exists) {
      *it->second.add_luns() = lun;
      ++luns_made_;
      return {grpc::StatusCode::ALREADY_EXISTS, "lun 0 of " + req->target() + " already exists"};
    }
    if (exists) {
      return {grpc::StatusCode::ALREADY_EXISTS, "lun 0 of " + req->target() + " already exists"};
    }
    *it->second.add_luns() = lun;
    ++luns_made_;
    *out = lun;
    Remember(req->request_id(), key, *out);
    return grpc::Status::OK;
  }

  grpc::Status DeleteTarget(grpc::ServerContext* ctx, const gw::DeleteTargetRequest* req,
                            gw::DeleteTargetResponse*) override {
    Arrived(ctx, "DeleteTarget");
    std::lock_guard work(worker_);
    std::lock_guard lock(mu_);
    ++delete_target_calls_;
    if (targets_.erase(Short(req->name())) == 0) {
      return {grpc::StatusCode::NOT_FOUND, "no target " + req->name()};
    }
    return grpc::Status::OK;
  }

  grpc::Status ListSessions(grpc::ServerContext* ctx, const gw::ListSessionsRequest* req,
                            gw::ListSessionsResponse* out) override {
    Arrived(ctx, "ListSessions");
    std::lock_guard lock(mu_);
    for (const auto& s : sessions_) {
      if (req->target().empty() || Short(s.target()) == Short(req->target())) {
        *out->add_sessions() = s;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status ListSnapshots(grpc::ServerContext* ctx, const gw::ListSnapshotsRequest* req,
                             gw::ListSnapshotsResponse* out) override {
    Arrived(ctx, "ListSnapshots");
    std::lock_guard lock(mu_);
    for (const auto& sn : snapshots_) {
      if (!req->name().empty() && sn.name() != req->name()) continue;
      if (req->has_lun() && !req->lun().target().empty() &&
          Short(sn.source_target()) != Short(req->lun().target())) {
        continue;
      }
      *out->add_snapshots() = sn;
    }
    return grpc::Status::OK;
  }

  grpc::Status CreateSnapshot(grpc::ServerContext* ctx, const gw::CreateSnapshotRequest* req,
                              gw::Snapshot* out) override {
    Arrived(ctx, "CreateSnapshot");
    std::lock_guard work(worker_);
    std::lock_guard lock(mu_);
    if (!snapshot_refusal.ok()) return snapshot_refusal;
    out->set_name(req->name());
    out->set_source_target(std::string(kGatewayIqnPrefix) + Short(req->lun().target()));
    out->set_size_bytes(kMiB);
    out->set_block_size(512);
    snapshots_.push_back(*out);
    return grpc::Status::OK;
  }

 private:
  void Arrived(grpc::ServerContext* ctx, const std::string& rpc) {
    std::lock_guard lock(mu_);
    deadlines_[rpc] = std::chrono::duration_cast<milliseconds>(ctx->deadline() - Clock::now());
  }
  bool Replay(const std::string& id, const std::string& key, google::protobuf::Message* out,
              grpc::Status* s) {
    if (id.empty()) return false;
    auto it = remembered_.find(id);
    if (it == remembered_.end()) return false;
    if (it->second.first != key) {
      *s = {grpc::StatusCode::INVALID_ARGUMENT, "request_id " + id + " was used for another"};
    } else {
      out->ParseFromString(it->second.second);
      *s = grpc::Status::OK;
    }
    return true;
  }
  void Remember(const std::string& id, const std::string& key,
                const google::protobuf::Message& out) {
    if (!id.empty()) remembered_[id] = {key, out.SerializeAsString()};
  }
  uint64_t SourceBytes(const gw::CreateLunRequest& req) {
    for (const auto& sn : snapshots_) {
      if (sn.name() == req.snapshot()) return sn.size_bytes();
    }
    auto it = targets_.find(Short(req.lun_source().target()));
    if (it != targets_.end() && !it->second.luns().empty()) {
      return it->second.luns(0).size_bytes();
    }
    return 0;
  }

  std::mutex worker_;  // held by a change for its whole run
  std::mutex mu_;
  gw::GatewayInfo info_;
  std::map<std::string, gw::Target> targets_;  // by short name
  std::vector<gw::Snapshot> snapshots_;
  std::vector<gw::Session> sessions_;
  std::map<std::string, std::pair<std::string, std::string>> remembered_;
  std::map<std::string, milliseconds> deadlines_;
  std::vector<std::string> lun_request_ids_;
  int delete_target_calls_ = 0;
  int luns_made_ = 0;
};

class ControllerTest : public ::testing::Test {
 protected:
  void Start(ControllerOptions options) {
    grpc::ServerBuilder gb;
    gb.RegisterService(&gateway_);
    gateway_server_ = gb.BuildAndStart();
    ASSERT_NE(gateway_server_, nullptr);
    controller_ =
        std::make_unique<ControllerService>(gateway_server_->InProcessChannel({}), options);
    grpc::ServerBuilder cb;
    cb.RegisterService(controller_.get());
    csi_server_ = cb.BuildAndStart();
    ASSERT_NE(csi_server_, nullptr);
    stub_ = ::csi::v1::Controller::NewStub(csi_server_->InProcessChannel({}));
  }
  void TearDown() override {
    if (csi_server_) csi_server_->Shutdown();
    controller_.reset();
    if (gateway_server_) gateway_server_->Shutdown();
  }

  static ::csi::v1::CreateVolumeRequest Request(const std::string& name,
                                                const std::string& snapshot = "") {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    auto* cap = req.add_volume_capabilities();
    cap->mutable_mount()->set_fs_type("ext4");
    cap->mutable_access_mode()->set_mode(VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    if (!snapshot.empty()) {
      req.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snapshot);
    }
    return req;
  }

  grpc::Status Create(const ::csi::v1::CreateVolumeRequest& req,
                      ::csi::v1::CreateVolumeResponse* resp,
                      milliseconds timeout = milliseconds(30'000)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(Clock::now() + timeout);
    return stub_->CreateVolume(&ctx, req, resp);
  }

  FakeGateway gateway_;
  std::unique_ptr<grpc::Server> gateway_server_;
  std::unique_ptr<ControllerService> controller_;
  std::unique_ptr<grpc::Server> csi_server_;
  std::unique_ptr<::csi::v1::Controller::Stub> stub_;
};

ControllerOptions Timeouts(milliseconds gateway, milliseconds copy) {
  ControllerOptions o;
  o.gateway_timeout = gateway;
  o.copy_timeout = copy;
  return o;
}

TEST_F(ControllerTest, ACopyPastItsDeadlineIsNotRolledBackAndItsRetryGetsTheVolume) {
  gateway_.AddSnapshot("csi-snap-1", "pvc-src", 4 * kMiB);
  // The copy outlives the first call's 1 s and ends 500 ms before the retry's 1 s does: the
  // retry waits for it (the fake answers it once the copy is done).
  gateway_.copy_time = milliseconds(1500);
  Start(Timeouts(milliseconds(5000), milliseconds(1000)));

  ::csi::v1::CreateVolumeResponse resp;
  const grpc::Status first = Create(Request("pvc-copy", "csi-snap-1"), &resp);
  // Not settled: a code the CO retries on, and the target stays for the copy to land on.
  EXPECT_EQ(first.error_code(), grpc::StatusCode::ABORTED) << first.error_message();
  EXPECT_NE(first.error_message().find("copy"), std::string::npos) << first.error_message();
  EXPECT_EQ(gateway_.DeleteTargetCalls(), 0);
  ASSERT_TRUE(gateway_.Target("pvc-copy").has_value());

  // The retry, while the copy still runs: the same request_id, answered with the copy's LUN.
  const grpc::Status again = Create(Request("pvc-copy", "csi-snap-1"), &resp);
  ASSERT_TRUE(again.ok()) << again.error_message();
  EXPECT_EQ(resp.volume().volume_id(), "pvc-copy");
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(resp.volume().content_source().snapshot().snapshot_id(), "csi-snap-1");
  const auto ids = gateway_.LunRequestIds();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_TRUE(ids[0].starts_with("csi-lun-")) << ids[0];
  EXPECT_EQ(gateway_.LunsMade(), 1);
  EXPECT_EQ(gateway_.DeleteTargetCalls(), 0);
  EXPECT_EQ(gateway_.Target("pvc-copy")->luns_size(), 1);
}

TEST_F(ControllerTest, ALunAnEarlierCallMadeIsTheAnswerNotARollback) {
  // An earlier CreateVolume made the target and sent CreateLun, whose answer it did not live
  // to see; that LUN lands just before the retry's CreateLun runs.
  gateway_.AddTarget("pvc-race", "csi:pvc-race");
  gateway_.earlier_lun_lands_first = true;
  Start(ControllerOptions{});
  ::csi::v1::CreateVolumeResponse resp;
  auto req = Request("pvc-race");
  req.mutable_capacity_range()->set_required_bytes(8 * kMiB);
  const grpc::Status s = Create(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(gateway_.DeleteTargetCalls(), 0);
  EXPECT_EQ(gateway_.Target("pvc-race")->luns_size(), 1);
}

TEST_F(ControllerTest, ARefusedLunTakesOnlyTheTargetThisCallMade) {
  gateway_.lun_refusal = {grpc::StatusCode::RESOURCE_EXHAUSTED, "no space left on device"};
  gateway_.AddTarget("pvc-earlier", "csi:pvc-earlier");
  Start(ControllerOptions{});
  ::csi::v1::CreateVolumeResponse resp;
  EXPECT_EQ(Create(Request("pvc-new"), &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_FALSE(gateway_.Target("pvc-new").has_value());
  EXPECT_EQ(gateway_.DeleteTargetCalls(), 1);
  // A target an earlier call made may have that call's LUN on its way: left alone.
  EXPECT_EQ(Create(Request("pvc-earlier"), &resp).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(gateway_.Target("pvc-earlier").has_value());
  EXPECT_EQ(gateway_.DeleteTargetCalls(), 1);
}

TEST_F(ControllerTest, AVolumeDeletedAndMadeAgainIsMadeAgain) {
  // The gateway remembers the first volume's request_ids (the same name and request give the
  // same ids); the second volume must not be a replay of the first's answers.
  Start(ControllerOptions{});
  ::csi::v1::CreateVolumeResponse resp;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    const grpc::Status s = Create(Request("pvc-again"), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(gateway_.Target("pvc-again").has_value());
    EXPECT_EQ(gateway_.Target("pvc-again")->luns_size(), 1);
    grpc::ClientContext ctx;
    ::csi::v1::DeleteVolumeRequest del;
    del.set_volume_id("pvc-again");
    ::csi::v1::DeleteVolumeResponse out;
    ASSERT_TRUE(stub_->DeleteVolume(&ctx, del, &out).ok());
    EXPECT_FALSE(gateway_.Target("pvc-again").has_value());
  }
  EXPECT_EQ(gateway_.LunsMade(), 2);
}

TEST_F(ControllerTest, ACopyHasItsOwnDeadlineTheOthersTheGatewayTimeout) {
  gateway_.AddSnapshot("csi-snap-2", "pvc-src", kMiB);
  Start(Timeouts(milliseconds(5000), milliseconds(20'000)));
  ::csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(Request("pvc-deadline", "csi-snap-2"), &resp, milliseconds(60'000)).ok());
  EXPECT_GT(gateway_.DeadlineOf("CreateLun"), milliseconds(15'000));
  EXPECT_LT(gateway_.DeadlineOf("CreateLun"), milliseconds(20'100));
  EXPECT_LT(gateway_.DeadlineOf("GetTarget"), milliseconds(5100));
  EXPECT_LT(gateway_.DeadlineOf("CreateTarget"), milliseconds(5100));

  // Not past the CSI call's own deadline, whose caller would not see the answer (give or take
  // the rounding of a deadline on its way through gRPC).
  ASSERT_TRUE(Create(Request("pvc-deadline-2", "csi-snap-2"), &resp, milliseconds(3000)).ok());
  EXPECT_LT(gateway_.DeadlineOf("CreateLun"), milliseconds(3100));
  EXPECT_LT(gateway_.DeadlineOf("GetTarget"), milliseconds(3100));

  // Without a source, the gateway timeout.
  ASSERT_TRUE(Create(Request("pvc-deadline-3"), &resp, milliseconds(60'000)).ok());
  EXPECT_LT(gateway_.DeadlineOf("CreateLun"), milliseconds(5100));
}

TEST_F(ControllerTest, TheGatewaysRefusalOfACopyOfALunInUseIsFailedPrecondition) {
  // iscsigwd refuses a snapshot or a copy of a LUN with live sessions where its LUN directory
  // cannot share blocks: a sparse copy of a LUN in use is no point in time.
  const std::string why =
      "lun 0 of iqn.2026-11.io.iscsigw:pvc-src has 1 session and the LUN directory cannot "
      "share blocks";
  gateway_.AddTarget("pvc-src", "csi:pvc-src");
  gateway_.snapshot_refusal = {grpc::StatusCode::FAILED_PRECONDITION, why};
  gateway_.lun_refusal = {grpc::StatusCode::FAILED_PRECONDITION, why};
  gateway_.AddSnapshot("csi-snap-3", "pvc-src", kMiB);
  Start(ControllerOptions{});

  grpc::ClientContext ctx;
  ::csi::v1::CreateSnapshotRequest snap;
  snap.set_name("snapshot-1");
  snap.set_source_volume_id("pvc-src");
  ::csi::v1::CreateSnapshotResponse snap_resp;
  grpc::Status s = stub_->CreateSnapshot(&ctx, snap, &snap_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(why), std::string::npos) << s.error_message();

  ::csi::v1::CreateVolumeResponse resp;
  s = Create(Request("pvc-restore", "csi-snap-3"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(why), std::string::npos) << s.error_message();
  EXPECT_FALSE(gateway_.Target("pvc-restore").has_value());  // refused: nothing left
}

TEST_F(ControllerTest, DeleteVolumeRefusesAVolumeWithASession) {
  gateway_.AddTarget("pvc-busy", "csi:pvc-busy");
  gateway_.AddSession("pvc-busy", "iqn.2026-11.io.iscsigw.test:node");
  Start(ControllerOptions{});
  grpc::ClientContext ctx;
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id("pvc-busy");
  ::csi::v1::DeleteVolumeResponse out;
  const grpc::Status s = stub_->DeleteVolume(&ctx, del, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("iqn.2026-11.io.iscsigw.test:node"), std::string::npos);
  EXPECT_EQ(gateway_.DeleteTargetCalls(), 0);
}

}  // namespace controller_service_test
}  // namespace iscsigw::csi
