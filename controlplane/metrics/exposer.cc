#include "controlplane/metrics/exposer.h"

#include <prometheus/exposer.h>

#include <exception>

#include "dataplane/runtime/file_ring.h"

namespace iscsigw::metrics {

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsOptions& options) {
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == options.listen.size()) {
    return InvalidArgument("--metrics-listen " + options.listen + ": expected HOST:PORT");
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  try {
    // One worker thread: scrapes are rare and cheap.
    s->exposer_ = std::make_unique<prometheus::Exposer>(options.listen, 1);
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable,
                  "--metrics-listen " + options.listen + ": cannot listen: " + e.what());
  }
  StatsCollector::Options copts;
  copts.detail = options.detail;
  copts.lun_dir = options.lun_dir;
  copts.io_uring_enabled = runtime::FileRing::Enabled;
  copts.io_uring_fallbacks = runtime::FileRing::Fallbacks;
  s->stats_ = std::make_shared<StatsCollector>(&runtime::Stats::Global(), options.sessions,
                                               options.stores, std::move(copts));
  s->process_ = std::make_shared<ProcessCollector>();
  s->build_ = std::make_shared<BuildInfoCollector>(options.version, options.commit);
  s->exposer_->RegisterCollectable(s->stats_);
  s->exposer_->RegisterCollectable(s->process_);
  s->exposer_->RegisterCollectable(s->build_);
  if (options.control_state) {
    s->control_state_ = std::make_shared<StateCollector>(options.control_state);
    s->exposer_->RegisterCollectable(s->control_state_);
  }
  const auto ports = s->exposer_->GetListeningPorts();
  s->address_ = options.listen.substr(0, colon) + ":" +
                (ports.empty() ? options.listen.substr(colon + 1) : std::to_string(ports[0]));
  return s;
}

MetricsServer::~MetricsServer() = default;

}  // namespace iscsigw::metrics
