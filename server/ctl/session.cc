// iscsigwctl session list|kill.
#include <cstdio>
#include <memory>
#include <string>

#include "server/ctl/commands.h"
#include "server/ctl/output.h"

namespace iscsigw::ctl {
namespace {

struct SessionArgs {
  std::string target;
  uint32_t tsih = 0, timeout = 0;
};

int ListSessions(Client& cl, const Global& g, const SessionArgs& a) {
  v1::ListSessionsRequest req;
  req.set_target(a.target);
  v1::ListSessionsResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::ListSessions, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
    return 0;
  }
  Table t({"TSIH", "TARGET", "INITIATOR", "ISID", "PEER", "REACTOR", "DIGESTS"});
  for (const auto& x : resp.sessions()) {
    const auto& p = x.parameters();
    auto get = [&](const char* k) {
      auto it = p.find(k);
      return it == p.end() ? std::string("-") : it->second;
    };
    t.Add({std::to_string(x.tsih()), x.discovery() ? "(discovery)" : x.target(), x.initiator_name(),
           x.isid(), x.connections_size() ? x.connections(0).peer() : "-",
           std::to_string(x.reactor()), get("HeaderDigest") + "/" + get("DataDigest")});
  }
  t.Print();
  return 0;
}

int KillSession(Client& cl, const Global& g, const SessionArgs& a) {
  v1::TerminateSessionRequest req;
  req.set_tsih(a.tsih);
  req.set_logout_timeout_seconds(a.timeout);
  v1::TerminateSessionResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::TerminateSession, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("session %u: logout requested\n", a.tsih);
  }
  return 0;
}

}  // namespace

void AddSessionCommands(CLI::App& app, const Global& g, Action& action) {
  auto* session = app.add_subcommand("session", "live iSCSI sessions")->require_subcommand(1);
  auto a = std::make_shared<SessionArgs>();

  auto* list = session->add_subcommand("list", "list sessions");
  list->add_option("--target", a->target);
  OnParsed(list, action, [&g, a](Client& cl) { return ListSessions(cl, g, *a); });

  auto* kill = session->add_subcommand("kill", "ask the initiator to log out, then drop");
  kill->add_option("tsih", a->tsih)->required();
  kill->add_option("--timeout", a->timeout, "seconds to wait for the logout (default 2)");
  OnParsed(kill, action, [&g, a](Client& cl) { return KillSession(cl, g, *a); });
}

}  // namespace iscsigw::ctl
