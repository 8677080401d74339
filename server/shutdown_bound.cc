#include "server/shutdown_bound.h"

#include <cstdlib>
#include <string>

#include "base/log.h"
#include "base/pending_steps.h"

namespace iscsigw::server {

void ShutdownBound::Arm(unsigned seconds) {
  if (seconds == 0 || thread_.joinable()) return;
  thread_ = std::thread([this, seconds] {
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) return;
    std::string what;
    for (const auto& step : PendingStep::List()) what += (what.empty() ? "" : "; ") + step;
    log::Ctl().critical(
        "shutdown did not finish within {} s (--shutdown-timeout), exiting "
        "without it: still waiting for {}",
        seconds, what.empty() ? std::string("the data plane to stop") : what);
    log::Shutdown();  // the line above is the one the operator needs
    std::_Exit(kExitCode);
  });
}

ShutdownBound::~ShutdownBound() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace iscsigw::server
