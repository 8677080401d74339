// csi.v1.Node for iscsigw-csi: attaches a volume on the node kubelet runs on, through the host's
// open-iscsi (iscsiadm: discovery, login, logout) and the host's tools for file systems, all run
// through HostExec (csi/host_exec.h) so that tests replace the host with a fake.
//
// Runs on every node (a DaemonSet pod, --mode node or all). The node id it reports is the host's
// initiator IQN (InitiatorName in /etc/iscsi/initiatorname.iscsi) unless NodeOptions.node_id
// overrides it; the controller puts that IQN in the target's ACL when it publishes a volume.
// What the node must remember across restarts (which staging path holds which session) lives
// under NodeOptions.state_dir.
//
// Handlers run on gRPC threads; host commands take seconds, so they belong on a worker, not on
// the handler's thread. Errors cross the edge as grpc::Status, never as exceptions. Until an
// RPC is overridden here, gRPC answers it UNIMPLEMENTED.
#pragma once

#include <memory>
#include <string>

#include "csi/host_exec.h"
#include "csi/v1/csi.grpc.pb.h"

namespace iscsigw::csi {

struct NodeOptions {
  // Reported by NodeGetInfo as is; empty: the host's InitiatorName.
  std::string node_id;
  // How host commands run (--host-exec): in our namespaces or in pid 1's through nsenter.
  HostExecMode host_exec_mode = HostExecMode::kDirect;
  // Set: used instead of a HostExec made from host_exec_mode (tests inject a fake).
  std::shared_ptr<HostExec> host_exec;
  // The node plugin's own files (per-volume records); created when missing.
  std::string state_dir = "/var/lib/iscsigw-csi";
};

class NodeService final : public ::csi::v1::Node::CallbackService {
 public:
  explicit NodeService(NodeOptions options);

 private:
  const NodeOptions options_;
  const std::shared_ptr<HostExec> exec_;  // options_.host_exec, or one for host_exec_mode
};

}  // namespace iscsigw::csi
