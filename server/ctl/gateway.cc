// iscsigwctl gateway info|capacity|log-level.
#include <cstdio>
#include <memory>
#include <string>

#include "server/ctl/commands.h"
#include "server/ctl/output.h"

namespace iscsigw::ctl {
namespace {

struct GatewayArgs {
  std::string level, logger;
};

int Info(Client& cl, const Global& g) {
  v1::GatewayInfo resp;
  auto s = cl.Call(&v1::GatewayService::Stub::GetGatewayInfo, v1::GetGatewayInfoRequest(), &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
    return 0;
  }
  std::printf("version:     %s\n", resp.version().c_str());
  std::printf("uptime:      %llus\n", static_cast<unsigned long long>(resp.uptime_seconds()));
  std::printf("portals:     %s\n", Join(resp.portals(), ", ").c_str());
  std::printf("advertised:  %s\n", resp.advertised().empty()
                                       ? "(the portal each discovery connection reached)"
                                       : Join(resp.advertised(), ", ").c_str());
  std::printf("reactors:    %u\n", resp.reactors());
  std::printf("targets:     %u\n", resp.targets());
  std::printf("sessions:    %u\n", resp.sessions());
  std::printf("connections: %u\n", resp.connections());
  std::printf("state dir:   %s (%s)\n", resp.state_dir().c_str(),
              resp.state_dir_healthy() ? "ok" : resp.state_dir_error().c_str());
  std::printf("lun dir:     %s\n", resp.lun_dir().empty() ? "(none)" : resp.lun_dir().c_str());
  return 0;
}

int Capacity(Client& cl, const Global& g) {
  v1::Capacity resp;
  auto s = cl.Call(&v1::GatewayService::Stub::GetCapacity, v1::GetCapacityRequest(), &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
    return 0;
  }
  std::printf("lun dir:       %s\n", resp.lun_dir().c_str());
  std::printf("total:         %s\n", HumanSize(resp.total_bytes()).c_str());
  std::printf("available:     %s\n", HumanSize(resp.available_bytes()).c_str());
  std::printf("shares blocks: %s\n", resp.shares_blocks() ? "yes (reflink)" : "no");
  return 0;
}

// Reads the levels without a level, sets them with one.
int LogLevel(Client& cl, const Global& g, const GatewayArgs& a) {
  v1::LogLevels resp;
  grpc::Status s;
  if (a.level.empty()) {
    v1::GetLogLevelRequest req;
    req.set_logger(a.logger);
    s = cl.Call(&v1::GatewayService::Stub::GetLogLevel, req, &resp);
  } else {
    v1::SetLogLevelRequest req;
    req.set_level(a.level);
    req.set_logger(a.logger);
    s = cl.Call(&v1::GatewayService::Stub::SetLogLevel, req, &resp);
  }
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
    return 0;
  }
  Table t({"LOGGER", "LEVEL"});
  for (const auto& l : resp.loggers()) t.Add({l.logger(), l.level()});
  t.Print();
  return 0;
}

}  // namespace

void AddGatewayCommands(CLI::App& app, const Global& g, Action& action) {
  auto* gw = app.add_subcommand("gateway", "the gateway itself")->require_subcommand(1);
  auto a = std::make_shared<GatewayArgs>();

  auto* info = gw->add_subcommand(
      "info", "version, uptime, portals, advertised addresses, reactors, state dir");
  OnParsed(info, action, [&g](Client& cl) { return Info(cl, g); });

  auto* capacity = gw->add_subcommand("capacity", "size and free space of the LUN directory");
  OnParsed(capacity, action, [&g](Client& cl) { return Capacity(cl, g); });

  auto* loglevel = gw->add_subcommand(
      "log-level", "show the log levels, or set them (all loggers, or one with --logger)");
  loglevel->add_option("level", a->level, "trace|debug|info|warn|error|critical|off");
  loglevel->add_option("--logger", a->logger, "pdu|iscsi|scsi|backing|ctl (default: all)");
  OnParsed(loglevel, action, [&g, a](Client& cl) { return LogLevel(cl, g, *a); });
}

}  // namespace iscsigw::ctl
