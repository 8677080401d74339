#include "controlplane/metrics/state_collector.h"

#include <string>

namespace iscsigw::metrics {
namespace {

// One gauge family of one sample.
prometheus::MetricFamily Family(std::string name, std::string help, double value) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = prometheus::MetricType::Gauge;
  f.metric.emplace_back();
  f.metric.back().gauge.value = value;
  return f;
}

}  // namespace

std::vector<prometheus::MetricFamily> StateCollector::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  if (!read_) return out;
  const Values v = read_();
  out.push_back(Family("iscsigw_state_dir_writable",
                       "1 when the last probe of the state directory could write it, else 0",
                       v.state_dir_writable ? 1 : 0));
  if (!v.shared_enabled) return out;
  out.push_back(Family("iscsigw_shared_config_loaded",
                       "1 once the shared configuration was read and applied, else 0",
                       v.shared_loaded ? 1 : 0));
  if (!v.shared_loaded) return out;
  out.push_back(Family("iscsigw_shared_config_version",
                       "Version of the shared configuration this gateway serves",
                       static_cast<double>(v.shared_version)));
  out.push_back(
      Family("iscsigw_shared_config_last_load_timestamp_seconds",
             "Unix time of the last successful load (read and applied) of the shared configuration",
             v.shared_last_load_seconds));
  return out;
}

}  // namespace iscsigw::metrics
