// StateCollector: the gauges of the control plane's own state (docs/reference/metrics.md), read
// at scrape through a callback that never waits for storage or a cluster:
//   iscsigw_state_dir_writable                          1 when the last probe of the state
//                                                       directory wrote it, else 0
//   iscsigw_shared_config_loaded                        1 once the shared configuration was read
//                                                       and applied, else 0
//   iscsigw_shared_config_version                       the version of it this gateway serves
//   iscsigw_shared_config_last_load_timestamp_seconds   the last time it was read (unix time)
// The shared_config families exist only with --shared-config; the last two only once it loaded.
// Threading: Collect() runs on the exposer's HTTP threads.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace iscsigw::metrics {

class StateCollector : public prometheus::Collectable {
 public:
  struct Values {
    bool state_dir_writable = true;
    bool shared_enabled = false;  // --shared-config
    bool shared_loaded = false;
    uint64_t shared_version = 0;
    double shared_last_load_seconds = 0;  // unix time
  };
  using Reader = std::function<Values()>;

  explicit StateCollector(Reader read) : read_(std::move(read)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Reader read_;
};

}  // namespace iscsigw::metrics
