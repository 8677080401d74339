// iscsigwd: wires the data plane, the state store and the gRPC control plane together; no protocol
// logic lives here. Start-up order: flags, logging, state directory, persisted state (+ bootstrap),
// data plane (portals bound), configuration applied and saved, gRPC server, ports.json; then wait
// for SIGINT/SIGTERM and shut down in reverse.
#include <fcntl.h>
#include <fmt/ranges.h>
#include <limits.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "base/log.h"
#include "controlplane/metrics/exposer.h"
#include "controlplane/service/server.h"
#include "controlplane/state/lun_files.h"
#include "controlplane/state/shared_config.h"
#include "controlplane/state/state_file.h"
#include "controlplane/state/state_store.h"
#include "dataplane/api/dataplane.h"
#include "server/build_info.h"
#include "server/flags.h"
#include "server/shutdown_bound.h"
#include "server/shutdown_signals.h"

namespace iscsigw::server {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Writes <state-dir>/ports.json atomically (temp file, fsync, rename) so tests can poll for it.
bool WritePortsFile(const std::string& dir, const std::vector<std::string>& portals,
                    const std::string& grpc, const std::string& metrics) {
  std::string json = "{\"iscsi\": [";
  for (size_t i = 0; i < portals.size(); ++i) json += (i ? ", " : "") + JsonString(portals[i]);
  json += "]";
  if (!grpc.empty()) json += ", \"grpc\": " + JsonString(grpc);
  if (!metrics.empty()) json += ", \"metrics\": " + JsonString(metrics);
  json += "}\n";
  return state::WriteFileAtomically(dir + "/ports.json", json, 0644).ok();
}

// Connections and file LUNs take descriptors: the
// soft limit (often 1024) is raised to the hard one, as servers with many sockets do.
void RaiseOpenFileLimit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// A login allocates its connection's receive buffer (1 MiB) and its session's task table (~300
// KiB); a logout frees them. With glibc's defaults, freed memory at the top of a reactor's arena
// goes back to the kernel once it passes a threshold of about that size, so every login faulted
// its pages in again: at 1,000 logins a second that was 40% of the daemon's CPU. Keep up to 64 MiB
// per arena instead; allocations from 4 MiB up (RAM LUNs) still get their own mappings.
void TuneAllocator() {
  (void)::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  (void)::mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

// What the metrics say of the state directory and the shared configuration (never waits).
metrics::StateCollector::Values ControlStateOf(const state::StateStore& store) {
  metrics::StateCollector::Values v;
  v.state_dir_writable = store.dir_writable();
  const auto shared = store.shared_health();
  v.shared_enabled = shared.enabled;
  v.shared_loaded = shared.loaded;
  v.shared_version = shared.version;
  v.shared_last_load_seconds =
      std::chrono::duration<double>(shared.last_load.time_since_epoch()).count();
  return v;
}

int Run(int argc, char** argv) {
  Flags flags;
  if (int rc = ParseFlags(argc, argv, &flags); rc >= 0) return rc;

  // Signals go to the thread that waits for them, never to a reactor.
  ShutdownSignals signals;

  RaiseOpenFileLimit();
  TuneAllocator();
  log::Init(spdlog::level::from_str(flags.log_level),
            flags.log_format == "json" ? log::Format::kJson : log::Format::kText);
  // Every return below, early failures included, drains the log queue in order first: the line
  // saying why the start failed is the one the operator needs.
  struct LogDrain {
    ~LogDrain() { log::Shutdown(); }
  } log_drain;
  auto& ctl = log::Ctl();

  if (::mkdir(flags.state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "iscsigwd: state dir %s: %s\n", flags.state_dir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  if (Status s = state::CheckTrustedDir(flags.state_dir); !s.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", s.message().c_str());
    return 2;
  }

  if (!flags.lun_dir.empty()) {
    if (Status s = state::PrepareLunDir(flags.lun_dir); !s.ok()) {
      std::fprintf(stderr, "iscsigwd: lun dir: %s\n", s.message().c_str());
      return 1;
    }
    // Paths under it are persisted: they must not depend on the directory iscsigwd started in.
    char resolved[PATH_MAX];
    if (::realpath(flags.lun_dir.c_str(), resolved) == nullptr) {
      std::fprintf(stderr, "iscsigwd: lun dir %s: %s\n", flags.lun_dir.c_str(),
                   std::strerror(errno));
      return 1;
    }
    flags.lun_dir = resolved;
  }
  // docs/security.md, "Backing paths": file LUNs live only beneath these, rbd LUNs only in these
  // pools with these confs and keyrings.
  api::BackingPolicy backing;
  {
    std::vector<std::string> roots = flags.backing_allow;
    if (!flags.lun_dir.empty()) roots.insert(roots.begin(), flags.lun_dir);
    auto allowed = api::AllowedPaths::Make(roots);
    if (!allowed.ok()) {
      std::fprintf(stderr, "iscsigwd: --backing-allow: %s\n", allowed.status().message().c_str());
      return 2;
    }
    backing.paths = allowed.value();
    backing.rbd_pools = flags.rbd_allow;
    backing.rbd_confs = flags.rbd_conf;
    backing.rbd_keyrings = flags.rbd_keyring;
  }

  // The configuration is read and checked before anything listens. A state file that cannot be
  // read stops the start, and is left exactly as it is for the operator to inspect.
  auto loaded = state::LoadStateDir(flags.state_dir);
  if (!loaded.ok()) {
    std::fprintf(stderr, "iscsigwd: %s; not starting (the file is left untouched)\n",
                 loaded.status().message().c_str());
    return 1;
  }
  iscsigw::v1::State desired = std::move(loaded).value();
  iscsigw::v1::State redeclared;  // declarations changed since the last start, and the old ones
  if (!flags.bootstrap.empty()) {
    auto boot = state::LoadStateFile(flags.bootstrap);
    if (!boot.ok()) {
      std::fprintf(stderr, "iscsigwd: bootstrap %s\n", boot.status().message().c_str());
      return 1;
    }
    state::Normalize(&boot.value());
    if (auto checked = state::ToConfig(boot.value()); !checked.ok()) {
      std::fprintf(stderr, "iscsigwd: bootstrap %s: %s\n", flags.bootstrap.c_str(),
                   checked.status().message().c_str());
      return 1;
    }
    const iscsigw::v1::State before = desired;
    auto merged = state::MergeBootstrap(boot.value(), &desired);
    if (!merged.ok()) {
      std::fprintf(stderr, "iscsigwd: bootstrap %s: %s; not starting\n", flags.bootstrap.c_str(),
                   merged.status().message().c_str());
      return 1;
    }
    for (const auto& line : merged.value()) ctl.info("bootstrap {}: {}", flags.bootstrap, line);
    state::Normalize(&desired);
    // A declaration changed since the last start applies to the shared configuration's copy of
    // its target too (StateStore::EnableShared).
    for (const auto& [name, decl] : desired.bootstrap().targets()) {
      const auto& old = before.bootstrap().targets();
      const auto it = old.find(name);
      if (it == old.end() || state::SameTarget(it->second, decl)) {
        continue;
      }
      *redeclared.add_targets() = decl;
      (*redeclared.mutable_bootstrap()->mutable_targets())[name] = it->second;
    }
  }
  auto config = state::ToConfig(desired);
  if (!config.ok()) {
    std::fprintf(stderr, "iscsigwd: %s: %s\n",
                 flags.bootstrap.empty() ? "state" : flags.bootstrap.c_str(),
                 config.status().message().c_str());
    return 1;
  }

  api::Options opts;
  opts.portals = flags.portals;
  opts.reactors = flags.reactors;
  opts.gateway_id = static_cast<uint16_t>(flags.gateway_id);
  opts.state_dir = flags.state_dir;  // per-LUN state (APTPL reservations, saved mode pages)
  opts.gateway.nop_interval_ms = flags.nop_interval_s * 1000;
  opts.gateway.nop_timeout_ms = flags.nop_timeout_s * 1000;
  opts.gateway.login_timeout_ms = flags.login_timeout_s * 1000;
  opts.gateway.max_connections = flags.max_connections;
  opts.gateway.max_connections_per_source = flags.max_connections_per_source;
  opts.gateway.max_discovery_sessions = flags.max_discovery_sessions;
  opts.gateway.discovery_idle_timeout_ms = flags.discovery_idle_timeout_s * 1000;
  opts.gateway.advertise = flags.advertise;
  opts.backing = backing;
  opts.gateway.chap_digests = api::ParseChapDigests(flags.chap_digests).value();  // checked

  // Before the data plane: it outlives it, so the bound covers the stores' closing too.
  ShutdownBound shutdown_bound;
  auto dp = api::Dataplane::Start(opts);
  if (!dp.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", dp.status().message().c_str());
    return 1;
  }
  auto& dataplane = *dp.value();
  const state::Limits limits{flags.max_targets, flags.max_luns_per_target, flags.max_acl_entries};
  // A state over a limit (one lowered since) still serves; it may shrink but not grow.
  if (Status over = state::CheckLimits(desired, iscsigw::v1::State(), limits); !over.ok()) {
    ctl.warn("the state is over a limit: {}; changes that would grow it are refused",
             over.message());
  }
  state::StateStore store(flags.state_dir, desired, &dataplane, limits);
  if (Status s = store.Start(); !s.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", s.message().c_str());
    dataplane.Stop();
    return 1;
  }
  if (!flags.shared_config.empty()) {
    auto where = state::ParseSharedConfigLocation(flags.shared_config, flags.shared_config_conf,
                                                  flags.shared_config_client_id,
                                                  flags.shared_config_keyring);
    if (!where.ok()) {
      std::fprintf(stderr, "iscsigwd: %s\n", where.status().message().c_str());
      dataplane.Stop();
      return 1;
    }
    store.EnableShared(
        flags.shared_config + "/" + state::kSharedConfigObject,
        [spec = where.value()] { return api::OpenSharedObject(spec, state::kSharedConfigObject); },
        std::move(redeclared));
  }
  for (const auto& p : dataplane.portals()) ctl.info("iSCSI portal listening on {}", p);
  for (const auto& a : dataplane.advertised()) ctl.info("SendTargets advertises {}", a);
  for (const auto& t : config.value().targets) {
    ctl.info("target {}: {} LUN(s), {}{}", t.name, t.luns.size(),
             t.allow_any_initiator ? "open to any initiator"
                                   : std::to_string(t.acl.size()) + " initiator(s) in ACL",
             t.chap.enabled() ? ", CHAP" : "");
  }

  service::ServiceOptions sopts;
  sopts.version = BuildVersion();
  sopts.lun_dir = flags.lun_dir;
  sopts.backing = backing;
  sopts.health_interval = std::chrono::milliseconds(flags.health_interval_ms);
  auto grpc_server = service::ControlServer::Start(
      flags.grpc_listen, {flags.tls_cert, flags.tls_key, flags.tls_client_ca},
      std::make_unique<service::GatewayServiceImpl>(&store, &dataplane, sopts));
  if (!grpc_server.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", grpc_server.status().message().c_str());
    store.StopShared();
    dataplane.Stop();
    return 1;
  }
  if (!server::IsLocalOnlyListen(flags.grpc_listen) && flags.tls_client_ca.empty()) {
    ctl.warn(
        "gRPC control plane on {} without client certificates (--grpc-insecure): anyone who "
        "reaches it can change every target; see docs/security.md",
        flags.grpc_listen);
  }
  ctl.info(
      "gRPC control plane listening on {}{}", grpc_server.value()->address(),
      flags.tls_cert.empty() ? "" : (flags.tls_client_ca.empty() ? " (TLS)" : " (mutual TLS)"));
  ctl.info("{}: {} reactor(s); gateway id {}; state in {}", VersionLine("iscsigwd"),
           dataplane.reactors(), flags.gateway_id, store.path());
  const auto roots = backing.paths->roots();
  ctl.info("file LUNs may use {}; rbd LUNs the pools {}",
           roots.empty() ? "nothing (--lun-dir, --backing-allow)"
                         : fmt::format("{}", fmt::join(roots, ", ")),
           backing.rbd_pools.empty() ? "none (--rbd-allow)"
                                     : fmt::format("{}", fmt::join(backing.rbd_pools, ", ")));
  if (char state_real[PATH_MAX]; ::realpath(flags.state_dir.c_str(), state_real) != nullptr) {
    const std::string state_dir = state_real;
    for (const std::string& root : roots) {
      if (root != flags.lun_dir &&
          (state_dir == root || state_dir.rfind(root == "/" ? root : root + "/", 0) == 0)) {
        ctl.warn(
            "--backing-allow {} holds the state directory {}: a file LUN on state.json would "
            "hand its CHAP secrets to an initiator; allow only directories of LUN files "
            "(docs/security.md)",
            root, state_dir);
      }
    }
  }
  // Metrics last: a scrape sees a running data plane. Sessions per target are read at scrape.
  runtime::Stats::Global().SetEnabled(flags.metrics_counting);
  metrics::MetricsOptions mopts;
  mopts.listen = flags.metrics_listen;
  mopts.version = BuildVersion();
  mopts.commit = BuildCommit();
  mopts.sessions = [&dataplane, &store] {
    std::map<std::string, metrics::StatsCollector::TargetGauges> n;
    // Every configured target has its gauges, at 0 when nobody is logged in: a series that
    // vanished would read as "no data" to alerts and dashboards rather than as no sessions.
    const auto state = store.Get();
    for (const auto& t : state.targets()) n[t.name()];
    for (const auto& s : dataplane.ListSessions()) {
      if (s.discovery) continue;
      auto& g = n[s.target_name];
      ++g.sessions;
      // MaxConnections is 1: a listed session has exactly its one full-feature connection.
      ++g.connections;
    }
    return n;
  };
  mopts.stores = [&dataplane] {
    std::vector<metrics::StatsCollector::StoreUsage> out;
    for (const auto& u : dataplane.LunUsages()) {
      out.push_back({u.target, u.lun, u.capacity_bytes, u.allocated_bytes, u.online, u.optimized});
    }
    return out;
  };
  mopts.detail = metrics::ParseDetail(flags.metrics_detail).value_or(metrics::Detail::kLun);
  mopts.lun_dir = flags.lun_dir;
  mopts.control_state = [&store] { return ControlStateOf(store); };
  auto metrics_server = metrics::MetricsServer::Start(mopts);
  if (!metrics_server.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", metrics_server.status().message().c_str());
    store.StopShared();
    dataplane.Stop();
    return 1;
  }
  ctl.info("Prometheus metrics on http://{}/metrics{}", metrics_server.value()->address(),
           flags.metrics_counting ? "" : " (per-command counting off)");
  if (!WritePortsFile(flags.state_dir, dataplane.portals(), grpc_server.value()->address(),
                      metrics_server.value()->address())) {
    ctl.error("cannot write {}/ports.json: {}", flags.state_dir, std::strerror(errno));
  }

  ctl.info("signal {}: shutting down", signals.Wait());
  shutdown_bound.Arm(flags.shutdown_timeout_s);
  metrics_server.value().reset();
  grpc_server.value()->Shutdown();
  store.StopShared();
  dataplane.Stop();
  ctl.info("stopped");
  return 0;
}

}  // namespace
}  // namespace iscsigw::server

int main(int argc, char** argv) { return iscsigw::server::Run(argc, argv); }
