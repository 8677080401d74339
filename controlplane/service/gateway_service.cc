#include "controlplane/service/gateway_service.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <set>
#include <thread>

#include "base/log.h"
#include "base/log_format.h"
#include "controlplane/service/lookup.h"
#include "controlplane/service/status_map.h"
#include "controlplane/state/lun_files.h"
#include "controlplane/state/state_file.h"
#include "controlplane/state/text_check.h"

namespace iscsigw::service {

namespace {

constexpr size_t kMaxRememberedRequests = 1024;
constexpr size_t kMaxRememberedBytes = 16 << 20;
constexpr size_t kMaxRequestIdBytes = 128;
constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;
// A page of ListTargets ends early past this many bytes (at least one target is always sent), so
// that a page of large targets still fits a client's default 4 MiB receive limit.
constexpr size_t kMaxPageBytes = 3 << 20;

uint64_t RandomU64() {
  uint64_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof(v)) != 1) {
    v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return v;
}

std::string Sha256(const std::string& data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return std::string(reinterpret_cast<const char*>(md), sizeof(md));
}

std::string YesNo(bool b) { return b ? "Yes" : "No"; }

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

v1::ChapConfig Redacted(const v1::ChapConfig& chap) {
  v1::ChapConfig out;
  out.set_user(chap.user());
  out.set_mutual_user(chap.mutual_user());
  out.set_secret_set(!chap.secret().empty());
  out.set_mutual_secret_set(!chap.mutual_secret().empty());
  return out;
}

v1::Target Redacted(const v1::Target& target) {
  v1::Target out = target;
  *out.mutable_chap() = Redacted(target.chap());
  if (out.chap().user().empty()) out.clear_chap();
  return out;
}

GatewayServiceImpl::GatewayServiceImpl(state::StateStore* store, api::Dataplane* dataplane,
                                       ServiceOptions options)
    : store_(store),
      dataplane_(dataplane),
      options_(std::move(options)),
      lun_dir_shares_blocks_(!options_.lun_dir.empty() && state::SharesBlocks(options_.lun_dir)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

GatewayServiceImpl::~GatewayServiceImpl() { Stop(); }

void GatewayServiceImpl::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void GatewayServiceImpl::WorkerLoop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

namespace {

// "<rpc> from <peer>" for log lines: who asked for a change.
std::string CallName(grpc::CallbackServerContext* ctx, const char* rpc) {
  std::string peer = ctx->peer();
  return std::string(rpc) + " from " + (peer.empty() ? "(in-process)" : peer);
}

Status Guarded(const std::function<Status()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Internal(std::string("internal error: ") + e.what());
  } catch (...) {
    return Internal("internal error");
  }
}

}  // namespace

GatewayServiceImpl::Reactor* GatewayServiceImpl::Inline(Ctx* ctx,
                                                        const google::protobuf::Message& req,
                                                        const std::function<Status()>& fn) {
  Reactor* r = ctx->DefaultReactor();
  Status checked = state::CheckTextFields(req);
  r->Finish(ToGrpcStatus(checked.ok() ? Guarded(fn) : checked));
  return r;
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::Serialized(Ctx* ctx, const char* rpc,
                                                            const google::protobuf::Message& req,
                                                            std::function<Status()> fn) {
  Reactor* r = ctx->DefaultReactor();
  std::string call = CallName(ctx, rpc);
  // Names with control characters never reach the worker, the state or a log line.
  if (Status checked = state::CheckTextFields(req); !checked.ok()) {
    log::Ctl().info("{}: refused: {}", call, state::EscapeText(checked.ToString()));
    r->Finish(ToGrpcStatus(checked));
    return r;
  }
  const size_t bytes = req.ByteSizeLong();
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the gateway is shutting down"));
      return r;
    }
    // Each queued change holds its request: the queue is bounded in calls and in bytes, and a
    // client that outruns the worker is told to back off instead of growing the process.
    if (queue_.size() >= options_.max_queued_changes ||
        queued_bytes_ + bytes > options_.max_queued_bytes) {
      r->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             std::to_string(queue_.size()) + " changes (" +
                                 std::to_string(queued_bytes_) +
                                 " bytes) are already queued; retry later"));
      return r;
    }
    queued_bytes_ += bytes;
    queue_.push_back([this, r, bytes, call = std::move(call), fn = std::move(fn)] {
      call_ = call;
      const Status s = Guarded(fn);
      if (!s.ok()) log::Ctl().info("{}: refused: {}", call_, state::EscapeText(s.ToString()));
      call_.clear();
      {
        std::lock_guard held(mu_);  // on the worker, later: not the lock above
        queued_bytes_ -= bytes;
      }
      r->Finish(ToGrpcStatus(s));
    });
  }
  cv_.notify_one();
  return r;
}

bool GatewayServiceImpl::Replay(const std::string& request_id, const std::string& request,
                                google::protobuf::Message* response, Status* status) {
  if (request_id.empty()) return false;
  if (request_id.size() > kMaxRequestIdBytes) {
    *status = InvalidArgument("request_id is longer than " + std::to_string(kMaxRequestIdBytes) +
                              " bytes");
    return true;
  }
  auto it = request_ids_.find(request_id);
  if (it == request_ids_.end()) return false;
  if (it->second.request_sha256 != Sha256(request)) {
    *status = InvalidArgument("request_id " + request_id + " was used for a different request");
    return true;
  }
  response->ParseFromString(it->second.response);
  *status = Status::Ok();
  return true;
}

void GatewayServiceImpl::Remember(const std::string& request_id, const std::string& request,
                                  const google::protobuf::Message& response) {
  if (request_id.empty()) return;
  // Only a digest of the request is kept, and the responses kept are bounded in bytes: a
  // request may be megabytes (a target with thousands of ACL entries).
  Remembered entry{Sha256(request), response.SerializeAsString()};
  const size_t cost = request_id.size() + entry.response.size();
  if (cost > kMaxRememberedBytes) return;
  while (!request_id_order_.empty() && (request_ids_.size() >= kMaxRememberedRequests ||
                                        remembered_bytes_ + cost > kMaxRememberedBytes)) {
    auto old = request_ids_.find(request_id_order_.front());
    if (old != request_ids_.end()) {
      remembered_bytes_ -= old->first.size() + old->second.response.size();
      request_ids_.erase(old);
    }
    request_id_order_.pop_front();
  }
  remembered_bytes_ += cost;
  request_ids_[request_id] = std::move(entry);
  request_id_order_.push_back(request_id);
}

// ----------------------------------------------------------------------------------------------
// Targets

Status GatewayServiceImpl::DoCreateTarget(const v1::CreateTargetRequest& req, v1::Target* resp) {
  v1::CreateTargetRequest key = req;
  key.clear_request_id();
  const std::string fingerprint = key.SerializeAsString();
  Status replayed;
  if (Replay(req.request_id(), fingerprint, resp, &replayed)) return replayed;

  v1::Target t = req.target();
  if (t.name().empty()) return InvalidArgument("target.name is empty");
  t.set_name(state::QualifyTargetName(t.name()));
  if (Status s = api::ValidateIscsiName(t.name()); !s.ok()) {
    return InvalidArgument("target " + t.name() + ": " + s.message());
  }
  if (t.luns_size() > 0) {
    return InvalidArgument("target " + t.name() + ": luns are added with CreateLun");
  }
  // Checked on the current snapshot first (changes run one at a time on this thread, so it is
  // still current): refusing a flood of duplicates or of creates past the limit costs a lookup,
  // not a copy of every target. Update checks again.
  {
    const auto snap = store_->Snapshot();
    if (FindTarget(*snap, t.name()) != nullptr) {
      return AlreadyExists("target " + t.name() + " already exists");
    }
    if (Status room = state::RoomForTarget(*snap, store_->limits()); !room.ok()) return room;
    if (static_cast<uint32_t>(t.acl_size() + t.initiators_size()) >
        store_->limits().max_acl_entries_per_target) {
      return Status(
          StatusCode::kResourceExhausted,
          "acl of " + t.name() + ": " + std::to_string(t.acl_size() + t.initiators_size()) +
              " entries; the limit per target is " +
              std::to_string(store_->limits().max_acl_entries_per_target) + " (--max-acl-entries)");
    }
  }
  Status s = store_->Update([&](v1::State* st) {
    if (FindTarget(st, t.name()) != nullptr) {
      return AlreadyExists("target " + t.name() + " already exists");
    }
    *st->add_targets() = t;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  const auto snap = store_->Snapshot();
  const v1::State& st = *snap;
  *resp = Redacted(*FindTarget(st, t.name()));
  Remember(req.request_id(), fingerprint, *resp);
  log::Ctl().info("{}: target {} created ({}{} ACL entr{}{})", call_, t.name(),
                  t.allow_any_initiator() ? "open to any initiator, " : "", t.acl_size(),
                  t.acl_size() == 1 ? "y" : "ies", t.chap().user().empty() ? "" : ", CHAP");
  return Status::Ok();
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::CreateTarget(Ctx* ctx,
                                                              const v1::CreateTargetRequest* req,
                                                              v1::Target* resp) {
  return Serialized(ctx, "CreateTarget", *req,
                    [this, req, resp] { return DoCreateTarget(*req, resp); });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::GetTarget(Ctx* ctx,
                                                           const v1::GetTargetRequest* req,
                                                           v1::Target* resp) {
  return Inline(ctx, *req, [&] {
    const auto snap = store_->Snapshot();
    const v1::State& st = *snap;
    const v1::Target* t = FindTarget(st, req->name());
    if (t == nullptr) return TargetNotFound(req->name());
    *resp = Redacted(*t);
    for (auto& l : *resp->mutable_luns()) (void)LunView(t->name(), v1::Lun(l), &l);
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::ListTargets(Ctx* ctx,
                                                             const v1::ListTargetsRequest* req,
                                                             v1::ListTargetsResponse* resp) {
  return Inline(ctx, *req, [&] {
    if (req->page_size() < 0) {
      return InvalidArgument("page_size " + std::to_string(req->page_size()) + " is negative");
    }
    const int size =
        req->page_size() == 0 ? kDefaultPageSize : std::min(req->page_size(), kMaxPageSize);
    const auto snap = store_->Snapshot();
    const v1::State& st = *snap;
    std::vector<const v1::Target*> sorted;
    for (const auto& t : st.targets()) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
    // The page token is the name of the last target of the previous page.
    auto it = sorted.begin();
    if (!req->page_token().empty()) {
      it = std::upper_bound(sorted.begin(), sorted.end(), req->page_token(),
                            [](const std::string& tok, auto* t) { return tok < t->name(); });
    }
    size_t bytes = 0;
    for (; it != sorted.end() && resp->targets_size() < size; ++it) {
      v1::Target t = Redacted(**it);
      const size_t n = t.ByteSizeLong();
      if (resp->targets_size() > 0 && bytes + n > kMaxPageBytes) break;
      bytes += n;
      *resp->add_targets() = std::move(t);
    }
    if (it != sorted.end()) resp->set_next_page_token(resp->targets().rbegin()->name());
    return Status::Ok();
  });
}

Status GatewayServiceImpl::DoDeleteTarget(const v1::DeleteTargetRequest& req,
                                          v1::DeleteTargetResponse* resp) {
  const std::string name = state::QualifyTargetName(req.name());
  if (FindTarget(*store_->Snapshot(), name) == nullptr) return TargetNotFound(req.name());
  auto sessions_of = [&] {
    std::vector<uint16_t> out;
    if (dataplane_ == nullptr) return out;
    for (const auto& s : dataplane_->ListSessions()) {
      if (!s.discovery && s.target_name == name) out.push_back(s.tsih);
    }
    return out;
  };
  if (store_->IsShared(name) && !req.force()) {
    return FailedPrecondition("target " + name +
                              " is shared by the gateways (--shared-config), and its sessions on "
                              "the others cannot be counted here: delete it with force (every "
                              "gateway asks its initiators to log out first)");
  }
  auto live = sessions_of();
  if (!live.empty() && !req.force()) {
    return FailedPrecondition("target " + name + " has " + std::to_string(live.size()) +
                              " session(s); log them out or delete with force");
  }
  if (!live.empty()) {
    // RFC 7143 11.9.1: ask each initiator to log out, give them a moment, then drop the rest.
    const auto wait = std::chrono::duration_cast<std::chrono::seconds>(options_.force_logout_wait);
    for (uint16_t tsih : live) {
      dataplane_->RequestLogout(tsih, std::max(std::chrono::seconds(1), wait));
    }
    const auto deadline = std::chrono::steady_clock::now() + options_.force_logout_wait;
    while (!sessions_of().empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (uint16_t tsih : sessions_of()) dataplane_->DropSession(tsih);
    resp->set_sessions_terminated(static_cast<uint32_t>(live.size()));
  }
  std::vector<v1::Lun> gone;
  Status s = store_->Update([&](v1::State* st) {
    // Again here, on the state being edited: a target of this gateway may have moved into the
    // shared configuration since.
    if (store_->IsShared(name) && !req.force()) {
      return FailedPrecondition("target " + name +
                                " is shared by the gateways (--shared-config): delete it with "
                                "force");
    }
    auto* targets = st->mutable_targets();
    for (int i = 0; i < targets->size(); ++i) {
      if (targets->Get(i).name() == name) {
        gone.assign(targets->Get(i).luns().begin(), targets->Get(i).luns().end());
        targets->DeleteSubrange(i, 1);
        return Status::Ok();
      }
    }
    return TargetNotFound(name);
  });
  if (!s.ok()) return s;
  log::Ctl().info("{}: target {} deleted ({} session(s) terminated)", call_, name,
                  resp->sessions_terminated());
  if (req.keep_backing()) return Status::Ok();
  uint32_t removed = 0;
  s = RemoveCreatedBacking(gone, &removed);
  resp->set_backing_files_removed(removed);
  return s;
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::DeleteTarget(Ctx* ctx,
                                                              const v1::DeleteTargetRequest* req,
                                                              v1::DeleteTargetResponse* resp) {
  return Serialized(ctx, "DeleteTarget", *req,
                    [this, req, resp] { return DoDeleteTarget(*req, resp); });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::SetAllowAnyInitiator(
    Ctx* ctx, const v1::SetAllowAnyInitiatorRequest* req, v1::Target* resp) {
  return Serialized(ctx, "SetAllowAnyInitiator", *req, [this, req, resp] {
    Status s = store_->Update([&](v1::State* st) {
      v1::Target* t = FindTarget(st, req->target());
      if (t == nullptr) return TargetNotFound(req->target());
      t->set_allow_any_initiator(req->allow_any_initiator());
      return Status::Ok();
    });
    if (!s.ok()) return s;
    *resp = Redacted(*FindTarget(*store_->Snapshot(), req->target()));
    log::Ctl().info(
        "{}: target {}: allow_any_initiator {}", call_, resp->name(),
        req->allow_any_initiator() ? "on (any initiator may log in)" : "off (only the ACL)");
    return Status::Ok();
  });
}

// ----------------------------------------------------------------------------------------------
// LUNs

Status GatewayServiceImpl::LunView(const std::string& target, const v1::Lun& lun,
                                   v1::Lun* out) const {
  *out = lun;
  if (dataplane_ != nullptr) {
    if (auto now = dataplane_->LunStatusOf(state::QualifyTargetName(target), lun.id())) {
      out->set_size_bytes(now->size_bytes);
      out->set_offline_reason(now->offline_reason);
      out->set_access_state(now->optimized ? "active/optimized" : "active/non-optimized");
    }
  }
  return Status::Ok();
}

Status GatewayServiceImpl::DoCreateLun(const v1::CreateLunRequest& req, v1::Lun* resp) {
  v1::CreateLunRequest key = req;
  key.clear_request_id();
  const std::string fingerprint = key.SerializeAsString();
  Status replayed;
  if (Replay(req.request_id(), fingerprint, resp, &replayed)) return replayed;

  v1::Lun lun = req.lun();
  lun.clear_offline_reason();  // OUTPUT_ONLY
  lun.clear_access_state();
  const std::string who = LunName(lun.id(), req.target());
  if (lun.id() > 255) {
    return InvalidArgument(who + ": id " + std::to_string(lun.id()) + " is out of range 0..255");
  }
  if (lun.backing_case() == v1::Lun::BACKING_NOT_SET) {
    return InvalidArgument(who + ": backing is not set (ram, null, file or rbd)");
  }
  if (lun.block_size() == 0) lun.set_block_size(512);
  // Identity is fixed at creation and persisted, so it survives restarts and a re-created LUN
  // never reuses the identity an initiator may have cached.
  if (lun.serial().empty()) {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(RandomU64()));
    lun.set_serial(buf);
  }
  if (lun.device_id() == 0) {
    // NAA 6 (IEEE Registered Extended), locally administered identifier bits.
    lun.set_device_id((uint64_t{6} << 60) | (RandomU64() & 0x0fffffffffffffffull));
  }
  {
    const auto snap = store_->Snapshot();
    const v1::Target* t = FindTarget(*snap, req.target());
    if (t == nullptr) return TargetNotFound(req.target());
    if (FindLun(const_cast<v1::Target*>(t), lun.id()) != nullptr) {
      return AlreadyExists(who + " already exists");
    }
    if (Status room = state::RoomForLun(*t, store_->limits()); !room.ok()) return room;
  }
  if (Status p = PrepareFileLun(req, who, &lun); !p.ok()) return p;
  if (Status p = PrepareRbdLun(req.target(), who, &lun); !p.ok()) return p;
  Status s = store_->Update([&](v1::State* st) {
    v1::Target* t = FindTarget(st, req.target());
    if (t == nullptr) return TargetNotFound(req.target());
    if (FindLun(t, lun.id()) != nullptr) return AlreadyExists(who + " already exists");
    *t->add_luns() = lun;
    return Status::Ok();
  });
  if (!s.ok()) {
    // A file that was not there before this call (a copy, or one the data plane created while
    // the change was tried) goes again.
    if (lun.has_file() && lun.file().created())
      (void)state::RemoveLunFile(*options_.backing.paths, lun.file().path());
    if (lun.has_rbd() && lun.rbd().created()) {
      // The data plane may have opened it while the change was tried; that store is closing.
      if (Status r = api::RemoveRbdImage(state::ToRbdSpec(lun.rbd()), kRbdCloseWait); !r.ok()) {
        log::Ctl().error("{}: {}: the image it made is left: {}", call_, who, r.message());
      }
    }
    return s;
  }
  (void)LunView(req.target(), lun, resp);
  Remember(req.request_id(), fingerprint, *resp);
  log::Ctl().info("{}: {} created: {} store, {} bytes, block size {}{}", call_, who,
                  lun.has_file()   ? "file " + lun.file().path()
                  : lun.has_rbd()  ? "rbd " + lun.rbd().pool() + "/" + lun.rbd().image()
                  : lun.has_null() ? "null"
                                   : "ram",
                  lun.size_bytes(), lun.block_size(), lun.read_only() ? ", read-only" : "");
  return Status::Ok();
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::CreateLun(Ctx* ctx,
                                                           const v1::CreateLunRequest* req,
                                                           v1::Lun* resp) {
  return Serialized(ctx, "CreateLun", *req, [this, req, resp] { return DoCreateLun(*req, resp); });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::GetLun(Ctx* ctx, const v1::GetLunRequest* req,
                                                        v1::Lun* resp) {
  return Inline(ctx, *req, [&] {
    const auto snap = store_->Snapshot();
    const v1::Target* t = FindTarget(*snap, req->target());
    if (t == nullptr) return TargetNotFound(req->target());
    const v1::Lun* l = FindLun(const_cast<v1::Target*>(t), req->id());
    if (l == nullptr) return NotFound(LunName(req->id(), req->target()) + " not found");
    return LunView(req->target(), *l, resp);
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::ListLuns(Ctx* ctx, const v1::ListLunsRequest* req,
                                                          v1::ListLunsResponse* resp) {
  return Inline(ctx, *req, [&] {
    const auto snap = store_->Snapshot();
    const v1::State& st = *snap;
    const v1::Target* t = FindTarget(st, req->target());
    if (t == nullptr) return TargetNotFound(req->target());
    std::vector<const v1::Lun*> luns;
    for (const auto& l : t->luns()) luns.push_back(&l);
    std::sort(luns.begin(), luns.end(), [](auto* a, auto* b) { return a->id() < b->id(); });
    for (const auto* l : luns) (void)LunView(t->name(), *l, resp->add_luns());
    return Status::Ok();
  });
}

Status GatewayServiceImpl::DoResizeLun(const v1::ResizeLunRequest& req, v1::Lun* resp) {
  const std::string who = LunName(req.id(), req.target());
  v1::Lun result;
  Status s = store_->Update([&](v1::State* st) {
    v1::Target* t = FindTarget(st, req.target());
    if (t == nullptr) return TargetNotFound(req.target());
    v1::Lun* l = FindLun(t, req.id());
    if (l == nullptr) return NotFound(who + " not found");
    uint64_t current = l->size_bytes();
    if (dataplane_ != nullptr) {
      if (auto now = dataplane_->LunStatusOf(t->name(), l->id())) current = now->size_bytes;
    }
    if (req.size_bytes() < current) {
      return FailedPrecondition(who + ": size_bytes " + std::to_string(req.size_bytes()) +
                                " is smaller than the current " + std::to_string(current) +
                                "; shrinking is not supported");
    }
    const uint32_t bs = l->block_size() ? l->block_size() : 512;
    if (req.size_bytes() % bs != 0) {
      return InvalidArgument(who + ": size_bytes " + std::to_string(req.size_bytes()) +
                             " is not a multiple of block_size " + std::to_string(bs));
    }
    // A file LUN sized by its file (0) is first pinned to the size it has now, so that the data
    // plane sees a grow rather than a new LUN.
    l->set_size_bytes(req.size_bytes());
    result = *l;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  log::Ctl().info("{}: {} resized to {} bytes", call_, who, req.size_bytes());
  return LunView(req.target(), result, resp);
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::ResizeLun(Ctx* ctx,
                                                           const v1::ResizeLunRequest* req,
                                                           v1::Lun* resp) {
  return Serialized(ctx, "ResizeLun", *req, [this, req, resp] { return DoResizeLun(*req, resp); });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::DeleteLun(Ctx* ctx,
                                                           const v1::DeleteLunRequest* req,
                                                           v1::DeleteLunResponse* resp) {
  return Serialized(ctx, "DeleteLun", *req, [this, req, resp] {
    const std::string who = LunName(req->id(), req->target());
    std::vector<v1::Lun> gone;
    Status s = store_->Update([&](v1::State* st) {
      v1::Target* t = FindTarget(st, req->target());
      if (t == nullptr) return TargetNotFound(req->target());
      auto* luns = t->mutable_luns();
      for (int i = 0; i < luns->size(); ++i) {
        if (luns->Get(i).id() == req->id()) {
          gone.push_back(luns->Get(i));
          luns->DeleteSubrange(i, 1);
          return Status::Ok();
        }
      }
      return NotFound(who + " not found");
    });
    if (!s.ok()) return s;
    log::Ctl().info("{}: {} deleted", call_, who);
    // The LUN is out of the state first: a crash in between leaves an orphan file, never a LUN
    // whose file is gone. The data plane may still hold the file open for commands in flight;
    // they finish on the unlinked inode.
    if (req->keep_backing()) return Status::Ok();
    uint32_t removed = 0;
    s = RemoveCreatedBacking(gone, &removed);
    resp->set_backing_removed(removed > 0);
    return s;
  });
}

// ----------------------------------------------------------------------------------------------
// Access: ACL and CHAP

GatewayServiceImpl::Reactor* GatewayServiceImpl::AddAclEntry(Ctx* ctx,
                                                             const v1::AddAclEntryRequest* req,
                                                             v1::AclEntry* resp) {
  return Serialized(ctx, "AddAclEntry", *req, [this, req, resp] {
    const std::string target = state::QualifyTargetName(req->target());
    api::AclEntrySpec spec{req->entry().initiator(),
                           {req->entry().sources().begin(), req->entry().sources().end()}};
    if (spec.initiator.empty()) return InvalidArgument("acl of " + target + ": initiator is empty");
    {
      const auto snap = store_->Snapshot();
      const v1::Target* t = FindTarget(*snap, req->target());
      if (t == nullptr) return TargetNotFound(req->target());
      if (Status v = api::ValidateAclEntry(target, spec); !v.ok()) return v;
      for (const auto& e : t->acl()) {
        if (e.initiator() == spec.initiator) {
          return AlreadyExists("acl entry " + spec.initiator + " of " + target + " already exists");
        }
      }
      if (Status room = state::RoomForAclEntry(*t, store_->limits()); !room.ok()) return room;
    }
    Status s = store_->Update([&](v1::State* st) {
      v1::Target* t = FindTarget(st, req->target());
      if (t == nullptr) return TargetNotFound(req->target());
      if (Status v = api::ValidateAclEntry(target, spec); !v.ok()) return v;
      for (const auto& e : t->acl()) {
        if (e.initiator() == spec.initiator) {
          return AlreadyExists("acl entry " + spec.initiator + " of " + target + " already exists");
        }
      }
      *t->add_acl() = req->entry();
      return Status::Ok();
    });
    if (!s.ok()) return s;
    *resp = req->entry();
    log::Ctl().info("{}: acl of {}: {} added{}{}", call_, target, spec.initiator,
                    spec.sources.empty() ? "" : " from ", Join(spec.sources));
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::ListAclEntries(
    Ctx* ctx, const v1::ListAclEntriesRequest* req, v1::ListAclEntriesResponse* resp) {
  return Inline(ctx, *req, [&] {
    const auto snap = store_->Snapshot();
    const v1::State& st = *snap;
    const v1::Target* t = FindTarget(st, req->target());
    if (t == nullptr) return TargetNotFound(req->target());
    resp->set_allow_any_initiator(t->allow_any_initiator());
    for (const auto& e : t->acl()) *resp->add_entries() = e;
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::RemoveAclEntry(
    Ctx* ctx, const v1::RemoveAclEntryRequest* req, v1::RemoveAclEntryResponse* resp) {
  return Serialized(ctx, "RemoveAclEntry", *req, [this, req, resp] {
    const std::string target = state::QualifyTargetName(req->target());
    Status s = store_->Update([&](v1::State* st) {
      v1::Target* t = FindTarget(st, req->target());
      if (t == nullptr) return TargetNotFound(req->target());
      auto* acl = t->mutable_acl();
      for (int i = 0; i < acl->size(); ++i) {
        if (acl->Get(i).initiator() == req->initiator()) {
          acl->DeleteSubrange(i, 1);
          return Status::Ok();
        }
      }
      return NotFound("acl entry " + req->initiator() + " of " + target + " not found");
    });
    if (!s.ok()) return s;
    if (req->drop_sessions() && dataplane_ != nullptr) {
      resp->set_sessions_dropped(static_cast<uint32_t>(
          dataplane_->DropSessions(target, req->initiator(), /*only_disallowed=*/true)));
    }
    log::Ctl().info("{}: acl of {}: {} removed, {} session(s) dropped", call_, target,
                    req->initiator(), resp->sessions_dropped());
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::SetChap(Ctx* ctx, const v1::SetChapRequest* req,
                                                         v1::ChapConfig* resp) {
  return Serialized(ctx, "SetChap", *req, [this, req, resp] {
    const std::string who = req->target().empty()
                                ? "discovery: "
                                : "target " + state::QualifyTargetName(req->target()) + ": ";
    v1::ChapConfig chap = req->chap();
    chap.clear_secret_set();
    chap.clear_mutual_secret_set();
    if (chap.user().empty()) return InvalidArgument(who + "chap.user is empty");
    if (Status v = api::ValidateChapCredentials(state::ToChap(chap), who); !v.ok()) return v;
    Status s = store_->Update([&](v1::State* st) {
      if (req->target().empty()) {
        *st->mutable_discovery_chap() = chap;
        return Status::Ok();
      }
      v1::Target* t = FindTarget(st, req->target());
      if (t == nullptr) return TargetNotFound(req->target());
      *t->mutable_chap() = chap;
      return Status::Ok();
    });
    if (!s.ok()) return s;
    *resp = Redacted(chap);
    log::Ctl().info("{}: {}CHAP set for user {}{}", call_, who, chap.user(),
                    chap.mutual_user().empty() ? "" : " (mutual)");
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::ClearChap(Ctx* ctx,
                                                           const v1::ClearChapRequest* req,
                                                           v1::ChapConfig* resp) {
  return Serialized(ctx, "ClearChap", *req, [this, req, resp] {
    Status s = store_->Update([&](v1::State* st) {
      if (req->target().empty()) {
        st->clear_discovery_chap();
        return Status::Ok();
      }
      v1::Target* t = FindTarget(st, req->target());
      if (t == nullptr) return TargetNotFound(req->target());
      t->clear_chap();
      return Status::Ok();
    });
    if (!s.ok()) return s;
    resp->Clear();
    log::Ctl().info(
        "{}: {}: CHAP cleared", call_,
        req->target().empty() ? "discovery" : "target " + state::QualifyTargetName(req->target()));
    return Status::Ok();
  });
}

// ----------------------------------------------------------------------------------------------
// Sessions and the gateway

GatewayServiceImpl::Reactor* GatewayServiceImpl::ListSessions(Ctx* ctx,
                                                              const v1::ListSessionsRequest* req,
                                                              v1::ListSessionsResponse* resp) {
  return Inline(ctx, *req, [&] {
    if (dataplane_ == nullptr) return Status::Ok();
    const std::string target =
        req->target().empty() ? std::string() : state::QualifyTargetName(req->target());
    auto sessions = dataplane_->ListSessions();
    std::sort(sessions.begin(), sessions.end(),
              [](const auto& a, const auto& b) { return a.tsih < b.tsih; });
    for (const auto& s : sessions) {
      if (!target.empty() && s.target_name != target) continue;
      v1::Session* out = resp->add_sessions();
      out->set_tsih(s.tsih);
      out->set_target(s.target_name);
      out->set_initiator_name(s.initiator_name);
      out->set_isid(s.isid);
      out->set_discovery(s.discovery);
      out->set_reactor(s.reactor);
      auto* c = out->add_connections();
      c->set_cid(0);
      c->set_peer(s.peer);
      auto& p = *out->mutable_parameters();
      const auto& n = s.params;
      p["HeaderDigest"] = n.header_digest ? "CRC32C" : "None";
      p["DataDigest"] = n.data_digest ? "CRC32C" : "None";
      p["MaxConnections"] = std::to_string(n.max_connections);
      p["InitialR2T"] = YesNo(n.initial_r2t);
      p["ImmediateData"] = YesNo(n.immediate_data);
      p["MaxRecvDataSegmentLength"] = std::to_string(n.target_max_recv_data_segment_length);
      p["InitiatorMaxRecvDataSegmentLength"] =
          std::to_string(n.initiator_max_recv_data_segment_length);
      p["MaxBurstLength"] = std::to_string(n.max_burst_length);
      p["FirstBurstLength"] = std::to_string(n.first_burst_length);
      p["DefaultTime2Wait"] = std::to_string(n.default_time2wait);
      p["DefaultTime2Retain"] = std::to_string(n.default_time2retain);
      p["MaxOutstandingR2T"] = std::to_string(n.max_outstanding_r2t);
      p["DataPDUInOrder"] = YesNo(n.data_pdu_in_order);
      p["DataSequenceInOrder"] = YesNo(n.data_sequence_in_order);
      p["ErrorRecoveryLevel"] = std::to_string(n.error_recovery_level);
      if (!n.initiator_alias.empty()) p["InitiatorAlias"] = n.initiator_alias;
    }
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::TerminateSession(
    Ctx* ctx, const v1::TerminateSessionRequest* req, v1::TerminateSessionResponse*) {
  return Inline(ctx, *req, [&] {
    if (req->tsih() == 0 || req->tsih() > 0xffff) {
      return InvalidArgument("session tsih " + std::to_string(req->tsih()) +
                             " is out of range 1..65535");
    }
    const auto within = std::chrono::seconds(
        req->logout_timeout_seconds() == 0 ? 2 : std::min(req->logout_timeout_seconds(), 3600u));
    if (dataplane_ == nullptr ||
        !dataplane_->RequestLogout(static_cast<uint16_t>(req->tsih()), within)) {
      return NotFound("session " + std::to_string(req->tsih()) + " not found");
    }
    log::Ctl().info("{}: session {}: logout requested, dropped in {} s unless it logs out",
                    CallName(ctx, "TerminateSession"), req->tsih(), within.count());
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::GetGatewayInfo(
    Ctx* ctx, const v1::GetGatewayInfoRequest* req, v1::GatewayInfo* resp) {
  return Inline(ctx, *req, [&] {
    resp->set_version(options_.version);
    resp->set_uptime_seconds(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::steady_clock::now() - options_.started)
                                  .count()));
    resp->set_state_dir(store_->dir());
    const Status health = store_->health();
    resp->set_state_dir_healthy(health.ok());
    if (!health.ok()) resp->set_state_dir_error(health.message());
    resp->set_targets(static_cast<uint32_t>(store_->Snapshot()->targets_size()));
    resp->set_lun_dir(options_.lun_dir);
    if (dataplane_ != nullptr) {
      for (const auto& p : dataplane_->portals()) resp->add_portals(p);
      for (const auto& a : dataplane_->advertised()) resp->add_advertised(a);
      resp->set_reactors(dataplane_->reactors());
      resp->set_sessions(static_cast<uint32_t>(dataplane_->ListSessions().size()));
      resp->set_connections(static_cast<uint32_t>(dataplane_->connections()));
    }
    return Status::Ok();
  });
}

// ----------------------------------------------------------------------------------------------
// Log levels

namespace {

std::string LoggerNames() {
  std::string out;
  for (auto n : log::kLoggerNames) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

Status CheckLogger(const std::string& logger) {
  if (logger.empty() || log::GetLevel(logger)) return Status::Ok();
  return InvalidArgument("logger " + logger + " is unknown (" + LoggerNames() + ")");
}

// The level of `logger`, or of every logger when it is empty.
void FillLevels(const std::string& logger, v1::LogLevels* out) {
  out->Clear();
  for (auto name : log::kLoggerNames) {
    if (!logger.empty() && name != logger) continue;
    auto* l = out->add_loggers();
    l->set_logger(std::string(name));
    l->set_level(std::string(log::LevelName(*log::GetLevel(name))));
  }
}

}  // namespace

GatewayServiceImpl::Reactor* GatewayServiceImpl::GetLogLevel(Ctx* ctx,
                                                             const v1::GetLogLevelRequest* req,
                                                             v1::LogLevels* resp) {
  return Inline(ctx, *req, [&] {
    if (Status s = CheckLogger(req->logger()); !s.ok()) return s;
    FillLevels(req->logger(), resp);
    return Status::Ok();
  });
}

GatewayServiceImpl::Reactor* GatewayServiceImpl::SetLogLevel(Ctx* ctx,
                                                             const v1::SetLogLevelRequest* req,
                                                             v1::LogLevels* resp) {
  // Levels are atomics inside the loggers: set from this gRPC thread, seen by every reactor at
  // its next line. Nothing to persist, so no need for the worker.
  return Inline(ctx, *req, [&] {
    if (Status s = CheckLogger(req->logger()); !s.ok()) return s;
    const auto level = log::ParseLevel(req->level());
    if (!level) {
      return InvalidArgument((req->level().empty() ? std::string("level is empty")
                                                   : "level " + req->level() + " is unknown") +
                             " (" + std::string(log::LevelNames()) + ")");
    }
    v1::LogLevels before;
    FillLevels(req->logger(), &before);
    auto& ctl = log::Ctl();
    // Said before the change when the change may silence ctl, after it when it may enable it.
    const bool said = ctl.should_log(spdlog::level::info);
    auto say = [&] {
      std::string was;
      for (const auto& l : before.loggers()) {
        was += (was.empty() ? "" : ", ") + l.logger() + " " + l.level();
      }
      ctl.info("{}: log level of {} set to {} (was {})", CallName(ctx, "SetLogLevel"),
               req->logger().empty() ? "all loggers" : "logger " + req->logger(), req->level(),
               was);
    };
    if (said) say();
    if (req->logger().empty()) {
      log::SetLevel(*level);
    } else {
      (void)log::SetLevel(req->logger(), *level);
    }
    if (!said) say();
    FillLevels(req->logger(), resp);
    return Status::Ok();
  });
}

}  // namespace iscsigw::service
