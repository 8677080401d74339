#include "csi/identity_service.h"

#include <exception>

#include "base/log.h"

namespace iscsigw::csi {

using ::csi::v1::PluginCapability;

// Time kept back from a caller's deadline for the answer to travel back on a loaded node: a
// fifth of the time the caller gave, at least kMinAnswerMargin (kubelet's probes give 1 s).
constexpr std::chrono::milliseconds kMinAnswerMargin{200};
constexpr int kAnswerMarginDivisor = 5;

IdentityService::IdentityService(IdentityOptions options,
                                 std::vector<std::unique_ptr<ReadinessCheck>> checks)
    : options_(std::move(options)), checks_(std::move(checks)) {}

grpc::ServerUnaryReactor* IdentityService::GetPluginInfo(grpc::CallbackServerContext* ctx,
                                                         const ::csi::v1::GetPluginInfoRequest*,
                                                         ::csi::v1::GetPluginInfoResponse* resp) {
  resp->set_name(kPluginName);
  resp->set_vendor_version(options_.vendor_version);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* IdentityService::GetPluginCapabilities(
    grpc::CallbackServerContext* ctx, const ::csi::v1::GetPluginCapabilitiesRequest*,
    ::csi::v1::GetPluginCapabilitiesResponse* resp) {
  if (options_.controller_service) {
    resp->add_capabilities()->mutable_service()->set_type(
        PluginCapability::Service::CONTROLLER_SERVICE);
  }
  // The gateway grows a LUN while it is exported and logged in to; the node rescans the session
  // and grows the file system in place.
  resp->add_capabilities()->mutable_volume_expansion()->set_type(
      PluginCapability::VolumeExpansion::ONLINE);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* IdentityService::Probe(grpc::CallbackServerContext* ctx,
                                                 const ::csi::v1::ProbeRequest*,
                                                 ::csi::v1::ProbeResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  if (checks_.empty()) {
    resp->mutable_ready()->set_value(true);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // Our answer must reach the caller before it gives up: stop the checks a little before its
  // deadline when that comes first.
  const auto now = std::chrono::system_clock::now();
  auto deadline = now + options_.probe_timeout;
  const auto caller = ctx->deadline();
  const auto margin = std::max<std::chrono::system_clock::duration>(
      kMinAnswerMargin, (caller - now) / kAnswerMarginDivisor);
  if (caller - margin < deadline) {
    deadline = std::max(now, caller - margin);
  }
  // Shared by the checks' callbacks; the last one to answer finishes the call.
  struct Pending {
    std::mutex mu;
    size_t left;
    std::string reasons;  // "; "-separated, in the order the checks answered
  };
  auto pending = std::make_shared<Pending>();
  pending->left = checks_.size();
  for (const auto& check : checks_) {
    auto done = [this, pending, reactor, resp](Status s) {
      std::string reasons;
      {
        std::lock_guard lock(pending->mu);
        if (!s.ok()) {
          if (!pending->reasons.empty()) pending->reasons += "; ";
          pending->reasons += s.message();
        }
        if (--pending->left != 0) return;
        reasons = pending->reasons;
      }
      Report(reasons);
      resp->mutable_ready()->set_value(reasons.empty());
      reactor->Finish(grpc::Status::OK);
    };
    try {
      check->Check(deadline, done);
    } catch (const std::exception& e) {
      done(Status(StatusCode::kInternal, check->Name() + ": " + e.what()));
    }
  }
  return reactor;
}

void IdentityService::Report(const std::string& reasons) {
  auto& lg = log::Ctl();
  std::lock_guard lock(mu_);
  const bool changed = !reported_ || reasons != last_reasons_;
  reported_ = true;
  last_reasons_ = reasons;
  if (reasons.empty()) {
    lg.log(changed ? spdlog::level::info : spdlog::level::debug, "probe: ready");
  } else {
    lg.log(changed ? spdlog::level::warn : spdlog::level::debug, "probe: not ready: {}", reasons);
  }
}

}  // namespace iscsigw::csi
