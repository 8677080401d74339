// iscsigw-csi: wires the CSI services of csi/ to one gRPC endpoint; no CSI logic lives here.
// Start-up order: flags, logging, the gateway channel (controller), the services for --mode,
// the server (a stale unix socket removed first), then one line on stdout naming the bound
// endpoint ("iscsigw-csi: listening on tcp://127.0.0.1:PORT") for tests to read; then wait for
// SIGINT/SIGTERM and shut down: the server first, then the services and their checks.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "base/log.h"
#include "csi/controller_service.h"
#include "csi/gateway_channel.h"
#include "csi/host_exec.h"
#include "csi/identity_service.h"
#include "csi/node_service.h"
#include "csi/plugin_server.h"
#include "csi/readiness.h"
#include "csi/volume_model.h"
#include "server/build_info.h"
#include "server/csi_flags.h"
#include "server/shutdown_signals.h"

namespace iscsigw::server {
namespace {

int Run(int argc, char** argv) {
  CsiFlags flags;
  if (int rc = ParseCsiFlags(argc, argv, &flags); rc >= 0) return rc;

  // Signals go to the thread that waits for them, never to a gRPC thread.
  ShutdownSignals signals;

  log::Init(spdlog::level::from_str(flags.log_level),
            flags.log_format == "json" ? log::Format::kJson : log::Format::kText);
  struct LogDrain {
    ~LogDrain() { log::Shutdown(); }
  } log_drain;
  auto& lg = log::Ctl();

  auto endpoint = csi::ParseEndpoint(flags.endpoint);
  if (!endpoint.ok()) {
    std::fprintf(stderr, "iscsigw-csi: %s\n", endpoint.status().message().c_str());
    return 2;
  }
  const bool controller = flags.mode != "node";
  const bool node = flags.mode != "controller";
  const csi::HostExecMode exec_mode = *csi::ParseHostExecMode(flags.host_exec);

  const csi::GatewayTls tls{flags.tls_ca, flags.tls_cert, flags.tls_key, flags.tls_server_name};
  std::vector<std::unique_ptr<csi::ReadinessCheck>> checks;
  std::vector<std::unique_ptr<grpc::Service>> services;
  if (controller) {
    auto channel = csi::MakeGatewayChannel(flags.gateway, tls);
    if (!channel.ok()) {
      std::fprintf(stderr, "iscsigw-csi: %s\n", channel.status().message().c_str());
      return 2;
    }
    checks.push_back(csi::MakeGatewayCheck(channel.value(), flags.gateway));
    csi::ControllerOptions copts;
    copts.gateway_timeout = std::chrono::seconds(flags.gateway_timeout_s);
    copts.copy_timeout = std::chrono::seconds(flags.copy_timeout_s);
    services.push_back(std::make_unique<csi::ControllerService>(channel.value(), copts));
  }
  if (node) {
    std::shared_ptr<csi::HostExec> exec = csi::MakeHostExec(exec_mode);
    checks.push_back(std::make_unique<csi::HostCommandCheck>(
        exec, std::vector<std::string>{"iscsiadm", "--version"}));
    csi::NodeOptions nopts;
    if (flags.node_id.find('@') != std::string::npos) {
      std::fprintf(stderr,
                   "iscsigw-csi: --node-id %s: an initiator name has no '@' (give the "
                   "addresses with --node-address)\n",
                   flags.node_id.c_str());
      return 2;
    }
    nopts.node_id = flags.node_id;
    for (const auto& a : flags.node_addresses) {
      auto canonical = csi::CanonicalAddress(a);
      if (!canonical) {
        std::fprintf(stderr,
                     "iscsigw-csi: --node-address %s is not a numeric IPv4 or IPv6 address\n",
                     a.c_str());
        return 2;
      }
      nopts.node_addresses.push_back(*canonical);
    }
    // One form for one set: NodeIdentity's order, each address once.
    std::sort(nopts.node_addresses.begin(), nopts.node_addresses.end());
    nopts.node_addresses.erase(
        std::unique(nopts.node_addresses.begin(), nopts.node_addresses.end()),
        nopts.node_addresses.end());
    nopts.host_exec_mode = exec_mode;
    nopts.host_exec = exec;
    nopts.state_dir = flags.state_dir;
    services.push_back(std::make_unique<csi::NodeService>(std::move(nopts)));
  }
  csi::IdentityOptions iopts;
  iopts.vendor_version = BuildVersion();
  iopts.controller_service = controller;
  services.push_back(std::make_unique<csi::IdentityService>(iopts, std::move(checks)));

  auto server = csi::PluginServer::Start(endpoint.value(), std::move(services));
  if (!server.ok()) {
    std::fprintf(stderr, "iscsigw-csi: %s\n", server.status().message().c_str());
    return 1;
  }
  const std::string bound = server.value()->endpoint().ToString();
  lg.info("{}: driver {}, mode {}, {}{}", VersionLine("iscsigw-csi"), csi::kPluginName, flags.mode,
          controller ? "gateway " + flags.gateway : "no gateway",
          controller && tls.enabled() ? " (TLS)" : "");
  if (node) lg.info("host commands run {}", flags.host_exec);
  lg.info("CSI endpoint listening on {}", bound);
  std::printf("iscsigw-csi: listening on %s\n", bound.c_str());
  std::fflush(stdout);

  lg.info("signal {}: shutting down", signals.Wait());
  server.value()->Shutdown();
  lg.info("stopped");
  return 0;
}

}  // namespace
}  // namespace iscsigw::server

int main(int argc, char** argv) { return iscsigw::server::Run(argc, argv); }
