// Prometheus collectors for iscsigwd. They read state at scrape time only:
//   StatsCollector   - sums the per-reactor counter shards of dataplane/runtime/stats.h (SCSI
//                      commands, bytes, latency, iSCSI PDUs, logins, task management, backing
//                      store I/O, ...), reads each reactor thread's CPU clock, and adds gauges the
//                      caller supplies through callbacks (sessions and connections per target,
//                      capacity, allocation, online and ALUA state per LUN), the LUN directory's
//                      size and free space, and whether file LUNs have io_uring; then keeps the
//                      per-LUN detail Options::detail asks for (detail.h).
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

#include "controlplane/metrics/detail.h"
#include "dataplane/runtime/stats.h"

namespace iscsigw::metrics {

// What StatsCollector adds besides the counter shards, and how much detail it keeps.
struct StatsCollectorOptions {
  Detail detail = Detail::kLun;
  // --lun-dir, whose file system is measured (statvfs) at scrape; empty: no lun dir metrics.
  std::string lun_dir;
  // Whether file stores use io_uring and how many fell back (runtime::FileRing's answers);
  // unset: no io_uring metrics.
  std::function<int()> io_uring_enabled;
  std::function<uint64_t()> io_uring_fallbacks;
};

class StatsCollector : public prometheus::Collectable {
 public:
  // Logged-in normal sessions and their connections per target name, read at scrape (may be
  // empty).
  struct TargetGauges {
    uint64_t sessions = 0;
    uint64_t connections = 0;
  };
  using SessionCounter = std::function<std::map<std::string, TargetGauges>()>;
  // Size, allocation and state of every configured LUN's store, read at scrape (never on a
  // reactor).
  struct StoreUsage {
    std::string target;
    uint64_t lun = 0;
    uint64_t capacity_bytes = 0;
    uint64_t allocated_bytes = 0;
    bool online = true;     // the store serves I/O
    bool optimized = true;  // ALUA active/optimized through this gateway (else non-optimized)
  };
  using StoreCounter = std::function<std::vector<StoreUsage>()>;
  using Options = StatsCollectorOptions;

  explicit StatsCollector(const runtime::Stats* stats, SessionCounter sessions = {},
                          StoreCounter stores = {}, Options options = {})
      : stats_(stats),
        sessions_(std::move(sessions)),
        stores_(std::move(stores)),
        options_(std::move(options)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const runtime::Stats* stats_;
  SessionCounter sessions_;
  StoreCounter stores_;
  Options options_;
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
