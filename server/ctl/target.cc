// iscsigwctl target create|get|list|delete.
#include <cstdio>
#include <memory>
#include <string>

#include "server/ctl/commands.h"
#include "server/ctl/output.h"

namespace iscsigw::ctl {
namespace {

struct TargetArgs {
  std::string name, alias, request_id;
  bool allow_any = false, force = false, keep_backing = false;
};

int CreateTarget(Client& cl, const Global& g, const TargetArgs& a) {
  v1::CreateTargetRequest req;
  req.mutable_target()->set_name(a.name);
  req.mutable_target()->set_alias(a.alias);
  req.mutable_target()->set_allow_any_initiator(a.allow_any);
  req.set_request_id(a.request_id);
  v1::Target resp;
  auto s = cl.Call(&v1::GatewayService::Stub::CreateTarget, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("target %s created\n", resp.name().c_str());
  }
  return 0;
}

int GetTarget(Client& cl, const Global& g, const TargetArgs& a) {
  v1::GetTargetRequest req;
  req.set_name(a.name);
  v1::Target resp;
  auto s = cl.Call(&v1::GatewayService::Stub::GetTarget, req, &resp);
  if (!s.ok()) return FailRpc(s);
  g.output == "json" ? PrintJson(resp) : PrintTarget(resp);
  return 0;
}

int ListTargets(Client& cl, const Global& g) {
  v1::ListTargetsResponse all;
  v1::ListTargetsRequest req;
  for (;;) {
    v1::ListTargetsResponse page;
    auto s = cl.Call(&v1::GatewayService::Stub::ListTargets, req, &page);
    if (!s.ok()) return FailRpc(s);
    for (auto& t : *page.mutable_targets()) *all.add_targets() = std::move(t);
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  if (g.output == "json") {
    PrintJson(all);
    return 0;
  }
  Table t({"NAME", "LUNS", "ACL", "ANY", "CHAP", "ALIAS"});
  for (const auto& x : all.targets()) {
    t.Add({x.name(), std::to_string(x.luns_size()), std::to_string(x.acl_size()),
           x.allow_any_initiator() ? "yes" : "no",
           x.chap().user().empty() ? "-" : (x.chap().mutual_user().empty() ? "one-way" : "mutual"),
           x.alias()});
  }
  t.Print();
  return 0;
}

int DeleteTarget(Client& cl, const Global& g, const TargetArgs& a) {
  v1::DeleteTargetRequest req;
  req.set_name(a.name);
  req.set_force(a.force);
  req.set_keep_backing(a.keep_backing);
  v1::DeleteTargetResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::DeleteTarget, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf(
        "target %s deleted (%u session(s) terminated, %u backing file(s) or image(s) "
        "removed)\n",
        a.name.c_str(), resp.sessions_terminated(), resp.backing_files_removed());
  }
  return 0;
}

}  // namespace

void AddTargetCommands(CLI::App& app, const Global& g, Action& action) {
  auto* target = app.add_subcommand("target", "targets")->require_subcommand(1);
  auto a = std::make_shared<TargetArgs>();

  auto* c = target->add_subcommand("create", "create a target (IQN or short name)");
  c->add_option("name", a->name)->required();
  c->add_option("--alias", a->alias);
  c->add_flag("--allow-any-initiator", a->allow_any, "admit every initiator (no ACL)");
  c->add_option("--request-id", a->request_id, "makes a retried create idempotent");
  OnParsed(c, action, [&g, a](Client& cl) { return CreateTarget(cl, g, *a); });

  auto* get = target->add_subcommand("get", "show a target");
  get->add_option("name", a->name)->required();
  OnParsed(get, action, [&g, a](Client& cl) { return GetTarget(cl, g, *a); });

  auto* list = target->add_subcommand("list", "list targets");
  OnParsed(list, action, [&g](Client& cl) { return ListTargets(cl, g); });

  auto* del = target->add_subcommand("delete", "delete a target");
  del->add_option("name", a->name)->required();
  del->add_flag("--force", a->force, "log out and drop its sessions first");
  del->add_flag("--keep-backing", a->keep_backing,
                "keep the backing files and rbd images the gateway created for its LUNs");
  OnParsed(del, action, [&g, a](Client& cl) { return DeleteTarget(cl, g, *a); });
}

}  // namespace iscsigw::ctl
