#include "csi/controller_service.h"

#include <google/protobuf/util/time_util.h>
#include <grpcpp/client_context.h>

#include <algorithm>
#include <exception>
#include <limits>

#include "base/log.h"
#include "csi/volume_model.h"
#include "rpc/grpc_util.h"

namespace iscsigw::csi {
namespace {

namespace gw = iscsigw::v1;
using ::csi::v1::ControllerServiceCapability;
using ::csi::v1::VolumeContentSource;
using Stub = gw::GatewayService::Stub;
using GrpcCode = grpc::StatusCode;

// Gateway pages are read at their largest: a listing needs every target to filter and sort.
constexpr int kGatewayPage = 1000;

grpc::Status Invalid(const std::string& msg) { return {GrpcCode::INVALID_ARGUMENT, msg}; }

// A gateway error as the CSI error of the call that made it (CSI spec, the error tables of each
// RPC): the codes the gateway shares with CSI pass through (INVALID_ARGUMENT, NOT_FOUND,
// ALREADY_EXISTS, OUT_OF_RANGE, RESOURCE_EXHAUSTED (a limit, or no space: ENOSPC),
// FAILED_PRECONDITION); a gateway that cannot be reached is UNAVAILABLE, which the sidecars
// retry; anything else is INTERNAL. The message says which gateway call failed.
grpc::Status FromGateway(const std::string& what, const grpc::Status& s) {
  if (s.ok()) return s;
  const std::string msg = "gateway " + what + ": " + s.error_message();
  switch (s.error_code()) {
    case GrpcCode::INVALID_ARGUMENT:
    case GrpcCode::NOT_FOUND:
    case GrpcCode::ALREADY_EXISTS:
    case GrpcCode::OUT_OF_RANGE:
    case GrpcCode::RESOURCE_EXHAUSTED:
    case GrpcCode::FAILED_PRECONDITION:
    case GrpcCode::DEADLINE_EXCEEDED:
      return {s.error_code(), msg};
    case GrpcCode::UNAVAILABLE:
    case GrpcCode::CANCELLED:
    case GrpcCode::UNAUTHENTICATED:
    case GrpcCode::PERMISSION_DENIED:
      return {GrpcCode::UNAVAILABLE, "cannot reach the " + msg};
    case GrpcCode::UNIMPLEMENTED:
      return {GrpcCode::FAILED_PRECONDITION, msg + " (a gateway older than this plugin?)"};
    default:
      return {GrpcCode::INTERNAL, msg};
  }
}

grpc::Status Guarded(const std::function<grpc::Status()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return {GrpcCode::INTERNAL, std::string("internal error: ") + e.what()};
  } catch (...) {
    return {GrpcCode::INTERNAL, "internal error"};
  }
}

bool IsVolume(const gw::Target& t) { return t.alias().starts_with(kVolumeAliasPrefix); }

// The node_id a publish made `e` for: its initiator, then '@' and its sources (NodeIdentity).
std::string NodeIdOf(const gw::AclEntry& e) {
  return NodeIdentity{e.initiator(), {e.sources().begin(), e.sources().end()}}.ToString();
}

// A gateway call whose outcome is not known: it may have been done, or may still be under way
// (a copy goes on past its caller's deadline), or may never have arrived.
bool Unsettled(const grpc::Status& s) {
  return s.error_code() == GrpcCode::DEADLINE_EXCEEDED || s.error_code() == GrpcCode::UNAVAILABLE ||
         s.error_code() == GrpcCode::CANCELLED;
}

// The answer to a CreateVolume whose gateway create is not settled: a code the CO retries on
// (CSI spec: ABORTED, an operation pending for the volume; UNAVAILABLE, the gateway not
// reachable), never a rollback of what may be, or become, the volume.
grpc::Status Pending(const std::string& what, const std::string& call, const grpc::Status& s) {
  const std::string msg = what + " (gateway " + call + ": " + s.error_message() + "); retry";
  if (s.error_code() == GrpcCode::UNAVAILABLE || s.error_code() == GrpcCode::CANCELLED) {
    return {GrpcCode::UNAVAILABLE, msg};
  }
  return {GrpcCode::ABORTED, msg};
}

// The target `t` found under volume_id is the volume this request makes: the same name from
// the same source (VolumeAlias). Else ALREADY_EXISTS: another volume, or not a volume at all.
grpc::Status CheckOwner(const gw::Target& t, const std::string& volume_id, const std::string& name,
                        const std::string& alias) {
  if (t.alias() == alias) return grpc::Status::OK;
  const std::string mine = std::string(kVolumeAliasPrefix) + name;
  if (t.alias() == mine || t.alias().starts_with(mine + " <")) {
    return {GrpcCode::ALREADY_EXISTS,
            "volume " + volume_id + " (" + name + ") exists as '" + t.alias() +
                "'; this request, with another content source or CHAP scheme, would make '" +
                alias + "'"};
  }
  return {GrpcCode::ALREADY_EXISTS, "volume_id " + volume_id + " is taken by target " + t.name() +
                                        " (alias '" + t.alias() + "'), which is not volume " +
                                        name};
}

// What nodes are told to log in to: --advertise, else the portals the gateway listens on.
const google::protobuf::RepeatedPtrField<std::string>& Portals(const gw::GatewayInfo& info) {
  return info.advertised().empty() ? info.portals() : info.advertised();
}

std::string PortalList(const gw::GatewayInfo& info) {
  std::string joined;
  for (const auto& p : Portals(info)) joined += (joined.empty() ? "" : ",") + p;
  return joined;
}

// A wildcard portal in a volume_context would send every node to log in to itself.
grpc::Status CheckPortals(const gw::GatewayInfo& info) {
  for (const auto& p : Portals(info)) {
    if (!IsUnspecifiedPortal(p)) continue;
    if (info.advertised().empty()) {
      return {GrpcCode::FAILED_PRECONDITION,
              "the gateway listens on " + p +
                  " and advertises nothing: start iscsigwd with --advertise"};
    }
    return {GrpcCode::FAILED_PRECONDITION,
            "the gateway advertises " + p +
                ", an unspecified address: give iscsigwd --advertise the address nodes reach"};
  }
  if (Portals(info).empty()) {
    return {GrpcCode::FAILED_PRECONDITION, "the gateway has no iSCSI portal to hand out"};
  }
  return grpc::Status::OK;
}

const gw::Lun* Lun0(const gw::Target& t) {
  for (const auto& l : t.luns()) {
    if (l.id() == 0) return &l;
  }
  return nullptr;
}

int64_t ToInt64(uint64_t v) {
  return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
}

void ToCsiSnapshot(const gw::Snapshot& s, ::csi::v1::Snapshot* out) {
  out->set_size_bytes(ToInt64(s.size_bytes()));
  out->set_snapshot_id(s.name());
  out->set_source_volume_id(VolumeIdOfTarget(s.source_target()).value_or(""));
  *out->mutable_creation_time() =
      google::protobuf::util::TimeUtil::SecondsToTimestamp(s.created_unix_seconds());
  // The gateway's snapshot is a finished copy by the time CreateSnapshot answers.
  out->set_ready_to_use(true);
}

// Page `ids` (sorted) after `token` with at most `max` entries (0: all); sets next_token.
template <typename T, typename IdOf>
grpc::Status Page(const std::vector<T>& sorted, IdOf id_of, const std::string& token, int32_t max,
                  std::vector<const T*>* page, std::string* next_token) {
  if (max < 0) return Invalid("max_entries " + std::to_string(max) + " is negative");
  auto it = sorted.begin();
  if (!token.empty()) {
    auto after = ParsePageToken(token);
    // CSI spec: ABORTED for a starting_token the plugin cannot use.
    if (!after) return {GrpcCode::ABORTED, "starting_token '" + token + "' is not one of ours"};
    it = std::upper_bound(sorted.begin(), sorted.end(), *after,
                          [&](const std::string& a, const T& v) { return a < id_of(v); });
  }
  for (; it != sorted.end() && (max == 0 || static_cast<int32_t>(page->size()) < max); ++it) {
    page->push_back(&*it);
  }
  if (it != sorted.end() && !page->empty()) *next_token = PageTokenAfter(id_of(*page->back()));
  return grpc::Status::OK;
}

}  // namespace

ControllerService::ControllerService(std::shared_ptr<grpc::Channel> gateway,
                                     ControllerOptions options)
    : options_(options), gateway_(gw::GatewayService::NewStub(std::move(gateway))) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

ControllerService::~ControllerService() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ControllerService::WorkerLoop() {
  for (;;) {
    std::function<void(bool)> job;
    bool run = true;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      run = !stopping_;
    }
    job(run);
  }
}

std::unique_ptr<grpc::ClientContext> ControllerService::GatewayCtx(
    std::chrono::milliseconds timeout) const {
  if (timeout == std::chrono::milliseconds::zero()) timeout = options_.gateway_timeout;
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::min(std::chrono::system_clock::now() + timeout, call_deadline_));
  return ctx;
}

ControllerService::Reactor* ControllerService::Queued(Ctx* ctx, const char* rpc,
                                                      std::function<grpc::Status()> fn) {
  Reactor* r = ctx->DefaultReactor();
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      r->Finish({GrpcCode::UNAVAILABLE, "the plugin is shutting down"});
      return r;
    }
    if (queue_.size() >= options_.max_queued_calls) {
      log::Ctl().warn("{}: refused: {} calls are already queued", rpc, queue_.size());
      r->Finish({GrpcCode::RESOURCE_EXHAUSTED,
                 std::to_string(queue_.size()) + " calls are already queued; retry later"});
      return r;
    }
    queue_.push_back([this, ctx, r, rpc, fn = std::move(fn)](bool run) {
      if (!run) {
        r->Finish({GrpcCode::UNAVAILABLE, "the plugin is shutting down"});
        return;
      }
      // The caller gave up while the call waited: nothing asks for the answer any more, and
      // the CO retries with a fresh call.
      if (ctx->IsCancelled() || ctx->deadline() < std::chrono::system_clock::now()) {
        log::Ctl().info("{}: the caller gave up while the call was queued", rpc);
        r->Finish({GrpcCode::DEADLINE_EXCEEDED, "the call waited past its deadline"});
        return;
      }
      call_deadline_ = ctx->deadline();
      const grpc::Status s = Guarded(fn);
      call_deadline_ = std::chrono::system_clock::time_point::max();
      if (!s.ok()) log::Ctl().info("{}: {}", rpc, s.error_message());
      r->Finish(s);
    });
  }
  cv_.notify_one();
  return r;
}

// ----------------------------------------------------------------------------------------------
// Gateway helpers

void ControllerService::FillVolumeContext(const std::string& portals, const std::string& target_iqn,
                                          uint32_t block_size, bool own_chap,
                                          google::protobuf::Map<std::string, std::string>* ctx) {
  (*ctx)[kCtxTargetIqn] = target_iqn;
  (*ctx)[kCtxLun] = "0";
  (*ctx)[kCtxPortals] = portals;
  (*ctx)[kCtxBlockSize] = std::to_string(block_size ? block_size : 512);
  if (own_chap) (*ctx)[kCtxChapPerVolume] = "true";
}

grpc::Status ControllerService::GetVolumeTarget(const std::string& volume_id, gw::Target* target) {
  // Only names this plugin makes are looked up: anything else (a full IQN, a control character)
  // cannot be one of its volumes.
  if (!IsPlainVolumeName(volume_id)) {
    return {GrpcCode::NOT_FOUND, "volume " + volume_id + " not found"};
  }
  gw::GetTargetRequest req;
  req.set_name(volume_id);
  grpc::Status s = gateway_->GetTarget(GatewayCtx().get(), req, target);
  if (s.error_code() == GrpcCode::NOT_FOUND || (s.ok() && !IsVolume(*target))) {
    return {GrpcCode::NOT_FOUND, "volume " + volume_id + " not found"};
  }
  return FromGateway("GetTarget " + volume_id, s);
}

grpc::Status ControllerService::ListAllTargets(std::vector<gw::Target>* out) {
  gw::ListTargetsRequest req;
  req.set_page_size(kGatewayPage);
  for (;;) {
    gw::ListTargetsResponse resp;
    grpc::Status s = gateway_->ListTargets(GatewayCtx().get(), req, &resp);
    if (!s.ok()) return FromGateway("ListTargets", s);
    for (auto& t : *resp.mutable_targets()) out->push_back(std::move(t));
    if (resp.next_page_token().empty()) return grpc::Status::OK;
    req.set_page_token(resp.next_page_token());
  }
}

grpc::Status ControllerService::ListAllSnapshots(const gw::ListSnapshotsRequest& filter,
                                                 std::vector<gw::Snapshot>* out) {
  gw::ListSnapshotsRequest req = filter;
  req.set_page_size(kGatewayPage);
  for (;;) {
    gw::ListSnapshotsResponse resp;
    grpc::Status s = gateway_->ListSnapshots(GatewayCtx().get(), req, &resp);
    if (!s.ok()) return FromGateway("ListSnapshots", s);
    for (auto& sn : *resp.mutable_snapshots()) out->push_back(std::move(sn));
    if (resp.next_page_token().empty()) return grpc::Status::OK;
    req.set_page_token(resp.next_page_token());
  }
}

// ----------------------------------------------------------------------------------------------
// Volumes

// One CreateVolume request, checked and resolved: what the volume must be.
struct ControllerService::NewVolume {
  std::string name;
  std::string volume_id;
  std::string who;    // "volume ID (NAME)" for messages
  std::string alias;  // VolumeAlias: the name and the content source
  VolumeParams params;
  ChapSecrets chap;
  const ::csi::v1::CapacityRange* range = nullptr;  // null: none given
  uint64_t size = 0;  // to ask the gateway for; 0: a copy of its source's size
  const VolumeContentSource* source = nullptr;
  bool has_source = false;
  uint64_t source_bytes = 0;
  std::string portals;  // volume_context's
};

grpc::Status ControllerService::DoCreateVolume(const ::csi::v1::CreateVolumeRequest& req,
                                               ::csi::v1::CreateVolumeResponse* resp) {
  NewVolume v;
  v.name = req.name();
  if (v.name.empty()) return Invalid("name is empty");
  if (v.name.size() > kMaxNameBytes) {
    return Invalid("name is longer than " + std::to_string(kMaxNameBytes) + " bytes");
  }
  if (req.volume_capabilities().empty()) return Invalid("volume_capabilities is empty");
  if (std::string why = UnsupportedCapability(req.volume_capabilities()); !why.empty()) {
    return Invalid(why);
  }
  auto params = ParseVolumeParameters(req.parameters());
  if (!params.ok()) return rpc::ToGrpcStatus(params.status());
  auto chap = ParseChapSecrets(req.secrets());
  if (!chap.ok()) return rpc::ToGrpcStatus(chap.status());
  v.params = params.value();
  v.chap = chap.value();
  v.volume_id = VolumeIdForName(v.name);
  if (v.params.chap_per_volume) {
    if (!v.chap.enabled()) {
      return Invalid(std::string("parameter chapPerVolume needs CHAP in the provisioner secret (") +
                     kChapUser + ", " + kChapSecret + ")");
    }
    auto own = ChapForVolume(v.chap, v.volume_id);
    if (!own.ok()) return rpc::ToGrpcStatus(own.status());
    v.chap = own.value();
  }
  v.who = "volume " + v.volume_id + " (" + v.name + ")";

  // The source must exist before anything is made for the copy; its block size is the new
  // volume's unless the StorageClass names one (the gateway refuses a mismatch).
  v.source = &req.volume_content_source();
  const auto& source = *v.source;
  uint32_t source_block_size = 0;
  std::string source_what;
  if (source.has_snapshot()) {
    const std::string& id = source.snapshot().snapshot_id();
    if (id.empty()) return Invalid("volume_content_source.snapshot.snapshot_id is empty");
    std::vector<gw::Snapshot> found;
    if (IsGatewaySnapshotName(id)) {
      gw::ListSnapshotsRequest filter;
      filter.set_name(id);
      if (grpc::Status s = ListAllSnapshots(filter, &found); !s.ok()) return s;
    }
    if (found.empty()) return {GrpcCode::NOT_FOUND, "source snapshot " + id + " not found"};
    source_block_size = found[0].block_size();
    v.source_bytes = found[0].size_bytes();
    source_what = "snapshot " + id;
  } else if (source.has_volume()) {
    const std::string& id = source.volume().volume_id();
    if (id.empty()) return Invalid("volume_content_source.volume.volume_id is empty");
    gw::Target src;
    grpc::Status s = GetVolumeTarget(id, &src);
    if (s.error_code() == GrpcCode::NOT_FOUND) {
      return {GrpcCode::NOT_FOUND, "source volume " + id + " not found"};
    }
    if (!s.ok()) return s;
    const gw::Lun* l = Lun0(src);
    if (l == nullptr) return {GrpcCode::NOT_FOUND, "source volume " + id + " has no LUN 0"};
    source_block_size = l->block_size() ? l->block_size() : 512;
    v.source_bytes = l->size_bytes();
    source_what = "volume " + id;
  }
  v.has_source = source.type_case() != VolumeContentSource::TYPE_NOT_SET;
  if (v.has_source && !req.parameters().contains("blockSize")) {
    v.params.block_size = source_block_size;
  }
  v.range = req.has_capacity_range() ? &req.capacity_range() : nullptr;
  // A copy without a required size takes its source's size (size_bytes 0 to the gateway).
  if (!v.has_source || (v.range != nullptr && v.range->required_bytes() > 0)) {
    auto bytes = VolumeBytes(v.range, v.params.block_size);
    if (!bytes.ok()) return rpc::ToGrpcStatus(bytes.status());
    v.size = bytes.value();
  }
  v.alias = VolumeAlias(v.name, source, v.params.chap_per_volume);

  gw::GatewayInfo info;
  if (grpc::Status s = gateway_->GetGatewayInfo(GatewayCtx().get(), {}, &info); !s.ok()) {
    return FromGateway("GetGatewayInfo", s);
  }
  if (info.lun_dir().empty()) {
    return {GrpcCode::FAILED_PRECONDITION,
            "the gateway has no LUN directory for volume files: start iscsigwd with --lun-dir"};
  }
  if (grpc::Status s = CheckPortals(info); !s.ok()) return s;
  v.portals = PortalList(info);

  // The same name again: the volume an earlier call made (or began), if it is this one.
  gw::Target target;
  bool have_target = false;
  {
    gw::GetTargetRequest get;
    get.set_name(v.volume_id);
    grpc::Status s = gateway_->GetTarget(GatewayCtx().get(), get, &target);
    if (s.ok()) {
      if (grpc::Status o = CheckOwner(target, v.volume_id, v.name, v.alias); !o.ok()) return o;
      if (Lun0(target) != nullptr) return AnswerExisting(v, target, resp);
      have_target = true;
    } else if (s.error_code() != GrpcCode::NOT_FOUND) {
      return FromGateway("GetTarget " + v.volume_id, s);
    }
  }

  // Checked before anything is made, so that a refusal leaves nothing behind.
  if (v.has_source) {
    const int64_t limit = v.range ? v.range->limit_bytes() : 0;
    if (limit > 0 && v.source_bytes > static_cast<uint64_t>(limit)) {
      return {GrpcCode::OUT_OF_RANGE,
              "source " + source_what + " has " + std::to_string(v.source_bytes) +
                  " bytes, over capacity_range.limit_bytes " + std::to_string(limit)};
    }
    if (v.size != 0 && v.size < v.source_bytes) {
      return {GrpcCode::OUT_OF_RANGE, "capacity_range.required_bytes " +
                                          std::to_string(v.range->required_bytes()) +
                                          " is smaller than the " + std::to_string(v.source_bytes) +
                                          " bytes of source " + source_what};
    }
  }

  bool created_target = false;
  if (!have_target) {
    if (grpc::Status s = MakeTarget(v, &target, &created_target); !s.ok()) return s;
    if (Lun0(target) != nullptr) return AnswerExisting(v, target, resp);
  }
  return MakeLun(v, created_target, resp);
}

grpc::Status ControllerService::MakeTarget(const NewVolume& v, gw::Target* target, bool* created) {
  gw::CreateTargetRequest create;
  auto* t = create.mutable_target();
  t->set_name(v.volume_id);
  t->set_alias(v.alias);
  if (v.chap.enabled()) {
    t->mutable_chap()->set_user(v.chap.user);
    t->mutable_chap()->set_mutual_user(v.chap.user_in);
  }
  // The id leaves the secrets out: ids reach log lines, and must not carry a digest of one.
  create.set_request_id(GatewayRequestId("target", create));
  if (v.chap.enabled()) {
    t->mutable_chap()->set_secret(v.chap.secret);
    t->mutable_chap()->set_mutual_secret(v.chap.secret_in);
  }
  gw::GetTargetRequest get;
  get.set_name(v.volume_id);
  for (int attempt = 0;; ++attempt) {
    grpc::Status s = gateway_->CreateTarget(GatewayCtx().get(), create, target);
    if (s.error_code() == GrpcCode::UNAVAILABLE) {
      s = gateway_->CreateTarget(GatewayCtx().get(), create, target);  // same request_id
    }
    if (s.error_code() == GrpcCode::INVALID_ARGUMENT && !create.request_id().empty()) {
      // The gateway remembers the ids of creates it did; this id may be a deleted volume's of
      // the same name whose secrets were others (they are not in the id). Without an id the
      // request stands on its own: a real refusal comes back as it is.
      create.clear_request_id();
      continue;
    }
    if (!s.ok() && s.error_code() != GrpcCode::ALREADY_EXISTS && !Unsettled(s)) {
      return FromGateway("CreateTarget " + v.volume_id, s);
    }
    // Made, made by an earlier call, or not known: what the gateway has now decides.
    grpc::Status r = gateway_->GetTarget(GatewayCtx().get(), get, target);
    if (r.ok()) {
      if (grpc::Status o = CheckOwner(*target, v.volume_id, v.name, v.alias); !o.ok()) return o;
      *created = s.ok();
      return grpc::Status::OK;
    }
    if (r.error_code() == GrpcCode::NOT_FOUND && s.ok() && attempt == 0) {
      // An answer remembered from a deleted volume of the same name and request: make it anew.
      log::Ctl().info("CreateVolume {}: the gateway answered from an earlier volume; again", v.who);
      create.clear_request_id();
      continue;
    }
    if (s.ok()) s = r;
    return Pending(v.who + ": its target is not made yet", "CreateTarget", s);
  }
}

grpc::Status ControllerService::MakeLun(const NewVolume& v, bool created_target,
                                        ::csi::v1::CreateVolumeResponse* resp) {
  const auto& source = *v.source;
  gw::CreateLunRequest create;
  create.set_target(v.volume_id);
  auto* l = create.mutable_lun();
  l->set_id(0);
  l->set_size_bytes(v.size);
  l->set_block_size(v.params.block_size);
  auto* file = l->mutable_file();
  file->set_path(BackingPathFor(v.volume_id));
  file->set_create(true);
  file->set_thick(v.params.thick);
  file->set_direct(v.params.direct);
  if (source.has_snapshot()) {
    create.set_snapshot(source.snapshot().snapshot_id());
  } else if (source.has_volume()) {
    create.mutable_lun_source()->set_target(source.volume().volume_id());
    create.mutable_lun_source()->set_id(0);
  }
  create.set_request_id(GatewayRequestId("lun", create));
  // A copy takes as long as its data: its own deadline, so that a large one can finish.
  const auto timeout = v.has_source ? options_.copy_timeout : options_.gateway_timeout;
  gw::GetTargetRequest get;
  get.set_name(v.volume_id);
  for (int attempt = 0;; ++attempt) {
    gw::Lun lun;
    grpc::Status s = gateway_->CreateLun(GatewayCtx(timeout).get(), create, &lun);
    if (s.error_code() == GrpcCode::UNAVAILABLE) {
      s = gateway_->CreateLun(GatewayCtx(timeout).get(), create, &lun);  // same request_id
    }
    if (!s.ok() && s.error_code() != GrpcCode::ALREADY_EXISTS && !Unsettled(s)) {
      // The gateway refused it: no LUN was made. A target this call made for it goes again, so
      // that nothing is left of a refused volume; an earlier call's target is left for the retry
      // (or for DeleteVolume): that call may have a LUN on its way to it.
      if (created_target) {
        gw::DeleteTargetRequest del;
        del.set_name(v.volume_id);
        gw::DeleteTargetResponse out;
        grpc::Status d = gateway_->DeleteTarget(GatewayCtx().get(), del, &out);
        if (!d.ok() && d.error_code() != GrpcCode::NOT_FOUND) {
          log::Ctl().warn("CreateVolume {}: target not removed after the refused LUN: {}", v.who,
                          d.error_message());
        }
      }
      return FromGateway("CreateLun " + v.volume_id, s);
    }
    // Made, made by an earlier call, or not known (a copy past the deadline goes on, and may
    // finish): the target as it is now answers, never a rollback.
    gw::Target now;
    grpc::Status r = gateway_->GetTarget(GatewayCtx().get(), get, &now);
    if (r.ok() && Lun0(now) != nullptr) {
      if (grpc::Status o = CheckOwner(now, v.volume_id, v.name, v.alias); !o.ok()) return o;
      if (s.ok()) {
        log::Ctl().info("CreateVolume: {} created: {} bytes, block size {}{}", v.who,
                        Lun0(now)->size_bytes(), v.params.block_size,
                        source.has_snapshot() ? ", from snapshot " + source.snapshot().snapshot_id()
                        : source.has_volume() ? ", from volume " + source.volume().volume_id()
                                              : "");
      }
      return AnswerExisting(v, now, resp);
    }
    if (r.ok() && s.ok() && attempt == 0) {
      // An answer remembered from a deleted volume of the same name and request: make it anew.
      log::Ctl().info("CreateVolume {}: the gateway answered from an earlier volume; again", v.who);
      create.clear_request_id();
      continue;
    }
    if (s.ok()) s = r.ok() ? grpc::Status(GrpcCode::INTERNAL, "LUN 0 is not there") : r;
    return Pending(v.who + ": its LUN 0 is not made yet" +
                       (v.has_source ? std::string(" (the copy of its source may still run)") : ""),
                   "CreateLun", s);
  }
}

grpc::Status ControllerService::AnswerExisting(const NewVolume& v, const gw::Target& target,
                                               ::csi::v1::CreateVolumeResponse* resp) {
  const gw::Lun* have = Lun0(target);
  const uint32_t have_bs = have->block_size() ? have->block_size() : 512;
  // A copy of its source's size (no required_bytes) is checked against limit_bytes only.
  const bool size_ok = CapacityFits(have->size_bytes(), v.range);
  if (!size_ok || have_bs != v.params.block_size || have->file().thick() != v.params.thick ||
      have->file().direct() != v.params.direct) {
    return {GrpcCode::ALREADY_EXISTS,
            v.who + " exists with " + std::to_string(have->size_bytes()) + " bytes, block size " +
                std::to_string(have_bs) + ", " + (have->file().thick() ? "thick" : "thin") +
                (have->file().direct() ? ", direct" : "") + ": incompatible with this request"};
  }
  // A retry after a SetChap that did not happen, or a target made before its secret existed.
  const auto& c = v.chap;
  if (c.enabled() && (target.chap().user() != c.user || target.chap().mutual_user() != c.user_in)) {
    gw::SetChapRequest set;
    set.set_target(v.volume_id);
    set.mutable_chap()->set_user(c.user);
    set.mutable_chap()->set_secret(c.secret);
    set.mutable_chap()->set_mutual_user(c.user_in);
    set.mutable_chap()->set_mutual_secret(c.secret_in);
    gw::ChapConfig out;
    if (grpc::Status s = gateway_->SetChap(GatewayCtx().get(), set, &out); !s.ok()) {
      return FromGateway("SetChap " + v.volume_id, s);
    }
  }
  auto* vol = resp->mutable_volume();
  vol->set_volume_id(v.volume_id);
  vol->set_capacity_bytes(ToInt64(have->size_bytes()));
  FillVolumeContext(v.portals, target.name(), have->block_size(), v.params.chap_per_volume,
                    vol->mutable_volume_context());
  if (v.has_source) *vol->mutable_content_source() = *v.source;
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoDeleteVolume(const ::csi::v1::DeleteVolumeRequest& req) {
  const std::string& id = req.volume_id();
  if (id.empty()) return Invalid("volume_id is empty");
  gw::Target target;
  grpc::Status s = GetVolumeTarget(id, &target);
  // CSI spec: deleting a volume that is not there is success (the call is idempotent).
  if (s.error_code() == GrpcCode::NOT_FOUND) return grpc::Status::OK;
  if (!s.ok()) return s;
  // A node that still has the volume would lose what it writes: a CO unpublishes before it
  // deletes (CSI spec: FAILED_PRECONDITION for a volume in use).
  if (!target.acl().empty()) {
    std::string nodes;
    for (const auto& e : target.acl()) nodes += (nodes.empty() ? "" : ", ") + NodeIdOf(e);
    return {GrpcCode::FAILED_PRECONDITION, "volume " + id + " is published to node " + nodes +
                                               ": ControllerUnpublishVolume it first"};
  }
  gw::ListSessionsRequest ls;
  ls.set_target(id);
  gw::ListSessionsResponse sessions;
  s = gateway_->ListSessions(GatewayCtx().get(), ls, &sessions);
  if (!s.ok()) return FromGateway("ListSessions " + id, s);
  for (const auto& session : sessions.sessions()) {
    if (session.discovery()) continue;
    return {GrpcCode::FAILED_PRECONDITION,
            "volume " + id + " has a session from " + session.initiator_name() + " (tsih " +
                std::to_string(session.tsih()) + "): it is in use; log the node out first"};
  }
  gw::DeleteTargetRequest del;
  del.set_name(id);
  // No force: a session that logged in since the look above makes the gateway refuse
  // (FAILED_PRECONDITION) rather than drop it.
  gw::DeleteTargetResponse out;
  s = gateway_->DeleteTarget(GatewayCtx().get(), del, &out);
  if (s.error_code() == GrpcCode::NOT_FOUND) return grpc::Status::OK;
  if (!s.ok()) return FromGateway("DeleteTarget " + id, s);
  log::Ctl().info("DeleteVolume: volume {} ({}) deleted, {} file(s) removed", id, target.alias(),
                  out.backing_files_removed());
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoPublish(const ::csi::v1::ControllerPublishVolumeRequest& req) {
  if (req.volume_id().empty()) return Invalid("volume_id is empty");
  if (req.node_id().empty()) return Invalid("node_id is empty");
  if (!req.has_volume_capability()) return Invalid("volume_capability is not set");
  if (std::string why = UnsupportedCapability(req.volume_capability()); !why.empty()) {
    return Invalid(why);
  }
  // An ACL entry lets its node write: publishing read-only would be a promise the gateway does
  // not keep (and PUBLISH_READONLY is not among the capabilities).
  if (req.readonly()) {
    return Invalid("read-only publish is not supported: the gateway has no read-only ACL entry");
  }
  auto node = ParseNodeId(req.node_id());
  if (!node.ok()) return rpc::ToGrpcStatus(node.status());
  const std::string wanted = node->ToString();
  gw::Target target;
  if (grpc::Status s = GetVolumeTarget(req.volume_id(), &target); !s.ok()) return s;
  const gw::AclEntry* same = nullptr;
  for (const auto& e : target.acl()) {
    if (e.initiator() == node->initiator) same = &e;
  }
  // The same node again is the same request (readonly is refused above): published already.
  if (same != nullptr && NodeIdOf(*same) == wanted) return grpc::Status::OK;
  // Every supported access mode is single-node: a second node writing the same file system
  // would corrupt it (CSI spec: FAILED_PRECONDITION, published to another node).
  if (same == nullptr && !target.acl().empty()) {
    return {GrpcCode::FAILED_PRECONDITION, "volume " + req.volume_id() + " is published to node " +
                                               NodeIdOf(target.acl(0)) +
                                               "; unpublish it there first"};
  }
  if (same != nullptr) {
    // The same initiator name from other addresses: the node's address changed, or its plugin
    // now reports it; or another machine carries the same name. A session of that name from an
    // address the new id does not list tells the last apart: refused, like another node.
    std::string elsewhere;
    if (grpc::Status s = SessionElsewhere(req.volume_id(), *node, &elsewhere); !s.ok()) return s;
    if (!elsewhere.empty()) {
      return {GrpcCode::FAILED_PRECONDITION,
              "volume " + req.volume_id() + " is published to node " + NodeIdOf(*same) +
                  ", which has a session from " + elsewhere + "; unpublish it there first"};
    }
    // Its entry is replaced; the node's sessions stay. Between the two calls the volume admits
    // nobody new: the node's reconnects wait for the CO's retry if this call ends there.
    gw::RemoveAclEntryRequest rm;
    rm.set_target(req.volume_id());
    rm.set_initiator(node->initiator);
    rm.set_drop_sessions(false);
    gw::RemoveAclEntryResponse out;
    grpc::Status s = gateway_->RemoveAclEntry(GatewayCtx().get(), rm, &out);
    if (!s.ok() && s.error_code() != GrpcCode::NOT_FOUND) {
      return FromGateway("RemoveAclEntry " + req.volume_id(), s);
    }
  }
  // The node's addresses, when it reports them, are the only sources the entry admits its
  // name from (docs/security.md, "CSI volumes").
  gw::AddAclEntryRequest add;
  add.set_target(req.volume_id());
  add.mutable_entry()->set_initiator(node->initiator);
  for (const auto& a : node->addresses) add.mutable_entry()->add_sources(a);
  gw::AclEntry out;
  grpc::Status s = gateway_->AddAclEntry(GatewayCtx().get(), add, &out);
  if (s.error_code() == GrpcCode::ALREADY_EXISTS) {
    // An earlier call's add that outlived its caller: published already if it added this.
    if (grpc::Status g = GetVolumeTarget(req.volume_id(), &target); !g.ok()) return g;
    for (const auto& e : target.acl()) {
      if (NodeIdOf(e) == wanted) return grpc::Status::OK;
    }
    return {GrpcCode::ABORTED, "volume " + req.volume_id() + ": the ACL entry of " +
                                   node->initiator + " changed meanwhile; retry"};
  }
  if (s.error_code() == GrpcCode::NOT_FOUND) {
    return {GrpcCode::NOT_FOUND, "volume " + req.volume_id() + " not found"};
  }
  if (!s.ok()) return FromGateway("AddAclEntry " + req.volume_id(), s);
  log::Ctl().info("ControllerPublishVolume: volume {} published to {}{}", req.volume_id(), wanted,
                  node->addresses.empty() ? " (from any address)" : "");
  return grpc::Status::OK;
}

grpc::Status ControllerService::SessionElsewhere(const std::string& volume_id,
                                                 const NodeIdentity& node, std::string* where) {
  where->clear();
  if (node.addresses.empty()) return grpc::Status::OK;
  gw::ListSessionsRequest ls;
  ls.set_target(volume_id);
  gw::ListSessionsResponse sessions;
  grpc::Status s = gateway_->ListSessions(GatewayCtx().get(), ls, &sessions);
  if (!s.ok()) return FromGateway("ListSessions " + volume_id, s);
  for (const auto& session : sessions.sessions()) {
    if (session.discovery() || session.initiator_name() != node.initiator) continue;
    for (const auto& c : session.connections()) {
      const auto peer = PeerAddress(c.peer());
      if (!peer ||
          std::find(node.addresses.begin(), node.addresses.end(), *peer) == node.addresses.end()) {
        *where = c.peer();
        return grpc::Status::OK;
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoUnpublish(
    const ::csi::v1::ControllerUnpublishVolumeRequest& req) {
  if (req.volume_id().empty()) return Invalid("volume_id is empty");
  gw::Target target;
  grpc::Status s = GetVolumeTarget(req.volume_id(), &target);
  // CSI spec: a volume or a node that is gone is unpublished already.
  if (s.error_code() == GrpcCode::NOT_FOUND) return grpc::Status::OK;
  if (!s.ok()) return s;
  std::vector<std::string> nodes;
  if (!req.node_id().empty()) {
    auto node = ParseNodeId(req.node_id());
    if (!node.ok()) return rpc::ToGrpcStatus(node.status());
    // The initiator's entry, whatever addresses the node reports now (it may have moved, or
    // have been published before it reported any), unless another machine of the same name
    // holds a session there: then this node never had the volume.
    for (const auto& e : target.acl()) {
      if (e.initiator() != node->initiator) continue;
      if (NodeIdOf(e) != node->ToString() && !e.sources().empty()) {
        std::string elsewhere;
        if (s = SessionElsewhere(req.volume_id(), *node, &elsewhere); !s.ok()) return s;
        if (!elsewhere.empty()) {
          log::Ctl().warn(
              "ControllerUnpublishVolume: volume {} is published to {}, with a session from {}, "
              "not to {}: left as it is",
              req.volume_id(), NodeIdOf(e), elsewhere, node->ToString());
          return grpc::Status::OK;
        }
      }
      nodes.push_back(node->initiator);
    }
  } else {
    // CSI spec: no node_id unpublishes the volume from every node.
    for (const auto& e : target.acl()) nodes.push_back(e.initiator());
  }
  for (const auto& node : nodes) {
    gw::RemoveAclEntryRequest rm;
    rm.set_target(req.volume_id());
    rm.set_initiator(node);
    rm.set_drop_sessions(true);
    gw::RemoveAclEntryResponse out;
    s = gateway_->RemoveAclEntry(GatewayCtx().get(), rm, &out);
    if (s.error_code() == GrpcCode::NOT_FOUND) continue;
    if (!s.ok()) return FromGateway("RemoveAclEntry " + req.volume_id(), s);
    log::Ctl().info("ControllerUnpublishVolume: volume {} unpublished from {} ({} session(s))",
                    req.volume_id(), node, out.sessions_dropped());
  }
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoValidate(const ::csi::v1::ValidateVolumeCapabilitiesRequest& req,
                                           ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
  if (req.volume_id().empty()) return Invalid("volume_id is empty");
  if (req.volume_capabilities().empty()) return Invalid("volume_capabilities is empty");
  gw::Target target;
  if (grpc::Status s = GetVolumeTarget(req.volume_id(), &target); !s.ok()) return s;
  if (std::string why = UnsupportedCapability(req.volume_capabilities()); !why.empty()) {
    resp->set_message(why);
    return grpc::Status::OK;
  }
  auto params = ParseVolumeParameters(req.parameters());
  if (!params.ok()) {
    resp->set_message(params.status().message());
    return grpc::Status::OK;
  }
  const gw::Lun* l = Lun0(target);
  const uint32_t bs = l && l->block_size() ? l->block_size() : 512;
  if (req.parameters().contains("blockSize") && params.value().block_size != bs) {
    resp->set_message("volume " + req.volume_id() + " has block size " + std::to_string(bs));
    return grpc::Status::OK;
  }
  auto* c = resp->mutable_confirmed();
  *c->mutable_volume_context() = req.volume_context();
  *c->mutable_volume_capabilities() = req.volume_capabilities();
  *c->mutable_parameters() = req.parameters();
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoListVolumes(const ::csi::v1::ListVolumesRequest& req,
                                              ::csi::v1::ListVolumesResponse* resp) {
  if (req.max_entries() < 0) {
    return Invalid("max_entries " + std::to_string(req.max_entries()) + " is negative");
  }
  if (!req.starting_token().empty() && !ParsePageToken(req.starting_token())) {
    return {GrpcCode::ABORTED, "starting_token '" + req.starting_token() + "' is not one of ours"};
  }
  std::vector<gw::Target> all;
  if (grpc::Status s = ListAllTargets(&all); !s.ok()) return s;
  struct Vol {
    std::string id;
    gw::Target target;
  };
  std::vector<Vol> vols;
  for (auto& t : all) {
    auto id = VolumeIdOfTarget(t.name());
    if (IsVolume(t) && id) vols.push_back({*id, std::move(t)});
  }
  std::sort(vols.begin(), vols.end(), [](const Vol& a, const Vol& b) { return a.id < b.id; });
  std::vector<const Vol*> page;
  std::string next;
  grpc::Status s = Page(
      vols, [](const Vol& v) -> const std::string& { return v.id; }, req.starting_token(),
      req.max_entries(), &page, &next);
  if (!s.ok()) return s;
  gw::GatewayInfo info;
  if (s = gateway_->GetGatewayInfo(GatewayCtx().get(), {}, &info); !s.ok()) {
    return FromGateway("GetGatewayInfo", s);
  }
  for (const Vol* v : page) {
    auto* e = resp->add_entries();
    const gw::Lun* l = Lun0(v->target);
    e->mutable_volume()->set_volume_id(v->id);
    e->mutable_volume()->set_capacity_bytes(l ? ToInt64(l->size_bytes()) : 0);
    FillVolumeContext(PortalList(info), v->target.name(), l ? l->block_size() : 512,
                      v->target.alias().ends_with(kOwnChapAliasTag),
                      e->mutable_volume()->mutable_volume_context());
    for (const auto& a : v->target.acl()) e->mutable_status()->add_published_node_ids(NodeIdOf(a));
  }
  resp->set_next_token(next);
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoGetCapacity(const ::csi::v1::GetCapacityRequest& req,
                                              ::csi::v1::GetCapacityResponse* resp) {
  auto params = ParseVolumeParameters(req.parameters());
  if (!params.ok()) return rpc::ToGrpcStatus(params.status());
  // CSI spec: the capacity for volumes with these capabilities, none for unsupported ones.
  if (!UnsupportedCapability(req.volume_capabilities()).empty()) {
    resp->set_available_capacity(0);
    return grpc::Status::OK;
  }
  gw::Capacity cap;
  grpc::Status s = gateway_->GetCapacity(GatewayCtx().get(), {}, &cap);
  if (s.error_code() == GrpcCode::FAILED_PRECONDITION) {
    return {GrpcCode::FAILED_PRECONDITION,
            "the gateway has no LUN directory for volume files: start iscsigwd with --lun-dir"};
  }
  if (!s.ok()) return FromGateway("GetCapacity", s);
  resp->set_available_capacity(ToInt64(cap.available_bytes()));
  return grpc::Status::OK;
}

// ----------------------------------------------------------------------------------------------
// Snapshots

grpc::Status ControllerService::DoCreateSnapshot(const ::csi::v1::CreateSnapshotRequest& req,
                                                 ::csi::v1::CreateSnapshotResponse* resp) {
  if (req.name().empty()) return Invalid("name is empty");
  if (req.source_volume_id().empty()) return Invalid("source_volume_id is empty");
  for (const auto& [key, value] : req.parameters()) {
    if (!key.starts_with("csi.storage.k8s.io/")) {
      return Invalid("unknown parameter '" + key + "': snapshots take none");
    }
  }
  gw::Target source;
  if (grpc::Status s = GetVolumeTarget(req.source_volume_id(), &source); !s.ok()) {
    if (s.error_code() != GrpcCode::NOT_FOUND) return s;
    return {GrpcCode::NOT_FOUND, "source volume " + req.source_volume_id() + " not found"};
  }
  gw::CreateSnapshotRequest create;
  create.set_name(SnapshotIdForName(req.name()));
  create.mutable_lun()->set_target(req.source_volume_id());
  create.mutable_lun()->set_id(0);
  gw::Snapshot sn;
  // A snapshot copies the LUN's data (shared blocks where the file system can): a copy's
  // deadline. CreateSnapshot is idempotent by name, so a retry after the deadline finds it.
  // FAILED_PRECONDITION passes through with the gateway's reason: no LUN directory, not a file
  // LUN, or a LUN in use whose copy could not be a point in time.
  grpc::Status s = gateway_->CreateSnapshot(GatewayCtx(options_.copy_timeout).get(), create, &sn);
  if (!s.ok()) return FromGateway("CreateSnapshot " + create.name(), s);
  ToCsiSnapshot(sn, resp->mutable_snapshot());
  log::Ctl().info("CreateSnapshot: snapshot {} ({}) of volume {}: {} bytes", sn.name(), req.name(),
                  req.source_volume_id(), sn.size_bytes());
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoDeleteSnapshot(const ::csi::v1::DeleteSnapshotRequest& req) {
  const std::string& id = req.snapshot_id();
  if (id.empty()) return Invalid("snapshot_id is empty");
  // An id this driver cannot have made names none of its snapshots: deleted already (CSI spec:
  // OK). An operator's own gateway snapshot of that name is not the driver's to delete.
  if (!IsCsiSnapshotId(id)) {
    log::Ctl().info("DeleteSnapshot: {} is not a snapshot of this driver; nothing deleted", id);
    return grpc::Status::OK;
  }
  gw::DeleteSnapshotRequest del;
  del.set_name(id);
  gw::DeleteSnapshotResponse out;
  grpc::Status s = gateway_->DeleteSnapshot(GatewayCtx().get(), del, &out);
  if (s.error_code() == GrpcCode::NOT_FOUND) return grpc::Status::OK;
  if (!s.ok()) return FromGateway("DeleteSnapshot " + id, s);
  log::Ctl().info("DeleteSnapshot: snapshot {} deleted", id);
  return grpc::Status::OK;
}

grpc::Status ControllerService::DoListSnapshots(const ::csi::v1::ListSnapshotsRequest& req,
                                                ::csi::v1::ListSnapshotsResponse* resp) {
  if (req.max_entries() < 0) {
    return Invalid("max_entries " + std::to_string(req.max_entries()) + " is negative");
  }
  if (!req.starting_token().empty() && !ParsePageToken(req.starting_token())) {
    return {GrpcCode::ABORTED, "starting_token '" + req.starting_token() + "' is not one of ours"};
  }
  // CSI spec: filters that match nothing give an empty list, not an error.
  if (!req.snapshot_id().empty() && !IsCsiSnapshotId(req.snapshot_id())) {
    return grpc::Status::OK;
  }
  if (!req.source_volume_id().empty() && !IsPlainVolumeName(req.source_volume_id())) {
    return grpc::Status::OK;
  }
  gw::ListSnapshotsRequest filter;
  filter.set_name(req.snapshot_id());
  if (!req.source_volume_id().empty()) {
    filter.mutable_lun()->set_target(req.source_volume_id());
    filter.mutable_lun()->set_id(0);
  }
  std::vector<gw::Snapshot> all;
  if (grpc::Status s = ListAllSnapshots(filter, &all); !s.ok()) return s;
  // Only the driver's snapshots, each of a volume (its source_volume_id): not an operator's.
  std::erase_if(all, [](const gw::Snapshot& sn) {
    return !IsCsiSnapshotId(sn.name()) || !VolumeIdOfTarget(sn.source_target());
  });
  std::sort(all.begin(), all.end(),
            [](const gw::Snapshot& a, const gw::Snapshot& b) { return a.name() < b.name(); });
  std::vector<const gw::Snapshot*> page;
  std::string next;
  grpc::Status s = Page(
      all, [](const gw::Snapshot& sn) -> const std::string& { return sn.name(); },
      req.starting_token(), req.max_entries(), &page, &next);
  if (!s.ok()) return s;
  for (const gw::Snapshot* sn : page) ToCsiSnapshot(*sn, resp->add_entries()->mutable_snapshot());
  resp->set_next_token(next);
  return grpc::Status::OK;
}

// ----------------------------------------------------------------------------------------------
// Expansion

grpc::Status ControllerService::DoExpand(const ::csi::v1::ControllerExpandVolumeRequest& req,
                                         ::csi::v1::ControllerExpandVolumeResponse* resp) {
  if (req.volume_id().empty()) return Invalid("volume_id is empty");
  if (!req.has_capacity_range()) return Invalid("capacity_range is not set");
  const auto& range = req.capacity_range();
  if (range.required_bytes() < 0 || range.limit_bytes() < 0) {
    return Invalid("capacity_range must not be negative");
  }
  gw::Target target;
  if (grpc::Status s = GetVolumeTarget(req.volume_id(), &target); !s.ok()) return s;
  const gw::Lun* l = Lun0(target);
  if (l == nullptr) return {GrpcCode::NOT_FOUND, "volume " + req.volume_id() + " has no LUN 0"};
  const uint32_t bs = l->block_size() ? l->block_size() : 512;
  const uint64_t current = l->size_bytes();
  const auto want = RoundUp(static_cast<uint64_t>(range.required_bytes()), bs);
  const uint64_t limit = static_cast<uint64_t>(range.limit_bytes());
  if (!want || (limit > 0 && *want > limit)) {
    return {GrpcCode::OUT_OF_RANGE, "required_bytes " + std::to_string(range.required_bytes()) +
                                        " rounded up to the block size " + std::to_string(bs) +
                                        " exceeds limit_bytes " + std::to_string(limit)};
  }
  uint64_t size = current;
  if (*want > current) {
    gw::ResizeLunRequest rs;
    rs.set_target(req.volume_id());
    rs.set_id(0);
    rs.set_size_bytes(*want);
    gw::Lun out;
    if (grpc::Status s = gateway_->ResizeLun(GatewayCtx().get(), rs, &out); !s.ok()) {
      return FromGateway("ResizeLun " + req.volume_id(), s);
    }
    size = out.size_bytes();
    log::Ctl().info("ControllerExpandVolume: volume {} grown from {} to {} bytes", req.volume_id(),
                    current, size);
  } else if (limit > 0 && current > limit) {
    // CSI spec: a volume already at least as large is success, unless it exceeds the limit;
    // a LUN never shrinks.
    return {GrpcCode::OUT_OF_RANGE, "volume " + req.volume_id() + " has " +
                                        std::to_string(current) + " bytes, over limit_bytes " +
                                        std::to_string(limit) + "; volumes do not shrink"};
  }
  resp->set_capacity_bytes(ToInt64(size));
  // Always: the node's initiator must rescan its sessions to see the new size, block volume or
  // not. Linux only logs the capacity-changed unit attention; the sd device keeps its old size
  // until a rescan (tests/interop/test_csi_lifecycle.py, raw block volume).
  resp->set_node_expansion_required(true);
  return grpc::Status::OK;
}

// ----------------------------------------------------------------------------------------------
// Handlers

ControllerService::Reactor* ControllerService::CreateVolume(
    Ctx* ctx, const ::csi::v1::CreateVolumeRequest* req, ::csi::v1::CreateVolumeResponse* resp) {
  return Queued(ctx, "CreateVolume", [=, this] { return DoCreateVolume(*req, resp); });
}

ControllerService::Reactor* ControllerService::DeleteVolume(
    Ctx* ctx, const ::csi::v1::DeleteVolumeRequest* req, ::csi::v1::DeleteVolumeResponse*) {
  return Queued(ctx, "DeleteVolume", [=, this] { return DoDeleteVolume(*req); });
}

ControllerService::Reactor* ControllerService::ControllerPublishVolume(
    Ctx* ctx, const ::csi::v1::ControllerPublishVolumeRequest* req,
    ::csi::v1::ControllerPublishVolumeResponse*) {
  return Queued(ctx, "ControllerPublishVolume", [=, this] { return DoPublish(*req); });
}

ControllerService::Reactor* ControllerService::ControllerUnpublishVolume(
    Ctx* ctx, const ::csi::v1::ControllerUnpublishVolumeRequest* req,
    ::csi::v1::ControllerUnpublishVolumeResponse*) {
  return Queued(ctx, "ControllerUnpublishVolume", [=, this] { return DoUnpublish(*req); });
}

ControllerService::Reactor* ControllerService::ValidateVolumeCapabilities(
    Ctx* ctx, const ::csi::v1::ValidateVolumeCapabilitiesRequest* req,
    ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
  return Queued(ctx, "ValidateVolumeCapabilities", [=, this] { return DoValidate(*req, resp); });
}

ControllerService::Reactor* ControllerService::ListVolumes(Ctx* ctx,
                                                           const ::csi::v1::ListVolumesRequest* req,
                                                           ::csi::v1::ListVolumesResponse* resp) {
  return Queued(ctx, "ListVolumes", [=, this] { return DoListVolumes(*req, resp); });
}

ControllerService::Reactor* ControllerService::GetCapacity(Ctx* ctx,
                                                           const ::csi::v1::GetCapacityRequest* req,
                                                           ::csi::v1::GetCapacityResponse* resp) {
  return Queued(ctx, "GetCapacity", [=, this] { return DoGetCapacity(*req, resp); });
}

ControllerService::Reactor* ControllerService::ControllerGetCapabilities(
    Ctx* ctx, const ::csi::v1::ControllerGetCapabilitiesRequest*,
    ::csi::v1::ControllerGetCapabilitiesResponse* resp) {
  // A constant answer: no gateway call, so no queue.
  using Rpc = ControllerServiceCapability::RPC;
  for (auto type : {Rpc::CREATE_DELETE_VOLUME, Rpc::PUBLISH_UNPUBLISH_VOLUME, Rpc::LIST_VOLUMES,
                    Rpc::GET_CAPACITY, Rpc::CREATE_DELETE_SNAPSHOT, Rpc::LIST_SNAPSHOTS,
                    Rpc::CLONE_VOLUME, Rpc::EXPAND_VOLUME, Rpc::LIST_VOLUMES_PUBLISHED_NODES}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  Reactor* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

ControllerService::Reactor* ControllerService::CreateSnapshot(
    Ctx* ctx, const ::csi::v1::CreateSnapshotRequest* req,
    ::csi::v1::CreateSnapshotResponse* resp) {
  return Queued(ctx, "CreateSnapshot", [=, this] { return DoCreateSnapshot(*req, resp); });
}

ControllerService::Reactor* ControllerService::DeleteSnapshot(
    Ctx* ctx, const ::csi::v1::DeleteSnapshotRequest* req, ::csi::v1::DeleteSnapshotResponse*) {
  return Queued(ctx, "DeleteSnapshot", [=, this] { return DoDeleteSnapshot(*req); });
}

ControllerService::Reactor* ControllerService::ListSnapshots(
    Ctx* ctx, const ::csi::v1::ListSnapshotsRequest* req, ::csi::v1::ListSnapshotsResponse* resp) {
  return Queued(ctx, "ListSnapshots", [=, this] { return DoListSnapshots(*req, resp); });
}

ControllerService::Reactor* ControllerService::ControllerExpandVolume(
    Ctx* ctx, const ::csi::v1::ControllerExpandVolumeRequest* req,
    ::csi::v1::ControllerExpandVolumeResponse* resp) {
  return Queued(ctx, "ControllerExpandVolume", [=, this] { return DoExpand(*req, resp); });
}

}  // namespace iscsigw::csi
