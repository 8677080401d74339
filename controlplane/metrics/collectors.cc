#include "controlplane/metrics/collectors.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <limits>
#include <sstream>

namespace iscsigw::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

ClientMetric& AddMetric(MetricFamily& f, std::vector<ClientMetric::Label> labels) {
  f.metric.emplace_back();
  f.metric.back().label = std::move(labels);
  return f.metric.back();
}

void AddCounter(MetricFamily& f, std::vector<ClientMetric::Label> labels, double v) {
  AddMetric(f, std::move(labels)).counter.value = v;
}

void AddGauge(MetricFamily& f, std::vector<ClientMetric::Label> labels, double v) {
  AddMetric(f, std::move(labels)).gauge.value = v;
}

struct LunSums {
  std::array<uint64_t, runtime::kCmdClasses> commands{};
  uint64_t read_bytes = 0;
  uint64_t written_bytes = 0;
  std::array<std::array<uint64_t, runtime::kLatencyBuckets>, runtime::kCmdClasses> latency{};
  std::array<uint64_t, runtime::kCmdClasses> latency_sum_ns{};
  std::array<uint64_t, 16> check_conditions{};
  uint64_t reservation_conflicts = 0;
  uint64_t unit_attentions = 0;
  std::array<std::array<uint64_t, runtime::kLatencyBuckets>, runtime::kStoreOps> store_latency{};
  std::array<uint64_t, runtime::kStoreOps> store_latency_sum_ns{};
  uint64_t store_errors = 0;
};

LunSums Sum(const runtime::LunStats& ls) {
  LunSums s;
  for (unsigned r = 0; r < ls.shards(); ++r) {
    const runtime::LunShard& sh = ls.shard_at(r);
    for (size_t c = 0; c < runtime::kCmdClasses; ++c) {
      s.commands[c] += runtime::Get(sh.commands[c]);
      s.latency_sum_ns[c] += runtime::Get(sh.latency_sum_ns[c]);
      for (size_t b = 0; b < runtime::kLatencyBuckets; ++b) {
        s.latency[c][b] += runtime::Get(sh.latency[c][b]);
      }
    }
    s.read_bytes += runtime::Get(sh.read_bytes);
    s.written_bytes += runtime::Get(sh.written_bytes);
    for (size_t k = 0; k < 16; ++k) s.check_conditions[k] += runtime::Get(sh.check_conditions[k]);
    s.reservation_conflicts += runtime::Get(sh.reservation_conflicts);
    s.unit_attentions += runtime::Get(sh.unit_attentions);
    for (size_t o = 0; o < runtime::kStoreOps; ++o) {
      s.store_latency_sum_ns[o] += runtime::Get(sh.store_latency_sum_ns[o]);
      for (size_t b = 0; b < runtime::kLatencyBuckets; ++b) {
        s.store_latency[o][b] += runtime::Get(sh.store_latency[o][b]);
      }
    }
    s.store_errors += runtime::Get(sh.store_errors);
  }
  return s;
}

// Bucket counts are read one word at a time while reactors write: the histogram is built from
// the same snapshot so count == +Inf bucket always holds.
ClientMetric::Histogram Histogram(const std::array<uint64_t, runtime::kLatencyBuckets>& buckets,
                                  uint64_t sum_ns) {
  ClientMetric::Histogram h;
  uint64_t cum = 0;
  for (size_t b = 0; b < runtime::kLatencyBuckets; ++b) {
    cum += buckets[b];
    ClientMetric::Bucket bk;
    bk.cumulative_count = cum;
    bk.upper_bound = b < runtime::kLatencyBoundsNs.size()
                         ? static_cast<double>(runtime::kLatencyBoundsNs[b]) / 1e9
                         : std::numeric_limits<double>::infinity();
    h.bucket.push_back(bk);
  }
  h.sample_count = cum;
  h.sample_sum = static_cast<double>(sum_ns) / 1e9;
  return h;
}

}  // namespace

const char* OpcodeName(uint8_t op) {
  switch (op & 0x3f) {
    case 0x00:
      return "nop_out";
    case 0x01:
      return "scsi_command";
    case 0x02:
      return "task_mgmt_request";
    case 0x03:
      return "login_request";
    case 0x04:
      return "text_request";
    case 0x05:
      return "data_out";
    case 0x06:
      return "logout_request";
    case 0x10:
      return "snack_request";
    case 0x20:
      return "nop_in";
    case 0x21:
      return "scsi_response";
    case 0x22:
      return "task_mgmt_response";
    case 0x23:
      return "login_response";
    case 0x24:
      return "text_response";
    case 0x25:
      return "data_in";
    case 0x26:
      return "logout_response";
    case 0x31:
      return "r2t";
    case 0x32:
      return "async_message";
    case 0x3f:
      return "reject";
    default:
      return nullptr;
  }
}

const char* SenseKeyName(uint8_t key) {
  static constexpr std::array<const char*, 16> kNames = {
      "no_sense",       "recovered_error", "not_ready",      "medium_error",
      "hardware_error", "illegal_request", "unit_attention", "data_protect",
      "blank_check",    "vendor_specific", "copy_aborted",   "aborted_command",
      "reserved_0c",    "volume_overflow", "miscompare",     "completed"};
  return kNames[key & 0x0f];
}

namespace {

// Per-LUN gauges of every configured LUN's store.
void AddStoreFamilies(const std::vector<StatsCollector::StoreUsage>& stores,
                      std::vector<MetricFamily>& out) {
  auto cap =
      Family("iscsigw_store_capacity_bytes", "Size of the LUN's backing store", MetricType::Gauge);
  auto alloc = Family("iscsigw_store_allocated_bytes",
                      "Bytes of the LUN's backing store that hold storage: ram chunks in use, a "
                      "file's allocated blocks (st_blocks), 0 for a null store, an rbd image's "
                      "size",
                      MetricType::Gauge);
  auto online = Family("iscsigw_lun_online",
                       "1 while the LUN's store serves I/O; 0 while it answers NOT READY: an rbd "
                       "image not open yet or whose lock another gateway took, a file store "
                       "fenced by a failed atomic write, a store a live change left closed",
                       MetricType::Gauge);
  auto alua = Family("iscsigw_lun_alua_state",
                     "Asymmetric access state REPORT TARGET PORT GROUPS reports for the LUN "
                     "through this gateway (SPC-4 6.27): 0 active/optimized, 1 "
                     "active/non-optimized",
                     MetricType::Gauge);
  for (const StatsCollector::StoreUsage& u : stores) {
    const std::vector<ClientMetric::Label> labels = {{"lun", std::to_string(u.lun)},
                                                     {"target", u.target}};
    AddGauge(cap, labels, static_cast<double>(u.capacity_bytes));
    AddGauge(alloc, labels, static_cast<double>(u.allocated_bytes));
    AddGauge(online, labels, u.online ? 1 : 0);
    // SPC-4 6.27: ASYMMETRIC ACCESS STATE 0h active/optimized, 1h active/non-optimized.
    AddGauge(alua, labels, u.optimized ? 0 : 1);
  }
  for (auto* f : {&cap, &alloc, &online, &alua}) out.push_back(std::move(*f));
}

// The LUN directory's file system and io_uring: one series each for the gateway.
void AddGatewayFamilies(const StatsCollectorOptions& options, std::vector<MetricFamily>& out) {
  struct statvfs st {};
  // Read at scrape, as df does (f_bavail: what the gateway, not root's reserve, can allocate).
  if (!options.lun_dir.empty() && ::statvfs(options.lun_dir.c_str(), &st) == 0) {
    auto dir_size = Family("iscsigw_lun_dir_size_bytes",
                           "Size of the file system that holds --lun-dir (statvfs f_blocks * "
                           "f_frsize)",
                           MetricType::Gauge);
    AddGauge(dir_size, {}, static_cast<double>(st.f_blocks) * static_cast<double>(st.f_frsize));
    auto dir_free = Family("iscsigw_lun_dir_free_bytes",
                           "Bytes of that file system the gateway can still allocate (statvfs "
                           "f_bavail * f_frsize)",
                           MetricType::Gauge);
    AddGauge(dir_free, {}, static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize));
    out.push_back(std::move(dir_size));
    out.push_back(std::move(dir_free));
  }
  if (const int on = options.io_uring_enabled ? options.io_uring_enabled() : -1; on >= 0) {
    auto f = Family("iscsigw_io_uring_enabled",
                    "1 when file LUNs submit through io_uring; 0 when it was refused (ENOSYS, "
                    "EPERM from a seccomp filter, ...) and a thread pool serves them",
                    MetricType::Gauge);
    AddGauge(f, {}, on);
    out.push_back(std::move(f));
  }
  if (options.io_uring_fallbacks) {
    auto f = Family("iscsigw_io_uring_fallbacks_total",
                    "File LUN stores opened on the thread pool because io_uring was refused",
                    MetricType::Counter);
    AddCounter(f, {}, static_cast<double>(options.io_uring_fallbacks()));
    out.push_back(std::move(f));
  }
}

}  // namespace

std::vector<MetricFamily> StatsCollector::Collect() const {
  std::vector<MetricFamily> out;
  auto cmds = Family("iscsigw_scsi_commands_total",
                     "SCSI commands completed, by operation class (read, write, other)",
                     MetricType::Counter);
  auto rbytes = Family("iscsigw_scsi_read_bytes_total",
                       "Bytes returned by successful read commands", MetricType::Counter);
  auto wbytes = Family("iscsigw_scsi_written_bytes_total",
                       "Bytes written by successful write commands", MetricType::Counter);
  auto lat = Family("iscsigw_scsi_command_duration_seconds",
                    "Time from command PDU arrival to SCSI completion, by operation class",
                    MetricType::Histogram);
  auto cc = Family("iscsigw_scsi_check_conditions_total",
                   "Commands that ended in CHECK CONDITION, by sense key", MetricType::Counter);
  auto rc = Family("iscsigw_scsi_reservation_conflicts_total",
                   "Commands that ended in RESERVATION CONFLICT", MetricType::Counter);
  auto ua = Family("iscsigw_scsi_unit_attentions_total",
                   "Unit attentions reported to initiators (CHECK CONDITION, sense key UNIT "
                   "ATTENTION): power on, LUN reset, capacity or LUN inventory changed, ...",
                   MetricType::Counter);
  auto slat = Family("iscsigw_store_io_duration_seconds",
                     "Time from a call into a file or rbd backing store to its completion, by "
                     "operation (ram and null stores complete in memory within the SCSI command "
                     "and are not timed)",
                     MetricType::Histogram);
  auto serr = Family("iscsigw_store_io_errors_total",
                     "Backing store calls that completed with an error", MetricType::Counter);
  for (const runtime::LunStats* ls : stats_->Luns()) {
    const LunSums s = Sum(*ls);
    const std::string lun = std::to_string(ls->lun());
    for (size_t c = 0; c < runtime::kCmdClasses; ++c) {
      const std::vector<ClientMetric::Label> labels = {
          {"class", runtime::kCmdClassNames[c]}, {"lun", lun}, {"target", ls->target()}};
      AddCounter(cmds, labels, static_cast<double>(s.commands[c]));
      AddMetric(lat, labels).histogram = Histogram(s.latency[c], s.latency_sum_ns[c]);
    }
    AddCounter(rbytes, {{"lun", lun}, {"target", ls->target()}}, static_cast<double>(s.read_bytes));
    AddCounter(wbytes, {{"lun", lun}, {"target", ls->target()}},
               static_cast<double>(s.written_bytes));
    for (uint8_t k = 0; k < 16; ++k) {
      if (s.check_conditions[k] == 0) continue;  // series appear with their first occurrence
      AddCounter(cc, {{"lun", lun}, {"sense_key", SenseKeyName(k)}, {"target", ls->target()}},
                 static_cast<double>(s.check_conditions[k]));
    }
    AddCounter(rc, {{"lun", lun}, {"target", ls->target()}},
               static_cast<double>(s.reservation_conflicts));
    AddCounter(ua, {{"lun", lun}, {"target", ls->target()}},
               static_cast<double>(s.unit_attentions));
    for (size_t o = 0; o < runtime::kStoreOps; ++o) {
      // A series appears with the first timed call of its operation: stores that are not timed
      // (ram, null) and operations a LUN never sees add no empty histograms.
      uint64_t calls = 0;
      for (uint64_t b : s.store_latency[o]) calls += b;
      if (calls == 0) continue;
      AddMetric(slat, {{"lun", lun}, {"op", runtime::kStoreOpNames[o]}, {"target", ls->target()}})
          .histogram = Histogram(s.store_latency[o], s.store_latency_sum_ns[o]);
    }
    AddCounter(serr, {{"lun", lun}, {"target", ls->target()}}, static_cast<double>(s.store_errors));
  }

  auto tmf = Family("iscsigw_iscsi_task_management_requests_total",
                    "Task management requests answered, by function (RFC 7143 11.5.1) and "
                    "response (11.6.1)",
                    MetricType::Counter);
  for (const runtime::TargetStats* ts : stats_->Targets()) {
    std::array<std::array<uint64_t, runtime::kTmfResponses>, runtime::kTmfFunctions> sum{};
    for (unsigned r = 0; r < ts->shards(); ++r) {
      const runtime::TargetShard& sh = ts->shard_at(r);
      for (size_t f = 0; f < runtime::kTmfFunctions; ++f) {
        for (size_t x = 0; x < runtime::kTmfResponses; ++x) sum[f][x] += runtime::Get(sh.tmf[f][x]);
      }
    }
    for (size_t f = 0; f < runtime::kTmfFunctions; ++f) {
      for (size_t x = 0; x < runtime::kTmfResponses; ++x) {
        if (sum[f][x] == 0) continue;  // series appear with their first occurrence
        AddCounter(tmf,
                   {{"function", runtime::kTmfFunctionNames[f]},
                    {"response", runtime::kTmfResponseNames[x]},
                    {"target", ts->target()}},
                   static_cast<double>(sum[f][x]));
      }
    }
  }

  // Process-level iSCSI counters: sum every reactor shard.
  const unsigned n = stats_->reactors();
  std::array<std::array<uint64_t, 64>, 2> pdus{};
  std::array<uint64_t, runtime::kLoginResults> logins{};
  uint64_t logouts = 0, digest = 0, nop_timeouts = 0;
  auto conns = Family("iscsigw_reactor_connections", "iSCSI connections placed on each reactor",
                      MetricType::Gauge);
  auto busy = Family("iscsigw_reactor_busy_seconds_total",
                     "CPU time (user and system) the reactor thread has used running handlers and "
                     "their system calls; time blocked waiting for events is not counted. Read "
                     "from the thread's CPU clock at scrape; rate() near 1 is a saturated reactor",
                     MetricType::Counter);
  for (unsigned r = 0; r < n; ++r) {
    const runtime::ReactorShard* sh = stats_->reactor(r);
    if (sh == nullptr) continue;
    for (int d = 0; d < 2; ++d) {
      for (int op = 0; op < 64; ++op) pdus[d][op] += runtime::Get(sh->pdus[d][op]);
    }
    for (size_t i = 0; i < runtime::kLoginResults; ++i) logins[i] += runtime::Get(sh->logins[i]);
    logouts += runtime::Get(sh->logouts);
    digest += runtime::Get(sh->digest_errors);
    nop_timeouts += runtime::Get(sh->nop_timeouts);
    const std::atomic<int>* g = stats_->connection_gauge(r);
    AddGauge(conns, {{"reactor", std::to_string(r)}},
             g ? static_cast<double>(g->load(std::memory_order_relaxed)) : 0.0);
    if (const double cpu = stats_->ReactorCpuSeconds(r); cpu >= 0) {
      AddCounter(busy, {{"reactor", std::to_string(r)}}, cpu);
    }
  }
  auto pdu = Family("iscsigw_iscsi_pdus_total", "iSCSI PDUs by opcode and direction (rx, tx)",
                    MetricType::Counter);
  for (int d = 0; d < 2; ++d) {
    for (int op = 0; op < 64; ++op) {
      const char* name = OpcodeName(static_cast<uint8_t>(op));
      // Initiator opcodes (< 0x20) are received, target opcodes sent; anything else is counted
      // only when it happened (a malformed PDU's opcode).
      const bool expected = (d == 0) == (op < 0x20);
      if (name == nullptr || (!expected && pdus[d][op] == 0)) continue;
      AddCounter(pdu, {{"direction", runtime::kDirectionNames[d]}, {"opcode", name}},
                 static_cast<double>(pdus[d][op]));
    }
  }
  auto login = Family("iscsigw_iscsi_logins_total", "Completed login attempts, by result",
                      MetricType::Counter);
  for (size_t i = 0; i < runtime::kLoginResults; ++i) {
    AddCounter(login, {{"result", runtime::kLoginResultNames[i]}}, static_cast<double>(logins[i]));
  }
  auto simple = [&](const char* name, const char* help, uint64_t v) {
    auto f = Family(name, help, MetricType::Counter);
    AddCounter(f, {}, static_cast<double>(v));
    out.push_back(std::move(f));
  };
  for (auto* f : {&cmds, &rbytes, &wbytes, &lat, &cc, &rc, &ua, &slat, &serr, &pdu, &login, &tmf}) {
    out.push_back(std::move(*f));
  }
  simple("iscsigw_iscsi_logouts_total", "Logout requests received", logouts);
  simple("iscsigw_iscsi_r2ts_total", "R2T PDUs sent", pdus[1][0x31]);
  simple("iscsigw_iscsi_rejects_total", "Reject PDUs sent", pdus[1][0x3f]);
  simple("iscsigw_iscsi_digest_errors_total", "PDUs received with a bad header or data digest",
         digest);
  simple("iscsigw_iscsi_nop_timeouts_total", "Connections dropped for an unanswered NOP-In",
         nop_timeouts);
  out.push_back(std::move(conns));
  out.push_back(std::move(busy));
  if (sessions_) {
    auto sess =
        Family("iscsigw_iscsi_sessions", "Logged-in normal sessions per target", MetricType::Gauge);
    auto tconns =
        Family("iscsigw_iscsi_connections",
               "Full-feature phase connections of normal sessions per target", MetricType::Gauge);
    for (const auto& [target, g] : sessions_()) {
      AddGauge(sess, {{"target", target}}, static_cast<double>(g.sessions));
      AddGauge(tconns, {{"target", target}}, static_cast<double>(g.connections));
    }
    out.push_back(std::move(sess));
    out.push_back(std::move(tconns));
  }
  if (stores_) AddStoreFamilies(stores_(), out);
  AddGatewayFamilies(options_, out);
  return Aggregate(std::move(out), options_.detail);
}

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<MetricFamily> ProcessCollector::Collect() const {
  std::vector<MetricFamily> out;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  // proc(5) /proc/[pid]/stat: fields after the parenthesised comm; utime 14, stime 15,
  // starttime 22, vsize 23, rss 24 (1-based).
  const std::string stat = ReadFile(self_ + "/stat");
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(stat.substr(close + 2));
    std::vector<std::string> f;
    for (std::string tok; fields >> tok;) f.push_back(tok);
    // f[0] is field 3 (state).
    auto field = [&](int n) {
      return n - 3 < static_cast<int>(f.size()) ? std::stod(f[n - 3]) : 0.0;
    };
    auto cpu = Family("process_cpu_seconds_total", "User and system CPU time spent in seconds",
                      MetricType::Counter);
    AddCounter(cpu, {}, (field(14) + field(15)) / ticks);
    out.push_back(std::move(cpu));
    auto vsz =
        Family("process_virtual_memory_bytes", "Virtual memory size in bytes", MetricType::Gauge);
    AddGauge(vsz, {}, field(23));
    out.push_back(std::move(vsz));
    auto rss =
        Family("process_resident_memory_bytes", "Resident memory size in bytes", MetricType::Gauge);
    AddGauge(rss, {}, field(24) * page);
    out.push_back(std::move(rss));
    // Boot time from /proc/stat "btime".
    std::istringstream ps(ReadFile(root_ + "/stat"));
    double btime = 0;
    for (std::string line; std::getline(ps, line);) {
      if (line.rfind("btime ", 0) == 0) btime = std::stod(line.substr(6));
    }
    auto start = Family("process_start_time_seconds",
                        "Start time of the process since unix epoch in seconds", MetricType::Gauge);
    AddGauge(start, {}, btime + field(22) / ticks);
    out.push_back(std::move(start));
  }
  double fds = 0;
  if (DIR* d = ::opendir((self_ + "/fd").c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++fds;
    }
    ::closedir(d);
    // The directory stream itself holds one descriptor while it is counted.
    if (self_ == "/proc/self" && fds > 0) --fds;
  }
  auto open = Family("process_open_fds", "Number of open file descriptors", MetricType::Gauge);
  AddGauge(open, {}, fds);
  out.push_back(std::move(open));
  rlimit lim{};
  if (self_ == "/proc/self" && ::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    auto max =
        Family("process_max_fds", "Maximum number of open file descriptors", MetricType::Gauge);
    AddGauge(max, {}, static_cast<double>(lim.rlim_cur));
    out.push_back(std::move(max));
  }
  return out;
}

std::vector<MetricFamily> BuildInfoCollector::Collect() const {
  auto f = Family("iscsigw_build_info", "Version and commit iscsigwd was built from; always 1",
                  MetricType::Gauge);
  AddGauge(f, {{"commit", commit_}, {"version", version_}}, 1);
  std::vector<MetricFamily> out;
  out.push_back(std::move(f));
  return out;
}

}  // namespace iscsigw::metrics
