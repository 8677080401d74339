// iscsigwctl acl add|list|remove|allow-any.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "server/ctl/commands.h"
#include "server/ctl/output.h"

namespace iscsigw::ctl {
namespace {

struct AclArgs {
  std::string target, initiator, mode;
  std::vector<std::string> sources;
  bool drop = false;
};

int AddAcl(Client& cl, const Global& g, const AclArgs& a) {
  v1::AddAclEntryRequest req;
  req.set_target(a.target);
  req.mutable_entry()->set_initiator(a.initiator);
  for (const auto& s : a.sources) req.mutable_entry()->add_sources(s);
  v1::AclEntry resp;
  auto s = cl.Call(&v1::GatewayService::Stub::AddAclEntry, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("%s may log in to %s\n", a.initiator.c_str(), a.target.c_str());
  }
  return 0;
}

int ListAcl(Client& cl, const Global& g, const AclArgs& a) {
  v1::ListAclEntriesRequest req;
  req.set_target(a.target);
  v1::ListAclEntriesResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::ListAclEntries, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
    return 0;
  }
  if (resp.allow_any_initiator()) std::printf("(allow_any_initiator is on)\n");
  Table t({"INITIATOR", "SOURCES"});
  for (const auto& e : resp.entries()) {
    t.Add({e.initiator(), e.sources_size() ? Join(e.sources(), ",") : "any"});
  }
  t.Print();
  return 0;
}

int RemoveAcl(Client& cl, const Global& g, const AclArgs& a) {
  v1::RemoveAclEntryRequest req;
  req.set_target(a.target);
  req.set_initiator(a.initiator);
  req.set_drop_sessions(a.drop);
  v1::RemoveAclEntryResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::RemoveAclEntry, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("%s removed from %s (%u session(s) dropped)\n", a.initiator.c_str(),
                a.target.c_str(), resp.sessions_dropped());
  }
  return 0;
}

int AllowAny(Client& cl, const Global& g, const AclArgs& a) {
  v1::SetAllowAnyInitiatorRequest req;
  req.set_target(a.target);
  req.set_allow_any_initiator(a.mode == "on");
  v1::Target resp;
  auto s = cl.Call(&v1::GatewayService::Stub::SetAllowAnyInitiator, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("%s: allow_any_initiator %s\n", resp.name().c_str(), a.mode.c_str());
  }
  return 0;
}

}  // namespace

void AddAclCommands(CLI::App& app, const Global& g, Action& action) {
  auto* acl = app.add_subcommand("acl", "initiator access lists")->require_subcommand(1);
  auto a = std::make_shared<AclArgs>();

  auto* add = acl->add_subcommand("add", "admit an initiator");
  add->add_option("target", a->target)->required();
  add->add_option("initiator", a->initiator)->required();
  add->add_option("--source", a->sources, "CIDR the initiator may connect from (repeatable)");
  OnParsed(add, action, [&g, a](Client& cl) { return AddAcl(cl, g, *a); });

  auto* list = acl->add_subcommand("list", "show a target's ACL");
  list->add_option("target", a->target)->required();
  OnParsed(list, action, [&g, a](Client& cl) { return ListAcl(cl, g, *a); });

  auto* rm = acl->add_subcommand("remove", "stop admitting an initiator");
  rm->add_option("target", a->target)->required();
  rm->add_option("initiator", a->initiator)->required();
  rm->add_flag("--drop-sessions", a->drop, "also drop its live sessions");
  OnParsed(rm, action, [&g, a](Client& cl) { return RemoveAcl(cl, g, *a); });

  auto* any = acl->add_subcommand("allow-any", "switch allow_any_initiator on or off");
  any->add_option("target", a->target)->required();
  any->add_option("mode", a->mode, "on|off")->required()->check(CLI::IsMember({"on", "off"}));
  OnParsed(any, action, [&g, a](Client& cl) { return AllowAny(cl, g, *a); });
}

}  // namespace iscsigw::ctl
