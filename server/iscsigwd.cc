// iscsigwd: wires the data plane and the state files together; no protocol logic lives here.
// Start-up order: flags, logging, state directory, data plane (portals bound), configuration
// (bootstrap), ports.json; then wait for SIGINT/SIGTERM and shut down in reverse.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "controlplane/metrics/exposer.h"
#include "controlplane/state/state_file.h"
#include "dataplane/api/dataplane.h"
#include "dataplane/base/log.h"
#include "server/flags.h"

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
                    const std::string& metrics) {
  std::string json = "{\"iscsi\": [";
  for (size_t i = 0; i < portals.size(); ++i) json += (i ? ", " : "") + JsonString(portals[i]);
  json += "]";
  if (!metrics.empty()) json += ", \"metrics\": " + JsonString(metrics);
  json += "}\n";
  const std::string tmp = dir + "/ports.json.tmp";
  const std::string dst = dir + "/ports.json";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = ::write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size());
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  return ok && ::rename(tmp.c_str(), dst.c_str()) == 0;
}

int Run(int argc, char** argv) {
  Flags flags;
  if (int rc = ParseFlags(argc, argv, &flags); rc >= 0) return rc;

  // Signals go to the thread that waits for them, never to a reactor.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  log::Init(spdlog::level::from_str(flags.log_level),
            flags.log_format == "json" ? log::Format::kJson : log::Format::kText);
  auto& ctl = log::Ctl();

  if (::mkdir(flags.state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "iscsigwd: state dir %s: %s\n", flags.state_dir.c_str(),
                 std::strerror(errno));
    return 1;
  }

  // The configuration is read and checked before anything listens.
  iscsigw::v1::State desired;
  if (!flags.bootstrap.empty()) {
    auto boot = state::LoadStateFile(flags.bootstrap);
    if (!boot.ok()) {
      std::fprintf(stderr, "iscsigwd: bootstrap %s\n", boot.status().message().c_str());
      return 1;
    }
    state::MergeBootstrap(boot.value(), &desired);
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
  opts.gateway.nop_interval_ms = flags.nop_interval_s * 1000;
  opts.gateway.nop_timeout_ms = flags.nop_timeout_s * 1000;
  opts.gateway.max_connections = flags.max_connections;
  auto dp = api::Dataplane::Start(opts);
  if (!dp.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", dp.status().message().c_str());
    return 1;
  }
  auto& dataplane = *dp.value();
  if (Status s = dataplane.Apply(config.value()); !s.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", s.message().c_str());
    dataplane.Stop();
    return 1;
  }
  for (const auto& p : dataplane.portals()) ctl.info("iSCSI portal listening on {}", p);
  for (const auto& t : config.value().targets) {
    ctl.info("target {}: {} LUN(s), {}", t.name, t.luns.size(),
             t.allow_any_initiator ? "open to any initiator"
                                   : std::to_string(t.initiators.size()) + " initiator(s) in ACL");
  }
  ctl.info("{} reactor(s); gRPC control plane ({}) and metrics ({}) are not part of this build",
           dataplane.reactors(), flags.grpc_listen, flags.metrics_listen);
  // Metrics last: a scrape sees a running data plane. Sessions per target are read at scrape.
  runtime::Stats::Global().SetEnabled(flags.metrics_counting);
  metrics::MetricsOptions mopts;
  mopts.listen = flags.metrics_listen;
  mopts.version = ISCSIGW_BUILD_VERSION;
  mopts.commit = ISCSIGW_COMMIT;
  mopts.sessions = [&dataplane] {
    std::map<std::string, uint64_t> n;
    for (const auto& s : dataplane.ListSessions()) {
      if (!s.discovery) ++n[s.target_name];
    }
    return n;
  };
  auto metrics_server = metrics::MetricsServer::Start(mopts);
  if (!metrics_server.ok()) {
    std::fprintf(stderr, "iscsigwd: %s\n", metrics_server.status().message().c_str());
    dataplane.Stop();
    return 1;
  }
  ctl.info("Prometheus metrics on http://{}/metrics{}", metrics_server.value()->address(),
           flags.metrics_counting ? "" : " (per-command counting off)");
  if (!WritePortsFile(flags.state_dir, dataplane.portals(), metrics_server.value()->address())) {
    ctl.error("cannot write {}/ports.json: {}", flags.state_dir, std::strerror(errno));
  }

  int sig = 0;
  sigwait(&sigs, &sig);
  ctl.info("signal {}: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
  metrics_server.value().reset();
  dataplane.Stop();
  ctl.info("stopped");
  log::Shutdown();
  return 0;
}

}  // namespace
}  // namespace iscsigw::server

int main(int argc, char** argv) { return iscsigw::server::Run(argc, argv); }
