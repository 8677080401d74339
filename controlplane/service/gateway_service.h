// GatewayServiceImpl: the iscsigw.v1.GatewayService gRPC service (callback API). Requests are
// validated here, turned into edits of the desired state (controlplane/state) and, through it,
// applied to the data plane; session operations go to the data plane directly.
//
// Threading: gRPC calls the handlers on its own threads. Reads answer inline; every change runs
// on one worker thread owned by this object, in arrival order, so the gRPC threads never block on
// disk or on the data plane. No exception crosses the gRPC edge: a handler that throws answers
// INTERNAL. Secrets are never put in a response or a log line.
//
// Every change is logged at info on the ctl logger with the RPC, the caller's address and the
// object ("CreateLun from ipv4:127.0.0.1:40312: lun 0 of iqn...:db created"); a refused change
// is logged with its reason.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/state/state_store.h"
#include "dataplane/api/dataplane.h"
#include "iscsigw/v1/gateway.grpc.pb.h"

namespace iscsigw::service {

inline constexpr size_t kDefaultMaxQueuedChanges = 1024;
inline constexpr size_t kDefaultMaxQueuedBytes = 64 << 20;
// How long removing an rbd image waits for the gateway's own store of it to close (commands in
// flight end first) before it takes the image's watcher for another client and keeps the image.
inline constexpr std::chrono::milliseconds kRbdCloseWait{10000};

struct ServiceOptions {
  std::string version;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // How long a forced delete waits for initiators to log out before dropping their sessions.
  std::chrono::milliseconds force_logout_wait{3000};
  // Changes waiting for the worker, in calls and in request bytes; past either a change is
  // answered RESOURCE_EXHAUSTED at once.
  size_t max_queued_changes = kDefaultMaxQueuedChanges;
  size_t max_queued_bytes = kDefaultMaxQueuedBytes;
  // How often the health probes run (controlplane/service/health.h): the state directory, the
  // shared configuration and the reactors.
  std::chrono::milliseconds health_interval{5000};
  // --lun-dir: LUN files named by a relative path, and snapshots, live here (created by the
  // caller); empty: neither is available.
  std::string lun_dir;
  // What LUN backings may use (the data plane's own policy, api::BackingPolicy): files are
  // created, copied and removed only through its allowed paths; default: nothing.
  api::BackingPolicy backing;
  // Tests: runs before each probe of the state directory (one that hangs, as on a hung mount).
  std::function<void()> before_dir_probe_for_test;
};

class GatewayServiceImpl final : public iscsigw::v1::GatewayService::CallbackService {
 public:
  GatewayServiceImpl(state::StateStore* store, api::Dataplane* dataplane, ServiceOptions options);
  ~GatewayServiceImpl() override;

  // Runs the changes already queued, then answers UNAVAILABLE to new ones. Idempotent. Call before
  // the gRPC server shuts down, so that no queued call is left unfinished.
  void Stop();

  // Probes the state directory (StateStore::ProbeDir); Ok when it can be written. Blocking.
  Status CheckStateDir() {
    if (options_.before_dir_probe_for_test) options_.before_dir_probe_for_test();
    return store_->ProbeDir();
  }
  // The shared configuration's health (StateStore::shared_health). Never waits.
  state::StateStore::SharedHealth SharedHealth() const { return store_->shared_health(); }
  // The reactors that did not run a posted no-op within `within` (Dataplane::
  // UnresponsiveReactors); none without a data plane. Never waits.
  std::vector<unsigned> UnresponsiveReactors(std::chrono::milliseconds within) {
    return dataplane_ != nullptr ? dataplane_->UnresponsiveReactors(within)
                                 : std::vector<unsigned>{};
  }
  std::chrono::milliseconds health_interval() const { return options_.health_interval; }

  using Ctx = grpc::CallbackServerContext;
  using Reactor = grpc::ServerUnaryReactor;

  Reactor* CreateTarget(Ctx*, const v1::CreateTargetRequest*, v1::Target*) override;
  Reactor* GetTarget(Ctx*, const v1::GetTargetRequest*, v1::Target*) override;
  Reactor* ListTargets(Ctx*, const v1::ListTargetsRequest*, v1::ListTargetsResponse*) override;
  Reactor* DeleteTarget(Ctx*, const v1::DeleteTargetRequest*, v1::DeleteTargetResponse*) override;
  Reactor* SetAllowAnyInitiator(Ctx*, const v1::SetAllowAnyInitiatorRequest*, v1::Target*) override;
  Reactor* CreateLun(Ctx*, const v1::CreateLunRequest*, v1::Lun*) override;
  Reactor* GetLun(Ctx*, const v1::GetLunRequest*, v1::Lun*) override;
  Reactor* ListLuns(Ctx*, const v1::ListLunsRequest*, v1::ListLunsResponse*) override;
  Reactor* ResizeLun(Ctx*, const v1::ResizeLunRequest*, v1::Lun*) override;
  Reactor* DeleteLun(Ctx*, const v1::DeleteLunRequest*, v1::DeleteLunResponse*) override;
  Reactor* CreateSnapshot(Ctx*, const v1::CreateSnapshotRequest*, v1::Snapshot*) override;
  Reactor* ListSnapshots(Ctx*, const v1::ListSnapshotsRequest*,
                         v1::ListSnapshotsResponse*) override;
  Reactor* DeleteSnapshot(Ctx*, const v1::DeleteSnapshotRequest*,
                          v1::DeleteSnapshotResponse*) override;
  Reactor* GetCapacity(Ctx*, const v1::GetCapacityRequest*, v1::Capacity*) override;
  Reactor* AddAclEntry(Ctx*, const v1::AddAclEntryRequest*, v1::AclEntry*) override;
  Reactor* ListAclEntries(Ctx*, const v1::ListAclEntriesRequest*,
                          v1::ListAclEntriesResponse*) override;
  Reactor* RemoveAclEntry(Ctx*, const v1::RemoveAclEntryRequest*,
                          v1::RemoveAclEntryResponse*) override;
  Reactor* SetChap(Ctx*, const v1::SetChapRequest*, v1::ChapConfig*) override;
  Reactor* ClearChap(Ctx*, const v1::ClearChapRequest*, v1::ChapConfig*) override;
  Reactor* ListSessions(Ctx*, const v1::ListSessionsRequest*, v1::ListSessionsResponse*) override;
  Reactor* TerminateSession(Ctx*, const v1::TerminateSessionRequest*,
                            v1::TerminateSessionResponse*) override;
  Reactor* GetGatewayInfo(Ctx*, const v1::GetGatewayInfoRequest*, v1::GatewayInfo*) override;
  Reactor* GetLogLevel(Ctx*, const v1::GetLogLevelRequest*, v1::LogLevels*) override;
  Reactor* SetLogLevel(Ctx*, const v1::SetLogLevelRequest*, v1::LogLevels*) override;

 private:
  // Runs fn on the calling thread (reads) or the worker (changes) and finishes the call with its
  // Status; exceptions become INTERNAL. A change names its RPC: while fn runs, call_ is
  // "<rpc> from <peer>" for its log lines, and a failure is logged with it.
  // Both first check every string field of the request (state::CheckTextFields): INVALID_ARGUMENT
  // before anything else sees it. Serialized refuses with RESOURCE_EXHAUSTED when the queue of
  // changes is full.
  Reactor* Inline(Ctx* ctx, const google::protobuf::Message& req,
                  const std::function<Status()>& fn);
  Reactor* Serialized(Ctx* ctx, const char* rpc, const google::protobuf::Message& req,
                      std::function<Status()> fn);
  void WorkerLoop();

  // Idempotent creates: a request_id seen before with the same request returns the stored
  // response. Worker thread only.
  bool Replay(const std::string& request_id, const std::string& request,
              google::protobuf::Message* response, Status* status);
  void Remember(const std::string& request_id, const std::string& request,
                const google::protobuf::Message& response);

  Status DoCreateTarget(const v1::CreateTargetRequest& req, v1::Target* resp);
  Status DoDeleteTarget(const v1::DeleteTargetRequest& req, v1::DeleteTargetResponse* resp);
  Status DoCreateLun(const v1::CreateLunRequest& req, v1::Lun* resp);
  Status DoResizeLun(const v1::ResizeLunRequest& req, v1::Lun* resp);
  Status LunView(const std::string& target, const v1::Lun& lun, v1::Lun* out) const;

  // File LUNs and snapshots (gateway_service_files.cc); worker thread.
  // Resolves a relative file path against the LUN directory, clears the client's `created`, and
  // sets it when the gateway makes the file: as a copy of req's source (made here) or from
  // nothing (create set and no file there yet).
  Status PrepareFileLun(const v1::CreateLunRequest& req, const std::string& who, v1::Lun* lun);
  // Clears the client's rbd `created`; with rbd.create, makes the image unless it exists (the LUN
  // spec checked first) and sets `created` when this call made it.
  Status PrepareRbdLun(const std::string& target, const std::string& who, v1::Lun* lun);
  // Removes the backing files and rbd images of `gone` (LUNs already out of the state) that the
  // gateway created and that no LUN of the state uses any more. `removed` counts them; the first
  // failure is returned after every one was tried.
  Status RemoveCreatedBacking(const std::vector<v1::Lun>& gone, uint32_t* removed);
  Status DoCreateSnapshot(const v1::CreateSnapshotRequest& req, v1::Snapshot* resp);
  // Live (non-discovery) sessions of a target.
  size_t SessionsOf(const std::string& target) const;

  state::StateStore* const store_;
  api::Dataplane* const dataplane_;
  const ServiceOptions options_;
  const bool lun_dir_shares_blocks_;  // FICLONE works in options_.lun_dir

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  size_t queued_bytes_ = 0;                  // guarded by mu_: request bytes held by queue_
  bool stopping_ = false;                    // guarded by mu_
  std::thread worker_;
  std::string call_;  // worker thread only: the change being run, for log lines

  struct Remembered {
    std::string request_sha256;  // of the request without its request_id
    std::string response;
  };
  std::map<std::string, Remembered> request_ids_;  // worker thread only; bounded
  std::deque<std::string> request_id_order_;       // worker thread only
  size_t remembered_bytes_ = 0;                    // worker thread only
};

// Copies a target for a response: secrets removed, secret_set flags filled in.
v1::Target Redacted(const v1::Target& target);
v1::ChapConfig Redacted(const v1::ChapConfig& chap);

}  // namespace iscsigw::service
