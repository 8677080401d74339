#include "controlplane/service/health.h"

#include <algorithm>

namespace iscsigw::service {

Status Liveness(const std::vector<unsigned>& unresponsive_reactors) {
  if (unresponsive_reactors.empty()) return Status::Ok();
  std::string which;
  for (unsigned r : unresponsive_reactors) {
    which += (which.empty() ? "" : ", ") + std::to_string(r);
  }
  return Status(StatusCode::kUnavailable, "reactor(s) " + which +
                                              " did not run a posted no-op within " +
                                              std::to_string(kReactorAnswerWithin.count()) + " s");
}

Status Readiness(const Status& state_dir, const state::StateStore::SharedHealth& shared) {
  if (!state_dir.ok()) return state_dir;
  if (shared.enabled && !shared.status.ok()) return shared.status;
  return Status::Ok();
}

std::chrono::milliseconds ReadinessProbeLimit(std::chrono::milliseconds health_interval) {
  return std::max<std::chrono::milliseconds>(kReadinessProbeHungAfter, 3 * health_interval);
}

Status ReadinessProbe(std::chrono::steady_clock::duration running,
                      std::chrono::milliseconds health_interval) {
  if (running <= ReadinessProbeLimit(health_interval)) return Status::Ok();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(running).count();
  return Status(StatusCode::kUnavailable,
                "the probe of the state directory (a write and fsync) has not finished for " +
                    std::to_string(secs) + " s");
}

}  // namespace iscsigw::service
