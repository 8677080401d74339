// What grpc.health.v1 answers for each service name (docs/operations.md, "Health and probes"):
//   "iscsigw.liveness"   the process is healthy: the control plane answers (the health service
//                        itself) and every reactor runs a posted no-op within kReactorAnswerWithin.
//                        Nothing outside the process: a state directory that cannot be written or
//                        a cluster that does not answer is not fixed by a restart, and a restart
//                        would cut every initiator.
//   "iscsigw.readiness", "" and "iscsigw.v1.GatewayService"
//                        the gateway can serve and keep a change: the state directory can be
//                        written and, with --shared-config, the shared configuration was loaded
//                        and neither its last read, its adoption nor its watch fails. A probe of
//                        the state directory that has not finished within
//                        ReadinessProbeLimit(health interval) turns these NOT_SERVING (a hung
//                        mount would otherwise leave the last answer standing); the probe's own
//                        answer replaces that once it finishes. Liveness stays as it is.
// Pure functions of what the probes found; ControlServer (server.h) runs the probes.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"
#include "controlplane/state/state_store.h"

namespace iscsigw::service {

inline constexpr const char* kLivenessService = "iscsigw.liveness";
inline constexpr const char* kReadinessService = "iscsigw.readiness";
// A reactor whose posted no-op waits longer than this is stuck (blocked in a call or spinning).
inline constexpr std::chrono::seconds kReactorAnswerWithin{10};

// A readiness probe running longer than the larger of this and 3 health intervals is hung.
inline constexpr std::chrono::seconds kReadinessProbeHungAfter{10};

// Ok when no reactor is unresponsive; otherwise names them.
Status Liveness(const std::vector<unsigned>& unresponsive_reactors);
// Ok when `state_dir` (the last probe of the state directory) is and, when `shared` is enabled,
// its status is; otherwise the first reason.
Status Readiness(const Status& state_dir, const state::StateStore::SharedHealth& shared);
// How long a readiness probe may run: max(kReadinessProbeHungAfter, 3 x health_interval).
std::chrono::milliseconds ReadinessProbeLimit(std::chrono::milliseconds health_interval);
// Ok unless the readiness probe under way has been `running` longer than
// ReadinessProbeLimit(health_interval); zero means none is under way.
Status ReadinessProbe(std::chrono::steady_clock::duration running,
                      std::chrono::milliseconds health_interval);

}  // namespace iscsigw::service
