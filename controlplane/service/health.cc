#include "controlplane/service/health.h"

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

}  // namespace iscsigw::service
