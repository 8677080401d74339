// csi.v1.Controller for iscsigw-csi: volumes are LUNs on an iscsigw gateway, managed through its
// gRPC API (iscsigw.v1.GatewayService) over the channel the service is given. The controller
// never touches a node; what a node needs to log in (portals, target IQN, LUN) travels to it in
// the volume context, CHAP in the node-stage secret. The mapping of volumes and snapshots onto
// gateway targets, files and snapshots is csi/volume_model.h's.
//
// Runs once per cluster (the provisioner pod, --mode controller or all). The gateway is the
// source of truth: the service keeps no state of its own beyond the stub, so a restarted
// controller carries on where the last one stopped.
//
// Threading: a handler only queues its call and returns; one worker thread owned by the service
// runs the calls in arrival order, each making synchronous gateway calls bounded by
// ControllerOptions::gateway_timeout (copy_timeout for the calls that copy data: a clone, a
// restore, a snapshot), and never past the deadline of the CSI call they serve, whose caller
// would not see the answer. One at a time keeps the gateway's view consistent within a
// call (a retried CreateVolume of the same name finds the first one's volume) without locks. At
// most max_queued_calls wait; past that a call is answered RESOURCE_EXHAUSTED at once, and a
// call whose caller gave up while it waited is answered without touching the gateway. Errors
// cross the edge as grpc::Status with the CSI spec's codes, never as exceptions; a handler that
// throws answers INTERNAL. Secrets are never logged.
//
// Destroy the service after the gRPC server has shut down: the destructor answers what is still
// queued UNAVAILABLE and joins the worker.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "csi/v1/csi.grpc.pb.h"
#include "csi/volume_model.h"
#include "iscsigw/v1/gateway.grpc.pb.h"

namespace iscsigw::csi {

struct ControllerOptions {
  // Deadline of each call to the gateway (--gateway-timeout)...
  std::chrono::milliseconds gateway_timeout{10'000};
  // ...but a CreateLun that copies a snapshot or a volume, and a CreateSnapshot, which copy a
  // LUN's data and take as long as the data is large (--copy-timeout).
  std::chrono::milliseconds copy_timeout{600'000};
  // CSI calls waiting for the worker; past this RESOURCE_EXHAUSTED.
  size_t max_queued_calls = 64;
};

class ControllerService final : public ::csi::v1::Controller::CallbackService {
 public:
  // `gateway`: a channel to the gateway's gRPC API (TLS or not, see csi/gateway_channel.h).
  ControllerService(std::shared_ptr<grpc::Channel> gateway, ControllerOptions options);
  ~ControllerService() override;

  using Ctx = grpc::CallbackServerContext;
  using Reactor = grpc::ServerUnaryReactor;
  // CSI spec: CreateVolume ... ControllerExpandVolume; see the .cc for each one's mapping.
  Reactor* CreateVolume(Ctx*, const ::csi::v1::CreateVolumeRequest*,
                        ::csi::v1::CreateVolumeResponse*) override;
  Reactor* DeleteVolume(Ctx*, const ::csi::v1::DeleteVolumeRequest*,
                        ::csi::v1::DeleteVolumeResponse*) override;
  Reactor* ControllerPublishVolume(Ctx*, const ::csi::v1::ControllerPublishVolumeRequest*,
                                   ::csi::v1::ControllerPublishVolumeResponse*) override;
  Reactor* ControllerUnpublishVolume(Ctx*, const ::csi::v1::ControllerUnpublishVolumeRequest*,
                                     ::csi::v1::ControllerUnpublishVolumeResponse*) override;
  Reactor* ValidateVolumeCapabilities(Ctx*, const ::csi::v1::ValidateVolumeCapabilitiesRequest*,
                                      ::csi::v1::ValidateVolumeCapabilitiesResponse*) override;
  Reactor* ListVolumes(Ctx*, const ::csi::v1::ListVolumesRequest*,
                       ::csi::v1::ListVolumesResponse*) override;
  Reactor* GetCapacity(Ctx*, const ::csi::v1::GetCapacityRequest*,
                       ::csi::v1::GetCapacityResponse*) override;
  Reactor* ControllerGetCapabilities(Ctx*, const ::csi::v1::ControllerGetCapabilitiesRequest*,
                                     ::csi::v1::ControllerGetCapabilitiesResponse*) override;
  Reactor* CreateSnapshot(Ctx*, const ::csi::v1::CreateSnapshotRequest*,
                          ::csi::v1::CreateSnapshotResponse*) override;
  Reactor* DeleteSnapshot(Ctx*, const ::csi::v1::DeleteSnapshotRequest*,
                          ::csi::v1::DeleteSnapshotResponse*) override;
  Reactor* ListSnapshots(Ctx*, const ::csi::v1::ListSnapshotsRequest*,
                         ::csi::v1::ListSnapshotsResponse*) override;
  Reactor* ControllerExpandVolume(Ctx*, const ::csi::v1::ControllerExpandVolumeRequest*,
                                  ::csi::v1::ControllerExpandVolumeResponse*) override;

 private:
  // Queues fn for the worker, which finishes the call with what fn returns.
  Reactor* Queued(Ctx* ctx, const char* rpc, std::function<grpc::Status()> fn);
  void WorkerLoop();

  // What CreateVolume asks for, resolved against the gateway; see the .cc.
  struct NewVolume;

  // The handlers' bodies; worker thread only.
  grpc::Status DoCreateVolume(const ::csi::v1::CreateVolumeRequest& req,
                              ::csi::v1::CreateVolumeResponse* resp);
  // CreateVolume's steps: the target (made, or found from an earlier call), LUN 0 on it, and
  // the answer from a target that has its LUN 0 (NewVolume's or ALREADY_EXISTS).
  grpc::Status MakeTarget(const NewVolume& v, iscsigw::v1::Target* target, bool* created);
  grpc::Status MakeLun(const NewVolume& v, bool created_target,
                       ::csi::v1::CreateVolumeResponse* resp);
  grpc::Status AnswerExisting(const NewVolume& v, const iscsigw::v1::Target& target,
                              ::csi::v1::CreateVolumeResponse* resp);
  grpc::Status DoDeleteVolume(const ::csi::v1::DeleteVolumeRequest& req);
  grpc::Status DoPublish(const ::csi::v1::ControllerPublishVolumeRequest& req);
  grpc::Status DoUnpublish(const ::csi::v1::ControllerUnpublishVolumeRequest& req);
  // A session of `node`'s initiator on volume `volume_id` from an address `node` does not list
  // ("IP:PORT" in `where`; empty: none, or `node` lists no address): another machine of that
  // name.
  grpc::Status SessionElsewhere(const std::string& volume_id, const NodeIdentity& node,
                                std::string* where);
  grpc::Status DoValidate(const ::csi::v1::ValidateVolumeCapabilitiesRequest& req,
                          ::csi::v1::ValidateVolumeCapabilitiesResponse* resp);
  grpc::Status DoListVolumes(const ::csi::v1::ListVolumesRequest& req,
                             ::csi::v1::ListVolumesResponse* resp);
  grpc::Status DoGetCapacity(const ::csi::v1::GetCapacityRequest& req,
                             ::csi::v1::GetCapacityResponse* resp);
  grpc::Status DoCreateSnapshot(const ::csi::v1::CreateSnapshotRequest& req,
                                ::csi::v1::CreateSnapshotResponse* resp);
  grpc::Status DoDeleteSnapshot(const ::csi::v1::DeleteSnapshotRequest& req);
  grpc::Status DoListSnapshots(const ::csi::v1::ListSnapshotsRequest& req,
                               ::csi::v1::ListSnapshotsResponse* resp);
  grpc::Status DoExpand(const ::csi::v1::ControllerExpandVolumeRequest& req,
                        ::csi::v1::ControllerExpandVolumeResponse* resp);

  // The CSI volume a target is (alias kVolumeAliasPrefix...): NOT_FOUND for no target or one that
  // is not a volume.
  grpc::Status GetVolumeTarget(const std::string& volume_id, iscsigw::v1::Target* target);
  // Every target / snapshot of the gateway, through its pages.
  grpc::Status ListAllTargets(std::vector<iscsigw::v1::Target>* out);
  grpc::Status ListAllSnapshots(const iscsigw::v1::ListSnapshotsRequest& filter,
                                std::vector<iscsigw::v1::Snapshot>* out);
  // The volume_context of a target; `portals` comma-separated (PortalList in the .cc);
  // `own_chap`: its CHAP secrets are ChapForVolume's.
  void FillVolumeContext(const std::string& portals, const std::string& target_iqn,
                         uint32_t block_size, bool own_chap,
                         google::protobuf::Map<std::string, std::string>* ctx);

  // A ClientContext for one gateway call, its deadline `timeout` (gateway_timeout: 0) from now
  // or the CSI call's deadline, whichever comes first. Worker thread only.
  std::unique_ptr<grpc::ClientContext> GatewayCtx(
      std::chrono::milliseconds timeout = std::chrono::milliseconds::zero()) const;

  const ControllerOptions options_;
  const std::shared_ptr<iscsigw::v1::GatewayService::Stub> gateway_;

  // Worker thread only: the deadline of the CSI call the worker runs.
  std::chrono::system_clock::time_point call_deadline_ =
      std::chrono::system_clock::time_point::max();

  std::mutex mu_;
  std::condition_variable cv_;
  // Protected by mu_. A job runs its call with true, or answers it UNAVAILABLE with false.
  std::deque<std::function<void(bool)>> queue_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once the members above exist
};

}  // namespace iscsigw::csi
