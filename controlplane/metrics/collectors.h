// Prometheus collectors for iscsigwd. They read state at scrape time only:
//   StatsCollector   - sums the per-reactor counter shards of dataplane/runtime/stats.h (SCSI
//                      commands, bytes, latency, iSCSI PDUs, logins, ...) plus gauges the caller
//                      supplies through a callback (sessions per target).
//   ProcessCollector - process_* metrics from /proc/self (CPU, resident memory, fds, start time).
//   BuildInfoCollector - iscsigw_build_info{version,commit} 1.
// Threading: Collect() runs on the exposer's HTTP threads; it takes Stats' mutex briefly and never
// blocks a reactor.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dataplane/runtime/stats.h"

namespace iscsigw::metrics {

class StatsCollector : public prometheus::Collectable {
 public:
  // Sessions per target name, read at scrape (may be empty).
  using SessionCounter = std::function<std::map<std::string, uint64_t>()>;

  explicit StatsCollector(const runtime::Stats* stats, SessionCounter sessions = {})
      : stats_(stats), sessions_(std::move(sessions)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const runtime::Stats* stats_;
  SessionCounter sessions_;
};

class ProcessCollector : public prometheus::Collectable {
 public:
  // `proc_self` is /proc/self in production; tests point it at a fake tree.
  explicit ProcessCollector(std::string proc_self = "/proc/self", std::string proc_root = "/proc")
      : self_(std::move(proc_self)), root_(std::move(proc_root)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::string self_;
  std::string root_;
};

class BuildInfoCollector : public prometheus::Collectable {
 public:
  BuildInfoCollector(std::string version, std::string commit)
      : version_(std::move(version)), commit_(std::move(commit)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::string version_;
  std::string commit_;
};

// Name of an iSCSI opcode for the `opcode` label ("scsi_command", "data_in", ...); null for an
// opcode RFC 7143 does not define.
const char* OpcodeName(uint8_t opcode);
// SPC-4 4.5.6 sense key names for the `sense_key` label.
const char* SenseKeyName(uint8_t key);

}  // namespace iscsigw::metrics
