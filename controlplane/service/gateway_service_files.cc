// GatewayServiceImpl, the part that manages backing: LUN files in the LUN directory, copies for
// clones, rbd images made for their LUNs, backing files and images removed with their LUNs,
// snapshots and the directory's capacity.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>

#include "base/log.h"
#include "controlplane/service/gateway_service.h"
#include "controlplane/service/lookup.h"
#include "controlplane/state/lun_files.h"
#include "controlplane/state/state_file.h"

namespace iscsigw::service {

namespace {

constexpr int kDefaultSnapshotPage = 100;
constexpr int kMaxSnapshotPage = 1000;
// Snapshots are persisted in the state file; past this many CreateSnapshot is refused.
constexpr int kMaxSnapshots = 4096;

Status NoLunDir(const std::string& what) {
  return FailedPrecondition(what + " needs a LUN directory: start iscsigwd with --lun-dir");
}

// CSI snapshot and volume names are DNS-label-like; a snapshot name is also a file name.
Status CheckSnapshotName(const std::string& name) {
  if (name.empty() || name.size() > 128) {
    return InvalidArgument("snapshot name must be 1..128 characters, not " +
                           std::to_string(name.size()));
  }
  if (name[0] == '.') return InvalidArgument("snapshot name " + name + " starts with '.'");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return InvalidArgument("snapshot name " + name + ": only A-Z a-z 0-9 . _ -");
  }
  return Status::Ok();
}

// Why a copy of a LUN in use must share blocks: a sparse copy is not a point in time.
std::string InUseReason(const std::string& source, size_t sessions) {
  return source + " is in use by " + std::to_string(sessions) +
         " session(s), and a copy made while it is written is not a point in time: log the "
         "sessions out first, or keep the LUN directory on a file system that shares blocks "
         "(XFS with reflink, btrfs)";
}

// What looking at `path` through the allowed paths finds: OK when something is there,
// NOT_FOUND when nothing is, another code when it cannot tell.
StatusCode Exists(const api::AllowedPaths& allowed, const std::string& path) {
  return allowed.Open(path, O_PATH).status().code();
}

}  // namespace

Status GatewayServiceImpl::PrepareFileLun(const v1::CreateLunRequest& req, const std::string& who,
                                          v1::Lun* lun) {
  const bool has_source = req.source_case() != v1::CreateLunRequest::SOURCE_NOT_SET;
  if (!lun->has_file()) {
    if (has_source) return InvalidArgument(who + ": a LUN made from a source needs a file backing");
    return Status::Ok();
  }
  v1::FileBacking* file = lun->mutable_file();
  file->clear_created();  // OUTPUT_ONLY: only the gateway decides which files it may remove
  if (!file->path().empty()) {
    auto resolved = state::ResolveLunPath(options_.lun_dir, file->path());
    if (!resolved.ok()) return InvalidArgument(who + ": file." + resolved.status().message());
    file->set_path(resolved.value());
    if (!options_.lun_dir.empty() &&
        file->path().rfind(state::SnapshotDir(options_.lun_dir) + "/", 0) == 0) {
      return InvalidArgument(who + ": file.path " + file->path() +
                             " is in the snapshot directory, which is the gateway's");
    }
  }
  if (!has_source) {
    file->set_created(file->create() &&
                      Exists(*options_.backing.paths, file->path()) == StatusCode::kNotFound);
    return Status::Ok();
  }

  // A clone: the new file is a copy of a snapshot or of another file LUN.
  std::string source_path;
  std::string source_name;
  uint32_t source_block_size = 0;
  size_t source_sessions = 0;  // a snapshot has none
  const auto snap = store_->Snapshot();
  if (req.source_case() == v1::CreateLunRequest::kSnapshot) {
    const v1::Snapshot* sn = FindSnapshot(*snap, req.snapshot());
    if (sn == nullptr) return NotFound(who + ": snapshot " + req.snapshot() + " not found");
    source_path = sn->path();
    source_name = "snapshot " + sn->name();
    source_block_size = sn->block_size();
  } else {
    const auto& ref = req.lun_source();
    const v1::Lun* src = FindLun(*snap, ref.target(), ref.id());
    source_name = LunName(ref.id(), ref.target());
    if (src == nullptr) return NotFound(who + ": source " + source_name + " not found");
    if (!src->has_file()) {
      return FailedPrecondition(who + ": source " + source_name + " is not a file LUN");
    }
    source_path = src->file().path();
    source_block_size = src->block_size() ? src->block_size() : 512;
    source_sessions = SessionsOf(ref.target());
  }
  if (!file->create()) {
    return InvalidArgument(who + ": a LUN made from " + source_name +
                           " needs file.create: the gateway makes its file");
  }
  if (lun->block_size() != source_block_size) {
    return InvalidArgument(who + ": block_size " + std::to_string(lun->block_size()) +
                           " differs from the " + std::to_string(source_block_size) + " of " +
                           source_name);
  }
  auto copied =
      state::CopyLunFile(*options_.backing.paths, source_path, file->path(), lun->size_bytes(),
                         source_sessions > 0, InUseReason(source_name, source_sessions));
  if (!copied.ok()) {
    const Status& e = copied.status();
    return Status(e.code(), who + ": copy of " + source_name + ": " + e.message());
  }
  lun->set_size_bytes(copied.value().size_bytes);
  file->set_created(true);
  log::Ctl().info("{}: {}: {} copied to {} ({})", call_, who, source_name, file->path(),
                  copied.value().shared_blocks ? "shared blocks" : "full copy");
  return Status::Ok();
}

size_t GatewayServiceImpl::SessionsOf(const std::string& target) const {
  if (dataplane_ == nullptr) return 0;
  const std::string name = state::QualifyTargetName(target);
  size_t n = 0;
  for (const auto& s : dataplane_->ListSessions()) {
    if (!s.discovery && s.target_name == name) ++n;
  }
  return n;
}

Status GatewayServiceImpl::PrepareRbdLun(const std::string& target, const std::string& who,
                                         v1::Lun* lun) {
  if (!lun->has_rbd()) return Status::Ok();
  v1::RbdBacking* rbd = lun->mutable_rbd();
  rbd->clear_created();  // OUTPUT_ONLY: only the gateway decides which images it may remove
  // The spec as the data plane will check it, before anything reaches the cluster.
  api::LunSpec spec;
  spec.id = lun->id();
  spec.backing = api::BackingKind::kRbd;
  spec.rbd = state::ToRbdSpec(*rbd);
  spec.create = rbd->create();
  spec.size_bytes = lun->size_bytes();
  spec.block_size = lun->block_size();
  if (Status s = options_.backing.Check(spec, who + ": "); !s.ok()) return s;
  if (!rbd->create() || lun->read_only()) return Status::Ok();
  if (Status v = api::ValidateLun(state::QualifyTargetName(target), spec); !v.ok()) return v;
  if (lun->size_bytes() == 0) {
    return InvalidArgument(who + ": rbd.create needs size_bytes, the size of the image to make");
  }
  auto made = api::CreateRbdImage(options_.backing.WithDefaults(spec.rbd), lun->size_bytes());
  if (!made.ok()) return Status(made.status().code(), who + ": " + made.status().message());
  rbd->set_created(made.value());
  return Status::Ok();
}

Status GatewayServiceImpl::RemoveCreatedBacking(const std::vector<v1::Lun>& gone,
                                                uint32_t* removed) {
  std::set<std::string> in_use;
  // An rbd image by pool, namespace and name: two LUNs may name one cluster through different
  // conf paths (or the default one), so the conf does not tell images apart.
  auto image_key = [](const v1::RbdBacking& r) {
    return "rbd:" + r.pool() + '\0' + r.namespace_() + '\0' + r.image();
  };
  // A cluster that did not answer is not asked again in this call: each try can take its
  // client_mount_timeout, and a DeleteTarget of many LUNs would hold up every other change.
  std::set<std::string> unreachable;
  for (const auto& t : store_->Snapshot()->targets()) {
    for (const auto& l : t.luns()) {
      if (l.has_file()) in_use.insert(l.file().path());
      if (l.has_rbd()) in_use.insert(image_key(l.rbd()));
    }
  }
  Status first = Status::Ok();
  // One removal's outcome: counted and logged; the first failure is what the call answers.
  auto account = [&](const Status& s, const std::string& what) {
    if (s.ok()) {
      ++*removed;
      log::Ctl().info("{}: {} removed", call_, what);
      return;
    }
    log::Ctl().error("{}: {} not removed: {}", call_, what, s.message());
    if (first.ok()) first = Status(s.code(), "the LUN is deleted; " + s.message());
  };
  for (const auto& l : gone) {
    if (l.has_rbd() && l.rbd().created()) {
      const v1::RbdBacking& r = l.rbd();
      const std::string name = "rbd image " + r.pool() + "/" +
                               (r.namespace_().empty() ? "" : r.namespace_() + "/") + r.image();
      if (in_use.count(image_key(r)) != 0) {
        log::Ctl().info("{}: {} kept: another LUN uses it", call_, name);
        continue;
      }
      const std::string cluster = r.conf() + '\0' + r.client_id() + '\0' + r.keyring();
      Status s = unreachable.count(cluster) != 0
                     ? Status(StatusCode::kUnavailable,
                              name + " not removed: its cluster did not answer for another image")
                     : api::RemoveRbdImage(options_.backing.WithDefaults(state::ToRbdSpec(r)),
                                           kRbdCloseWait);
      if (s.code() == StatusCode::kUnavailable) unreachable.insert(cluster);
      account(s, name);
      continue;
    }
    if (!l.has_file() || !l.file().created()) continue;
    const std::string& path = l.file().path();
    if (in_use.count(path) != 0) {
      log::Ctl().info("{}: {} kept: another LUN uses it", call_, path);
      continue;
    }
    account(state::RemoveLunFile(*options_.backing.paths, path), "backing file " + path);
  }
  return first;
}

Status GatewayServiceImpl::DoCreateSnapshot(const v1::CreateSnapshotRequest& req,
                                            v1::Snapshot* resp) {
  if (options_.lun_dir.empty()) return NoLunDir("CreateSnapshot");
  if (Status n = CheckSnapshotName(req.name()); !n.ok()) return n;
  const std::string source = LunName(req.lun().id(), req.lun().target());
  const std::string target = state::QualifyTargetName(req.lun().target());
  v1::Lun lun;
  {
    const auto snap = store_->Snapshot();
    if (const v1::Snapshot* have = FindSnapshot(*snap, req.name())) {
      if (have->source_target() == target && have->source_lun() == req.lun().id()) {
        *resp = *have;
        return Status::Ok();
      }
      return AlreadyExists("snapshot " + req.name() + " exists, of lun " +
                           std::to_string(have->source_lun()) + " of " + have->source_target());
    }
    if (FindTarget(*snap, req.lun().target()) == nullptr) return TargetNotFound(req.lun().target());
    const v1::Lun* l = FindLun(*snap, req.lun().target(), req.lun().id());
    if (l == nullptr) return NotFound(source + " not found");
    if (!l->has_file()) {
      return FailedPrecondition(source + " is not a file LUN; only file LUNs have snapshots");
    }
    if (snap->snapshots_size() >= kMaxSnapshots) {
      return Status(StatusCode::kResourceExhausted,
                    "the gateway holds " + std::to_string(kMaxSnapshots) + " snapshots already");
    }
    lun = *l;
  }
  const std::string path = state::SnapshotDir(options_.lun_dir) + "/" + req.name();
  // A file there that no snapshot owns is what a crash between copy and commit left behind (no
  // LUN may live in the snapshot directory; a state file that says otherwise keeps its file).
  for (const auto& t : store_->Snapshot()->targets()) {
    for (const auto& l : t.luns()) {
      if (l.has_file() && l.file().path() == path) {
        return FailedPrecondition("snapshot " + req.name() + ": " + path + " is the file of " +
                                  LunName(l.id(), t.name()));
      }
    }
  }
  if (Status s = state::RemoveLunFile(*options_.backing.paths, path); !s.ok()) return s;
  const size_t sessions = SessionsOf(target);
  auto copied = state::CopyLunFile(*options_.backing.paths, lun.file().path(), path, 0,
                                   sessions > 0, InUseReason(source, sessions));
  if (!copied.ok()) {
    return Status(copied.status().code(),
                  "snapshot " + req.name() + " of " + source + ": " + copied.status().message());
  }
  v1::Snapshot sn;
  sn.set_name(req.name());
  sn.set_source_target(target);
  sn.set_source_lun(lun.id());
  sn.set_size_bytes(copied.value().size_bytes);
  sn.set_block_size(lun.block_size() ? lun.block_size() : 512);
  sn.set_path(path);
  sn.set_created_unix_seconds(std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  sn.set_shares_blocks(copied.value().shared_blocks);
  Status s = store_->Update([&](v1::State* st) {
    *st->add_snapshots() = sn;
    return Status::Ok();
  });
  if (!s.ok()) {
    (void)state::RemoveLunFile(*options_.backing.paths, path);
    return s;
  }
  log::Ctl().info("{}: snapshot {} of {} created ({} bytes, {})", call_, sn.name(), source,
                  sn.size_bytes(), sn.shares_blocks() ? "shared blocks" : "full copy");
  *resp = sn;
  return Status::Ok();
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::CreateSnapshot(
    Ctx* ctx, const v1::CreateSnapshotRequest* req, v1::Snapshot* resp) {
  return Serialized(ctx, "CreateSnapshot", *req,
                    [this, req, resp] { return DoCreateSnapshot(*req, resp); });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::ListSnapshots(Ctx* ctx,
                                                               const v1::ListSnapshotsRequest* req,
                                                               v1::ListSnapshotsResponse* resp) {
  return Inline(ctx, *req, [&] {
    if (req->page_size() < 0) {
      return InvalidArgument("page_size " + std::to_string(req->page_size()) + " is negative");
    }
    const int size =
        req->page_size() == 0 ? kDefaultSnapshotPage : std::min(req->page_size(), kMaxSnapshotPage);
    const bool by_lun = req->has_lun() && !req->lun().target().empty();
    const std::string target = by_lun ? state::QualifyTargetName(req->lun().target()) : "";
    const auto snap = store_->Snapshot();
    std::vector<const v1::Snapshot*> match;
    for (const auto& sn : snap->snapshots()) {
      if (!req->name().empty() && sn.name() != req->name()) continue;
      if (by_lun && (sn.source_target() != target || sn.source_lun() != req->lun().id())) {
        continue;
      }
      match.push_back(&sn);
    }
    std::sort(match.begin(), match.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
    // The page token is the name of the last snapshot of the previous page.
    auto it = match.begin();
    if (!req->page_token().empty()) {
      it = std::upper_bound(match.begin(), match.end(), req->page_token(),
                            [](const std::string& tok, auto* sn) { return tok < sn->name(); });
    }
    for (; it != match.end() && resp->snapshots_size() < size; ++it) {
      *resp->add_snapshots() = **it;
    }
    if (it != match.end()) resp->set_next_page_token(resp->snapshots().rbegin()->name());
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::DeleteSnapshot(
    Ctx* ctx, const v1::DeleteSnapshotRequest* req, v1::DeleteSnapshotResponse*) {
  return Serialized(ctx, "DeleteSnapshot", *req, [this, req] {
    std::string path;
    Status s = store_->Update([&](v1::State* st) {
      auto* list = st->mutable_snapshots();
      for (int i = 0; i < list->size(); ++i) {
        if (list->Get(i).name() == req->name()) {
          path = list->Get(i).path();
          list->DeleteSubrange(i, 1);
          return Status::Ok();
        }
      }
      return NotFound("snapshot " + req->name() + " not found");
    });
    if (!s.ok()) return s;
    log::Ctl().info("{}: snapshot {} deleted", call_, req->name());
    // Only a file where CreateSnapshot puts them is removed, whatever a state file says.
    if (options_.lun_dir.empty() ||
        path != state::SnapshotDir(options_.lun_dir) + "/" + req->name()) {
      log::Ctl().warn("{}: snapshot file {} is outside {}; left in place", call_, path,
                      state::SnapshotDir(options_.lun_dir));
      return Status::Ok();
    }
    s = state::RemoveLunFile(*options_.backing.paths, path);
    if (!s.ok()) {
      log::Ctl().error("{}: snapshot file {} not removed: {}", call_, path, s.message());
      return Status(s.code(), "the snapshot is deleted; " + s.message());
    }
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::GetCapacity(Ctx* ctx,
                                                             const v1::GetCapacityRequest* req,
                                                             v1::Capacity* resp) {
  return Inline(ctx, *req, [&] {
    if (options_.lun_dir.empty()) return NoLunDir("GetCapacity");
    auto c = state::CapacityOf(options_.lun_dir);
    if (!c.ok()) return c.status();
    resp->set_lun_dir(options_.lun_dir);
    resp->set_total_bytes(c.value().total_bytes);
    resp->set_available_bytes(c.value().available_bytes);
    resp->set_shares_blocks(lun_dir_shares_blocks_);
    return Status::Ok();
  });
}

}  // namespace iscsigw::service
