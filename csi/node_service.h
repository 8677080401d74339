// csi.v1.Node for iscsigw-csi: attaches a volume on the node kubelet runs on, through the host's
// open-iscsi (iscsiadm) and the host's tools for devices and file systems (blkid, mkfs, mount,
// multipath, resize2fs, xfs_growfs), all run through HostExec (csi/host_exec.h) so that tests
// replace the host with a fake, and so that in a DaemonSet pod they run in pid 1's namespaces.
//
// Runs on every node (a DaemonSet pod, --mode node or all). The node id it reports is the host's
// initiator IQN (InitiatorName in /etc/iscsi/initiatorname.iscsi, read with `cat` through
// HostExec: the host's file, not the container's) unless NodeOptions.node_id overrides it; the
// controller puts that IQN in the target's ACL when it publishes a volume.
//
// What a volume needs comes from the controller in the volume context (the publish context may
// carry the same keys): targetIqn, lun ("0": one gateway target per volume), portals
// (HOST:PORT,HOST:PORT; an IPv6 address as [ADDR]:PORT) and blockSize. A portal's host may be a
// name: NodeStageVolume resolves it here (the node pod has the host's network), because the
// kernel names the session's device after the address (/dev/disk/by-path/ip-ADDR:PORT-...) and
// iscsiadm lists sessions by address; the address is what iscsiadm is given, and the record
// keeps it so that a re-stage, unstage and expand use the same one. The RPCs:
//   NodeStageVolume    per portal not logged in: node record (`-o new`, unless one is there),
//                      node.startup manual, CHAP from the secrets, login (a session that is
//                      there is used as it is, and is not ours: see Unstage); waits for
//                      /dev/disk/by-path/ip-ADDR:PORT-iscsi-IQN-lun-N; several portals: the
//                      dm-multipath map over them (the sd devices' holder), else the sd device.
//                      Mount access: mkfs (ext4 by default, or xfs) only when `blkid -p` finds no
//                      file system and no partition table, twice (the second right before mkfs),
//                      and never for a read-only access mode (a blank device there is
//                      FAILED_PRECONDITION); then mount at the staging path (ro for read-only
//                      access modes; xfs with nouuid, as a clone shares its source's UUID), and
//                      grow a writable file system smaller than its device (a snapshot restored
//                      or a volume cloned into a larger size: kubelet calls no NodeExpand for
//                      it). Block access: nothing is mounted. A volume staged already
//                      with another targetIqn, lun, portals or capability (block or mount, fs
//                      type, read-only, mount flags): ALREADY_EXISTS, and its record untouched.
//   NodeUnstageVolume  unmount the staging path, flush the multipath map, log out of each
//                      portal's session and delete its node record, but only those this plugin
//                      made (an administrator's session, or one made before us, stays), and
//                      neither while another staged volume on the target (another LUN) uses
//                      it; forget the volume. Whatever is already gone is fine. A volume with
//                      no record (a state directory lost or emptied): the target its id names
//                      (kGatewayIqnPrefix + volume_id, csi/volume_model.h) is looked up in
//                      open-iscsi instead; the multipath map over its LUN 0 flushed, every
//                      session of it logged out and every node record of it deleted (they hold
//                      its CHAP secrets), but for the portals another recorded volume on the
//                      target uses. Nothing there: OK. An id that names no target of the volume
//                      model (no plain volume name, as a static volume's handle may be): OK with
//                      a warning, after the staging path is unmounted; nothing of open-iscsi is
//                      touched (the CSI spec: OK when the volume is not staged on the node, so a
//                      kubelet retry after an unstage that worked does not fail for ever). Only
//                      the record covers such a volume, and a plain id whose stage used a
//                      volume_context targetIqn other than kGatewayIqnPrefix + volume_id: neither
//                      can be rebuilt without its record.
//   NodePublishVolume  bind mount the staging path (mount) or the device (block: onto a file
//                      created at target_path) to target_path; ro honoured. Already mounted
//                      there: OK if it is that (the staging mount's source, or the device's
//                      numbers, and the same ro flag), else ALREADY_EXISTS.
//   NodeUnpublishVolume unmount and remove target_path.
//   NodeExpandVolume   rescan each portal's session, `multipathd resize map`, then resize2fs
//                      (ext4) or xfs_growfs on the mount (xfs); block: rescan only. Answers the
//                      device's new size.
//   NodeGetVolumeStats statvfs of the path (bytes and inodes), or BLKGETSIZE64 for a raw block
//                      path. These two are the only calls made in the plugin's own mount
//                      namespace: kubelet's paths reach the pod through mount propagation.
//                      They run on a thread of their own per call, not on the workers below: on
//                      a hung mount (a session gone, I/O queued with no path) they may never
//                      return, and an answer (DEADLINE_EXCEEDED) is given after stats_timeout
//                      while that thread is left to end when the kernel lets it. A process
//                      through HostExec would not do: one in uninterruptible sleep outlives
//                      SIGKILL, and HostExec waits for it. At most max_stats_probes such threads
//                      at once; beyond, UNAVAILABLE.
// Every call is idempotent, as CSI requires: repeating one that succeeded succeeds and changes
// nothing.
//
// What was staged (IQN, portals and their addresses, which node records and sessions are ours,
// the capability, device, map) is kept in a per-volume JSON file under
// NodeOptions.state_dir (csi/volume_record.h), so Unstage, Publish (block), Expand and Stats work
// after a plugin restart (in Kubernetes the directory is on the node, under the kubelet's plugin
// directory: docs/kubernetes.md). It is written before the first login, so an attach that fails
// half way can still be undone by NodeUnstageVolume.
//
// Secrets: CHAP credentials go into open-iscsi's node record with `iscsiadm -o update -n KEY -v
// VALUE`. open-iscsi has no way to take a value from a file or stdin, and writing its record
// files ourselves would tie us to one version's private format and bypass its locking; so the
// secret is on that one iscsiadm's command line for the few milliseconds it runs (readable in
// /proc/PID/cmdline by processes of the host that may read it). It is never on our own command
// line, and every command line we log or put in an error message has the value of any
// `-n *password*` replaced by "<redacted>". The state file holds no secret.
//
// Threads: gRPC handlers only validate the request and queue the work on a KeyedWorkQueue
// (csi/work_queue.h) keyed by volume id, so calls for one volume run one after the other (kubelet
// retries while the first attempt still runs) and host commands never run on a gRPC thread; a
// call whose deadline passed before its turn is answered DEADLINE_EXCEEDED without running, and
// one cancelled meanwhile (the caller gone, or the server shutting down and out of patience)
// CANCELLED without running: no mkfs or login starts for nobody. A full queue answers
// RESOURCE_EXHAUSTED, too many calls waiting for one volume ABORTED.
// Errors cross the edge as grpc::Status, never as exceptions: INVALID_ARGUMENT for a missing id,
// path, capability or context key, a path that is not absolute, a targetIqn that is not an iSCSI
// name, a portal that is not HOST:PORT or is a wildcard; NOT_FOUND for a volume or path that is
// not there; ALREADY_EXISTS for a volume staged or published as something else;
// FAILED_PRECONDITION for a device that holds something we will not format (or is blank for a
// read-only access mode) or a volume that is not staged; UNAVAILABLE for a portal host that does
// not resolve; INTERNAL naming the host command and its stderr when one fails. Destroy the service
// after the server has shut down: queued calls are answered UNAVAILABLE, running ones finish.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "csi/host_exec.h"
#include "csi/v1/csi.grpc.pb.h"
#include "csi/volume_model.h"
#include "csi/volume_record.h"
#include "csi/work_queue.h"

namespace iscsigw::csi {

// One numeric address of `host` (getaddrinfo's first, in its RFC 6724 order), as getnameinfo
// writes it: "10.0.2.2", "fd00::2" (no brackets). UNAVAILABLE when it does not resolve.
Result<std::string> ResolveHost(const std::string& host);

// What NodeGetVolumeStats reports of a path.
struct VolumeStats {
  bool block = false;  // a block device: only bytes_total is known
  int64_t bytes_total = 0;
  int64_t bytes_available = 0;
  int64_t bytes_used = 0;
  int64_t inodes_total = 0;
  int64_t inodes_available = 0;
  int64_t inodes_used = 0;
};

// statvfs of `path`, or BLKGETSIZE64 when it is a block device; NOT_FOUND when there is nothing
// there. Blocks for as long as the kernel does.
Result<VolumeStats> StatVolumePath(const std::string& path);

struct NodeOptions {
  // Reported by NodeGetInfo as is; empty: the host's InitiatorName.
  std::string node_id;
  // The node's addresses (canonical, CanonicalAddress): NodeGetInfo reports them after the
  // name (NodeIdentity), and a publish admits the name from them only.
  std::vector<std::string> node_addresses;
  // How host commands run (--host-exec): in our namespaces or in pid 1's through nsenter.
  HostExecMode host_exec_mode = HostExecMode::kDirect;
  // Set: used instead of a HostExec made from host_exec_mode (tests inject a fake).
  std::shared_ptr<HostExec> host_exec;
  // How a portal's host name becomes an address; unset: ResolveHost (tests inject a fake).
  std::function<Result<std::string>(const std::string& host)> resolve_host;
  // The node plugin's own files (per-volume records); created when missing.
  std::string state_dir = "/var/lib/iscsigw-csi";
  // Longest wait for a device after login: its by-path link, the multipath map over its paths,
  // and a grown size after a rescan.
  std::chrono::milliseconds attach_timeout{60'000};
  // How often those waits look again.
  std::chrono::milliseconds poll_interval{200};
  // How NodeGetVolumeStats looks at a path; unset: StatVolumePath (tests inject a fake).
  std::function<Result<VolumeStats>(const std::string& path)> stat_volume;
  // Longest wait for one (or the call's deadline, if sooner), and how many may be unanswered.
  std::chrono::milliseconds stats_timeout{10'000};
  size_t max_stats_probes = 8;
  // Worker threads for host work, jobs allowed to wait, and jobs allowed to wait per volume.
  size_t workers = 4;
  size_t max_queued = 64;
  size_t max_queued_per_volume = 4;
};

// A command line for logs and error messages: the value of every `-n KEY -v VALUE` whose KEY
// names a password (node.session.auth.password, ..._in) replaced by "<redacted>".
std::string RedactedCommandLine(const std::vector<std::string>& argv);

class NodeService final : public ::csi::v1::Node::CallbackService {
 public:
  explicit NodeService(NodeOptions options);
  ~NodeService() override;

  grpc::ServerUnaryReactor* NodeStageVolume(grpc::CallbackServerContext* ctx,
                                            const ::csi::v1::NodeStageVolumeRequest* req,
                                            ::csi::v1::NodeStageVolumeResponse* resp) override;
  grpc::ServerUnaryReactor* NodeUnstageVolume(grpc::CallbackServerContext* ctx,
                                              const ::csi::v1::NodeUnstageVolumeRequest* req,
                                              ::csi::v1::NodeUnstageVolumeResponse* resp) override;
  grpc::ServerUnaryReactor* NodePublishVolume(grpc::CallbackServerContext* ctx,
                                              const ::csi::v1::NodePublishVolumeRequest* req,
                                              ::csi::v1::NodePublishVolumeResponse* resp) override;
  grpc::ServerUnaryReactor* NodeUnpublishVolume(
      grpc::CallbackServerContext* ctx, const ::csi::v1::NodeUnpublishVolumeRequest* req,
      ::csi::v1::NodeUnpublishVolumeResponse* resp) override;
  grpc::ServerUnaryReactor* NodeGetVolumeStats(
      grpc::CallbackServerContext* ctx, const ::csi::v1::NodeGetVolumeStatsRequest* req,
      ::csi::v1::NodeGetVolumeStatsResponse* resp) override;
  grpc::ServerUnaryReactor* NodeExpandVolume(grpc::CallbackServerContext* ctx,
                                             const ::csi::v1::NodeExpandVolumeRequest* req,
                                             ::csi::v1::NodeExpandVolumeResponse* resp) override;
  grpc::ServerUnaryReactor* NodeGetCapabilities(
      grpc::CallbackServerContext* ctx, const ::csi::v1::NodeGetCapabilitiesRequest* req,
      ::csi::v1::NodeGetCapabilitiesResponse* resp) override;
  grpc::ServerUnaryReactor* NodeGetInfo(grpc::CallbackServerContext* ctx,
                                        const ::csi::v1::NodeGetInfoRequest* req,
                                        ::csi::v1::NodeGetInfoResponse* resp) override;

  // Calls queued and not started yet.
  size_t QueuedForTest() { return queue_.Waiting(); }

  // What a volume's context names; parsed and checked on the gRPC thread.
  struct Target {
    std::string iqn;
    int lun = 0;
    std::vector<std::string> portals;  // as given
    ChapSecrets chap;                  // what the login sends: the secret's, or ChapForVolume's
  };

 private:
  // Grows a mounted, writable file system that is smaller than its device.
  Status GrowToDevice(const VolumeRecord& rec);
  // Each portal's host resolved: IP:PORT or [IPv6]:PORT, in order.
  Result<std::vector<std::string>> ResolvePortals(const std::vector<std::string>& portals);
  // The work of each RPC; run on a worker, one volume at a time.
  Status Stage(const ::csi::v1::NodeStageVolumeRequest& req, const Target& target);
  // Stage's steps (node_stage.cc, node_format.cc). LogIn: under the target's lock, which
  // sessions and node records are the volume's (`old`: what an earlier stage wrote, or null),
  // written to its record before the first login, then a login wherever no session is there.
  Status LogIn(VolumeRecord& rec, const VolumeRecord* old, const Target& target);
  // Waits for each portal's device and, with several, the multipath map over them; records it.
  Status AttachDevice(VolumeRecord& rec, const Target& target);
  // Mount access: a file system made on a blank device only, mounted at the staging path.
  Status MountStaged(const VolumeRecord& rec, const ::csi::v1::VolumeCapability& cap);
  Status Unstage(const ::csi::v1::NodeUnstageVolumeRequest& req);
  // Unstage of a volume with no record on this node: what to end is found on the host.
  Status UnstageUnrecorded(const std::string& volume_id);
  Status Publish(const ::csi::v1::NodePublishVolumeRequest& req);
  Status Unpublish(const ::csi::v1::NodeUnpublishVolumeRequest& req);
  Result<int64_t> Expand(const ::csi::v1::NodeExpandVolumeRequest& req);
  Result<std::string> NodeId();

  // Each RPC's shape: a request that failed the handler's checks (`checked`) is answered at once;
  // else `work` is queued on the volume's key (empty: none), and its outcome is logged as
  // "RPC VOLUME: ..." (what it returns on success) and answered.
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, std::string_view rpc,
                                  const std::string& volume_id, const Status& checked,
                                  std::function<Result<std::string>()> work);
  // Answers `reactor` from a worker with what `work` returns (key: the volume id, or empty).
  void Queue(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
             const std::string& key, std::function<grpc::Status()> work);

  class Host;        // the host commands the RPCs are made of (csi/node_host.h)
  struct StatsCall;  // one NodeGetVolumeStats call between its probe and its alarm
  class TargetLock;  // one target's session decisions at a time

  const NodeOptions options_;
  const std::shared_ptr<HostExec> exec_;  // options_.host_exec, or one for host_exec_mode
  const RecordStore records_;
  std::unique_ptr<Host> host_;
  // Targets whose sessions a stage or unstage is deciding about: whether to log in, whose a
  // session is, whether to log out. Other workers' calls on the same target wait.
  std::mutex targets_mu_;
  std::condition_variable targets_cv_;
  std::set<std::string> busy_targets_;  // protected by targets_mu_
  const std::function<Result<VolumeStats>(const std::string&)> stat_volume_;
  const std::function<Result<std::string>(const std::string&)> resolve_host_;
  // NodeGetVolumeStats threads still running; shared with them, as they may outlive the service.
  const std::shared_ptr<std::atomic<size_t>> stats_probes_;
  // Last member: destroyed first, so no job outlives what it uses.
  KeyedWorkQueue queue_;
};

}  // namespace iscsigw::csi
