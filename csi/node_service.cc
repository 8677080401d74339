// NodeService's frame (csi/node_service.h): construction, the queue every RPC's work goes
// through, NodeGetCapabilities and NodeGetInfo. The RPCs' work is in node_stage.cc (stage,
// unstage), node_format.cc (the staged file system), node_publish.cc, node_expand.cc and
// node_stats.cc; the host commands in node_host.cc.
#include "csi/node_service.h"

#include <exception>

#include "base/log.h"
#include "csi/node_host.h"
#include "csi/strings.h"
#include "rpc/grpc_util.h"

namespace iscsigw::csi {

using ::csi::v1::NodeServiceCapability;

NodeService::NodeService(NodeOptions options)
    : options_(std::move(options)),
      exec_(options_.host_exec ? options_.host_exec : MakeHostExec(options_.host_exec_mode)),
      records_(options_.state_dir + "/volumes"),
      host_(std::make_unique<Host>(*exec_, options_)),
      stat_volume_(options_.stat_volume ? options_.stat_volume : StatVolumePath),
      resolve_host_(options_.resolve_host ? options_.resolve_host : ResolveHost),
      stats_probes_(std::make_shared<std::atomic<size_t>>(0)),
      queue_(options_.workers, options_.max_queued, options_.max_queued_per_volume) {}

NodeService::~NodeService() = default;

void NodeService::Queue(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                        const std::string& key, std::function<grpc::Status()> work) {
  const auto deadline = ctx->deadline();
  // ctx stays valid until the reactor is finished, and the job finishes it.
  auto job = [ctx, reactor, deadline, key, work = std::move(work)](bool cancelled) {
    if (cancelled) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the node plugin is stopping"));
      return;
    }
    if (ctx->IsCancelled()) {
      // The caller went away, or the server is shutting down and gave up on the call: a mkfs or
      // a login started now would run for nobody, after the plugin was told to stop.
      reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                                   "the call was cancelled while it waited its turn"));
      return;
    }
    if (std::chrono::system_clock::now() >= deadline) {
      // The caller has given up; its retry finds the volume as the last finished call left it.
      reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                   "the call's deadline passed while it waited its turn"));
      return;
    }
    grpc::Status status;
    try {
      status = work();
    } catch (const std::exception& e) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, std::string("node: ") + e.what());
    }
    reactor->Finish(status);
  };
  switch (queue_.Submit(key, std::move(job))) {
    case KeyedWorkQueue::Admit::kQueued:
      return;
    case KeyedWorkQueue::Admit::kQueueFull:
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "the node plugin has too many calls waiting; retry later"));
      return;
    case KeyedWorkQueue::Admit::kKeyBusy:
      reactor->Finish(
          grpc::Status(grpc::StatusCode::ABORTED, "an operation is pending for volume " + key));
      return;
  }
}

grpc::ServerUnaryReactor* NodeService::Serve(grpc::CallbackServerContext* ctx, std::string_view rpc,
                                             const std::string& volume_id, const Status& checked,
                                             std::function<Result<std::string>()> work) {
  auto* reactor = ctx->DefaultReactor();
  if (!checked.ok()) {
    reactor->Finish(rpc::ToGrpcStatus(checked));
    return reactor;
  }
  std::string who(rpc);
  if (!volume_id.empty()) who += " " + volume_id;
  Queue(ctx, reactor, volume_id, [who = std::move(who), work = std::move(work)] {
    Result<std::string> done = work();
    if (!done.ok()) {
      log::Ctl().warn("{}: {}", who, done.status().message());
      return rpc::ToGrpcStatus(done.status());
    }
    log::Ctl().info("{}: {}", who, done.value());
    return grpc::Status::OK;
  });
  return reactor;
}

grpc::ServerUnaryReactor* NodeService::NodeGetCapabilities(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeGetCapabilitiesRequest*,
    ::csi::v1::NodeGetCapabilitiesResponse* resp) {
  for (auto type :
       {NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME, NodeServiceCapability::RPC::EXPAND_VOLUME,
        NodeServiceCapability::RPC::GET_VOLUME_STATS}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* NodeService::NodeGetInfo(grpc::CallbackServerContext* ctx,
                                                   const ::csi::v1::NodeGetInfoRequest*,
                                                   ::csi::v1::NodeGetInfoResponse* resp) {
  auto with_addresses = [this](std::string name) {
    return NodeIdentity{std::move(name), options_.node_addresses}.ToString();
  };
  if (!options_.node_id.empty()) {
    auto* reactor = ctx->DefaultReactor();
    resp->set_node_id(with_addresses(options_.node_id));
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  return Serve(ctx, "NodeGetInfo", "", Status::Ok(),
               [this, resp, with_addresses]() -> Result<std::string> {
                 auto id = NodeId();
                 if (!id.ok()) return id.status();
                 resp->set_node_id(with_addresses(id.value()));
                 return "node id " + resp->node_id();
               });
}

Result<std::string> NodeService::NodeId() {
  constexpr char kFile[] = "/etc/iscsi/initiatorname.iscsi";
  auto r = host_->Check({"cat", kFile});
  if (!r.ok()) return r.status();
  for (const auto& line : Split(r->stdout_data, '\n')) {
    if (line.starts_with("InitiatorName=")) {
      std::string name = Trim(line.substr(14));
      // '@' starts the addresses of a node id (NodeIdentity); no iSCSI name holds one.
      if (name.find('@') != std::string::npos) {
        return FailedPrecondition(std::string(kFile) + " names '" + name +
                                  "', which is no iSCSI name (it holds '@')");
      }
      if (!name.empty()) return name;
    }
  }
  return FailedPrecondition(std::string(kFile) +
                            " on the host names no InitiatorName (is open-iscsi installed?)");
}

}  // namespace iscsigw::csi
