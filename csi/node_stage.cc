// NodeStageVolume and NodeUnstageVolume (csi/node_service.h): the request's checks, the volume's
// record, the iSCSI sessions (whose they are, login, logout) and the device they lead to. The file
// system on a staged volume is node_format.cc's.
#include <netdb.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

#include "base/log.h"
#include "csi/node_checks.h"
#include "csi/node_host.h"
#include "csi/node_service.h"
#include "csi/strings.h"

namespace iscsigw::csi {

using ::csi::v1::VolumeCapability;

// Holds one target's session decisions for the life of a scope; other targets go on.
class NodeService::TargetLock {
 public:
  TargetLock(NodeService& node, std::string iqn) : node_(node), iqn_(std::move(iqn)) {
    std::unique_lock lock(node_.targets_mu_);
    node_.targets_cv_.wait(lock, [&] { return !node_.busy_targets_.contains(iqn_); });
    node_.busy_targets_.insert(iqn_);
  }
  ~TargetLock() {
    std::lock_guard lock(node_.targets_mu_);
    node_.busy_targets_.erase(iqn_);
    node_.targets_cv_.notify_all();
  }
  TargetLock(const TargetLock&) = delete;
  TargetLock& operator=(const TargetLock&) = delete;

 private:
  NodeService& node_;
  const std::string iqn_;
};

namespace {

// The checks NodeStageVolume makes before it queues: the request's fields and the target they
// name, filled into `target`.
Status CheckStage(const ::csi::v1::NodeStageVolumeRequest& req, NodeService::Target* target) {
  if (req.volume_id().empty()) return InvalidArgument("volume_id is required");
  if (Status s = CheckPath("staging_target_path", req.staging_target_path()); !s.ok()) return s;
  if (Status s = CheckCapability(req.volume_capability(), req.has_volume_capability()); !s.ok()) {
    return s;
  }
  auto refuse = [&](const std::string& msg) {
    return InvalidArgument("volume " + req.volume_id() + ": " + msg);
  };
  const auto* iqn = Lookup(req.volume_context(), req.publish_context(), kCtxTargetIqn);
  if (iqn == nullptr || iqn->empty()) return refuse("volume_context.targetIqn is required");
  if (Status s = CheckTargetIqn(*iqn); !s.ok()) return refuse(s.message());
  target->iqn = *iqn;
  const auto* portals = Lookup(req.volume_context(), req.publish_context(), kCtxPortals);
  if (portals != nullptr) target->portals = Split(*portals, ',');
  if (target->portals.empty()) return refuse("volume_context.portals is required");
  for (const auto& p : target->portals) {
    if (!SplitPortal(p)) {
      return refuse("volume_context.portals: " + p +
                    " is not HOST:PORT (an IPv6 address as [ADDR]:PORT)");
    }
  }
  if (const auto* lun = Lookup(req.volume_context(), req.publish_context(), kCtxLun)) {
    if (lun->empty() || lun->size() > 5 ||
        lun->find_first_not_of("0123456789") != std::string::npos) {
      return refuse("volume_context.lun " + *lun + " is not a LUN number");
    }
    target->lun = std::stoi(*lun);
  }
  auto chap = ParseChapSecrets(req.secrets());
  if (!chap.ok()) return refuse(chap.status().message());
  target->chap = chap.value();
  if (const auto* own = Lookup(req.volume_context(), req.publish_context(), kCtxChapPerVolume)) {
    if (*own != "true" && *own != "false") {
      return refuse("volume_context.chapPerVolume '" + *own + "' is not true or false");
    }
    if (*own == "true") {
      if (!target->chap.enabled()) {
        return refuse(std::string("volume_context.chapPerVolume needs CHAP in the node-stage "
                                  "secret (") +
                      kChapUser + ", " + kChapSecret + ")");
      }
      auto derived = ChapForVolume(target->chap, req.volume_id());
      if (!derived.ok()) return derived.status();
      target->chap = derived.value();
    }
  }
  return Status::Ok();
}

// OK when `now` asks for what `staged` is; else ALREADY_EXISTS naming the first difference.
Status SameStage(const VolumeRecord& staged, const VolumeRecord& now) {
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  auto differs = [&](const std::string& what, const std::string& was, const std::string& is) {
    return AlreadyExists("volume " + now.volume_id + " is staged on this node with " + what + " " +
                         was + ", not " + is + " (NodeUnstageVolume first)");
  };
  auto access = [](bool block, const std::string& fs) { return block ? "block" : "mount " + fs; };
  if (staged.target_iqn != now.target_iqn) {
    return differs("targetIqn", staged.target_iqn, now.target_iqn);
  }
  if (staged.lun != now.lun) {
    return differs("lun", std::to_string(staged.lun), std::to_string(now.lun));
  }
  if (sorted(staged.portals) != sorted(now.portals)) {
    return differs("portals", Join(staged.portals, ","), Join(now.portals, ","));
  }
  if (staged.block != now.block || staged.fs_type != now.fs_type) {
    return differs("access", access(staged.block, staged.fs_type), access(now.block, now.fs_type));
  }
  if (!staged.access_known) return Status::Ok();  // a record from before these were kept
  if (staged.read_only != now.read_only) {
    return differs("access mode", staged.read_only ? "read-only" : "read-write",
                   now.read_only ? "read-only" : "read-write");
  }
  if (sorted(staged.mount_flags) != sorted(now.mount_flags)) {
    return differs("mount_flags", "[" + Join(staged.mount_flags, ",") + "]",
                   "[" + Join(now.mount_flags, ",") + "]");
  }
  return Status::Ok();
}

// What a stage of `req` on `target` writes down before it learns the device.
VolumeRecord StagedRecord(const ::csi::v1::NodeStageVolumeRequest& req,
                          const NodeService::Target& target) {
  const VolumeCapability& cap = req.volume_capability();
  VolumeRecord rec;
  rec.volume_id = req.volume_id();
  rec.target_iqn = target.iqn;
  rec.lun = target.lun;
  rec.portals = target.portals;
  rec.staging_path = req.staging_target_path();
  rec.block = cap.has_block();
  rec.fs_type = rec.block ? "" : (cap.mount().fs_type().empty() ? "ext4" : cap.mount().fs_type());
  rec.read_only = ReadOnly(cap);
  if (!rec.block) {
    rec.mount_flags.assign(cap.mount().mount_flags().begin(), cap.mount().mount_flags().end());
  }
  return rec;
}

}  // namespace

grpc::ServerUnaryReactor* NodeService::NodeStageVolume(grpc::CallbackServerContext* ctx,
                                                       const ::csi::v1::NodeStageVolumeRequest* req,
                                                       ::csi::v1::NodeStageVolumeResponse*) {
  Target target;
  Status checked = CheckStage(*req, &target);
  return Serve(ctx, "NodeStageVolume", req->volume_id(), checked,
               [this, req, target]() -> Result<std::string> {
                 const auto start = Clock::now();
                 if (Status s = Stage(*req, target); !s.ok()) return s;
                 const auto ms =
                     std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
                 return "staged at " + req->staging_target_path() + " in " +
                        std::to_string(ms.count()) + " ms";
               });
}

Result<std::vector<std::string>> NodeService::ResolvePortals(
    const std::vector<std::string>& portals) {
  std::vector<std::string> addresses;
  for (const auto& portal : portals) {
    const auto split = SplitPortal(portal);  // checked on the gRPC thread
    const auto& [host, port] = *split;
    auto addr = resolve_host_(host);
    if (!addr.ok()) return addr.status();
    // A wildcard is where a server listens, not an address to reach it at.
    if (addr.value() == "0.0.0.0" || addr.value() == "::") {
      return InvalidArgument("volume_context.portals: " + portal + ": " + host +
                             " is a wildcard address (" + addr.value() + "), not a portal's");
    }
    const bool v6 = addr->find(':') != std::string::npos;
    addresses.push_back((v6 ? "[" + addr.value() + "]" : addr.value()) + ":" + port);
    if (addresses.back() != portal) {
      log::Ctl().debug("portal {} is at {}", portal, addresses.back());
    }
  }
  return addresses;
}

Status NodeService::Stage(const ::csi::v1::NodeStageVolumeRequest& req, const Target& target) {
  VolumeRecord rec = StagedRecord(req, target);
  auto old = records_.Load(rec.volume_id);
  if (!old.ok()) return old.status();
  if (old.value()) {
    // CSI: staged already with another target or capability is ALREADY_EXISTS; the record of
    // what was staged stays as it is, or its unstage would undo the wrong thing.
    if (Status s = SameStage(*old.value(), rec); !s.ok()) return s;
  }
  if (old.value() && !old.value()->device.empty()) {
    rec.device = old.value()->device;
    rec.multipath_map = old.value()->multipath_map;
  }
  if (old.value()) {
    // Staged before: its sessions are at the addresses the names had then.
    rec.addresses = old.value()->addresses;
  } else {
    auto addresses = ResolvePortals(target.portals);
    if (!addresses.ok()) return addresses.status();
    rec.addresses = std::move(addresses.value());
  }
  if (Status s = LogIn(rec, old.value() ? &*old.value() : nullptr, target); !s.ok()) return s;
  if (Status s = AttachDevice(rec, target); !s.ok()) return s;
  if (rec.block) return Status::Ok();
  return MountStaged(rec, req.volume_capability());
}

Status NodeService::LogIn(VolumeRecord& rec, const VolumeRecord* old, const Target& target) {
  // Who owns each session is decided and written down under the target's lock, so an
  // unstage of another volume on the target cannot log out of one this stage counts on.
  TargetLock lock(*this, target.iqn);
  auto sessions = host_->SessionPortals(target.iqn);
  if (!sessions.ok()) return sessions.status();
  std::optional<std::vector<VolumeRecord>> others;
  std::vector<std::string> login;
  for (const auto& address : rec.addresses) {
    const bool has_session = sessions->contains(address);
    // A stage again keeps what it owned.
    const bool again = old && Contains(old->addresses, address);
    bool made = again && Contains(old->made_node_records, address);
    bool logged_in = again && Contains(old->logged_in, address);
    if (!has_session) {
      // Ours to make: the session, and the node record unless one is there.
      logged_in = true;
      if (!made) {
        auto exists = host_->NodeRecordExists(target.iqn, address);
        if (!exists.ok()) return exists.status();
        made = !exists.value();
      }
      login.push_back(address);
    } else if (!again) {
      // Someone's session, used as it is: ours only if this plugin made it for another
      // volume on the target (then it ends with the last volume that uses it).
      if (!others) {
        auto all = records_.LoadAll();
        if (!all.ok()) return all.status();
        others = std::move(all.value());
      }
      for (const auto& o : *others) {
        if (o.volume_id == rec.volume_id || o.target_iqn != rec.target_iqn) continue;
        made = made || Contains(o.made_node_records, address);
        logged_in = logged_in || Contains(o.logged_in, address);
      }
    }
    if (made) rec.made_node_records.push_back(address);
    if (logged_in) rec.logged_in.push_back(address);
  }
  // Before the first login: a stage that fails half way can still be unstaged.
  if (Status s = records_.Save(rec); !s.ok()) return s;
  for (const auto& address : login) {
    const bool ours = Contains(rec.made_node_records, address);
    if (Status s = host_->Login(target.iqn, address, target.chap, ours); !s.ok()) return s;
  }
  return Status::Ok();
}

Status NodeService::AttachDevice(VolumeRecord& rec, const Target& target) {
  const auto deadline = Clock::now() + options_.attach_timeout;
  std::vector<std::string> paths;
  for (const auto& address : rec.addresses) {
    auto dev = host_->WaitFor(ByPath(address, target.iqn, target.lun), deadline);
    if (!dev.ok()) return dev.status();
    paths.push_back(dev.value());
  }
  if (paths.size() > 1) {
    auto map = host_->WaitForMap(paths, deadline);
    if (!map.ok()) return map.status();
    const std::string dev = "/dev/mapper/" + map.value();
    if (auto r = host_->WaitFor(dev, deadline); !r.ok()) return r.status();
    rec.device = dev;
    rec.multipath_map = map.value();
  } else {
    rec.device = paths.front();
    rec.multipath_map.clear();
  }
  return records_.Save(rec);
}

grpc::ServerUnaryReactor* NodeService::NodeUnstageVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeUnstageVolumeRequest* req,
    ::csi::v1::NodeUnstageVolumeResponse*) {
  Status checked = req->volume_id().empty()
                       ? InvalidArgument("volume_id is required")
                       : CheckPath("staging_target_path", req->staging_target_path());
  return Serve(ctx, "NodeUnstageVolume", req->volume_id(), checked,
               [this, req]() -> Result<std::string> {
                 if (Status s = Unstage(*req); !s.ok()) return s;
                 return std::string("done");
               });
}

Status NodeService::Unstage(const ::csi::v1::NodeUnstageVolumeRequest& req) {
  auto mounted = host_->MountedAt(req.staging_target_path());
  if (!mounted.ok()) return mounted.status();
  if (mounted.value()) {
    if (auto r = host_->Check({"umount", "--", req.staging_target_path()}); !r.ok()) {
      return r.status();
    }
  }
  auto rec = records_.Load(req.volume_id());
  if (!rec.ok()) return rec.status();
  if (!rec.value()) return UnstageUnrecorded(req.volume_id());
  const VolumeRecord& r = *rec.value();
  if (!r.multipath_map.empty()) {
    auto exists = host_->Run({"readlink", "-e", "/dev/mapper/" + r.multipath_map});
    if (!exists.ok()) return exists.status();
    if (exists->ok()) {
      if (auto f = host_->Check({"multipath", "-f", r.multipath_map}); !f.ok()) return f.status();
    }
  }
  TargetLock lock(*this, r.target_iqn);
  auto all = records_.LoadAll();
  if (!all.ok()) return all.status();
  for (const auto& address : r.addresses) {
    // Only what this plugin made, and not while another volume on the target still uses it.
    const VolumeRecord* user = nullptr;
    for (const auto& o : all.value()) {
      if (o.volume_id != r.volume_id && o.target_iqn == r.target_iqn &&
          Contains(o.addresses, address)) {
        user = &o;
      }
    }
    if (user != nullptr) {
      log::Ctl().info("volume {}: session {} {} kept: volume {} uses it too", r.volume_id,
                      r.target_iqn, address, user->volume_id);
      continue;
    }
    if (Contains(r.logged_in, address)) {
      if (Status s = host_->Logout(r.target_iqn, address); !s.ok()) return s;
    }
    if (Contains(r.made_node_records, address)) {
      if (Status s = host_->DeleteNodeRecord(r.target_iqn, address); !s.ok()) return s;
    }
  }
  return records_.Remove(req.volume_id());
}

Status NodeService::UnstageUnrecorded(const std::string& volume_id) {
  // Unstaged already, never staged here, or staged by a plugin whose records are gone: only
  // open-iscsi can tell, and only for a target whose name the volume id gives. An id that gives
  // none (a static volume's handle) is OK all the same: NodeUnstageVolume is idempotent, and a
  // kubelet retry after an unstage that worked must not fail for ever and stall a drain.
  const std::string iqn = std::string(kGatewayIqnPrefix) + volume_id;
  // A plain name, then the checks a stage's targetIqn passes, before the name reaches iscsiadm.
  const Status names = IsPlainVolumeName(volume_id)
                           ? CheckTargetIqn(iqn)
                           : InvalidArgument("not a plain volume name of [a-z0-9.-]");
  if (!names.ok()) {
    log::Ctl().warn(
        "volume {}: no record and the id names no target of this driver: nothing to clean ({})",
        volume_id, names.message());
    return Status::Ok();
  }
  TargetLock lock(*this, iqn);
  auto sessions = host_->SessionPortals(iqn);
  if (!sessions.ok()) return sessions.status();
  auto nodes = host_->NodeRecordPortals(iqn);
  if (!nodes.ok()) return nodes.status();
  if (sessions->empty() && nodes->empty()) return Status::Ok();
  auto all = records_.LoadAll();
  if (!all.ok()) return all.status();
  // A portal another volume on the target has a record of is that volume's to end; one that
  // does not parse as HOST:PORT is nothing iscsiadm gave us.
  auto kept = [&](const std::string& address) {
    if (!SplitPortal(address)) {
      log::Ctl().warn("volume {}: open-iscsi lists {} for {}, which is no HOST:PORT; left alone",
                      volume_id, address, iqn);
      return true;
    }
    for (const auto& o : all.value()) {
      if (o.target_iqn == iqn && Contains(o.addresses, address)) {
        log::Ctl().info("volume {}: {} at {} kept: volume {} uses it", volume_id, iqn, address,
                        o.volume_id);
        return true;
      }
    }
    return false;
  };
  std::vector<std::string> logout, remove;
  for (const auto& address : sessions.value()) {
    if (!kept(address)) logout.push_back(address);
  }
  for (const auto& address : nodes.value()) {
    if (!kept(address)) remove.push_back(address);
  }
  // The map over the sessions' paths first: one left without paths would queue I/O for ever.
  // The volume model puts the volume at LUN 0.
  std::set<std::string> maps;
  for (const auto& address : logout) {
    auto dev = host_->Run({"readlink", "-e", ByPath(address, iqn, 0)});
    if (!dev.ok()) return dev.status();
    if (!dev->ok() || Trim(dev->stdout_data).empty()) continue;
    auto map = host_->MapOver(Trim(dev->stdout_data));
    if (!map.ok()) return map.status();
    if (!map->empty()) maps.insert(map.value());
  }
  for (const auto& map : maps) {
    if (auto f = host_->Check({"multipath", "-f", map}); !f.ok()) return f.status();
  }
  for (const auto& address : logout) {
    if (Status s = host_->Logout(iqn, address); !s.ok()) return s;
  }
  for (const auto& address : remove) {
    if (Status s = host_->DeleteNodeRecord(iqn, address); !s.ok()) return s;
  }
  log::Ctl().info(
      "volume {}: no record on this node; from open-iscsi: logged out of {} [{}], deleted its "
      "node records [{}]",
      volume_id, iqn, Join(logout, ","), Join(remove, ","));
  return Status::Ok();
}

Result<std::string> ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    const std::string why = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    return Status(StatusCode::kUnavailable, "portal host " + host + " does not resolve: " + why);
  }
  char text[NI_MAXHOST];
  const int ni = ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0,
                               NI_NUMERICHOST);
  ::freeaddrinfo(found);
  if (ni != 0) return Internal("portal host " + host + ": " + ::gai_strerror(ni));
  return std::string(text);
}

}  // namespace iscsigw::csi
