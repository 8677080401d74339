// The /metrics endpoint: a prometheus-cpp pull Exposer (civetweb) on --metrics-listen with the
// iscsigwd collectors registered. Start/Stop from the main thread; the exposer serves scrapes on
// its own threads, never on a reactor.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "controlplane/metrics/collectors.h"
#include "controlplane/metrics/state_collector.h"

namespace prometheus {
class Exposer;
}

namespace iscsigw::metrics {

struct MetricsOptions {
  std::string listen = "0.0.0.0:9540";  // HOST:PORT; port 0 picks a free port
  std::string version;
  std::string commit;
  StatsCollector::SessionCounter sessions;
  StatsCollector::StoreCounter stores;
  Detail detail = Detail::kLun;          // --metrics-detail
  std::string lun_dir;                   // --lun-dir, measured at scrape; empty: none
  StateCollector::Reader control_state;  // the state directory and shared configuration gauges
};

class MetricsServer {
 public:
  static Result<std::unique_ptr<MetricsServer>> Start(const MetricsOptions& options);
  ~MetricsServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<StatsCollector> stats_;
  std::shared_ptr<ProcessCollector> process_;
  std::shared_ptr<BuildInfoCollector> build_;
  std::shared_ptr<StateCollector> control_state_;
  std::string address_;
};

}  // namespace iscsigw::metrics
