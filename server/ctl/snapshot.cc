// iscsigwctl snapshot create|list|delete.
#include <cstdio>
#include <memory>
#include <string>

#include "server/ctl/commands.h"
#include "server/ctl/output.h"
#include "server/ctl/parse.h"

namespace iscsigw::ctl {
namespace {

struct SnapshotArgs {
  std::string name, lun;
};

int CreateSnapshot(Client& cl, const Global& g, const SnapshotArgs& a) {
  v1::CreateSnapshotRequest req;
  req.set_name(a.name);
  if (!ParseLunRef(a.lun, req.mutable_lun())) {
    return Fail(kExitUsage, "lun " + a.lun + " is not TARGET:ID");
  }
  v1::Snapshot resp;
  auto s = cl.Call(&v1::GatewayService::Stub::CreateSnapshot, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("snapshot %s of lun %u of %s: %s, %s\n", resp.name().c_str(), resp.source_lun(),
                resp.source_target().c_str(), HumanSize(resp.size_bytes()).c_str(),
                resp.shares_blocks() ? "shares blocks" : "full copy");
  }
  return 0;
}

int ListSnapshots(Client& cl, const Global& g, const SnapshotArgs& a) {
  v1::ListSnapshotsRequest req;
  if (!a.lun.empty() && !ParseLunRef(a.lun, req.mutable_lun())) {
    return Fail(kExitUsage, "--lun " + a.lun + " is not TARGET:ID");
  }
  v1::ListSnapshotsResponse all;
  do {
    v1::ListSnapshotsResponse page;
    auto s = cl.Call(&v1::GatewayService::Stub::ListSnapshots, req, &page);
    if (!s.ok()) return FailRpc(s);
    for (const auto& sn : page.snapshots()) *all.add_snapshots() = sn;
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  if (g.output == "json") {
    PrintJson(all);
    return 0;
  }
  Table t({"NAME", "TARGET", "LUN", "SIZE", "BLOCK", "SHARED", "PATH"});
  for (const auto& sn : all.snapshots()) {
    t.Add({sn.name(), sn.source_target(), std::to_string(sn.source_lun()),
           HumanSize(sn.size_bytes()), std::to_string(sn.block_size()),
           sn.shares_blocks() ? "yes" : "no", sn.path()});
  }
  t.Print();
  return 0;
}

int DeleteSnapshot(Client& cl, const Global& g, const SnapshotArgs& a) {
  v1::DeleteSnapshotRequest req;
  req.set_name(a.name);
  v1::DeleteSnapshotResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::DeleteSnapshot, req, &resp);
  if (!s.ok()) return FailRpc(s);
  g.output == "json" ? PrintJson(resp) : (void)std::printf("snapshot %s deleted\n", a.name.c_str());
  return 0;
}

}  // namespace

void AddSnapshotCommands(CLI::App& app, const Global& g, Action& action) {
  auto* snapshot =
      app.add_subcommand("snapshot", "point-in-time copies of file LUNs")->require_subcommand(1);
  auto a = std::make_shared<SnapshotArgs>();

  auto* c = snapshot->add_subcommand("create", "copy a file LUN's data into a snapshot");
  c->add_option("name", a->name, "1..128 of A-Z a-z 0-9 . _ -")->required();
  c->add_option("lun", a->lun, "the LUN, TARGET:ID")->required();
  OnParsed(c, action, [&g, a](Client& cl) { return CreateSnapshot(cl, g, *a); });

  auto* list = snapshot->add_subcommand("list", "list snapshots (all, or of one LUN)");
  list->add_option("--lun", a->lun, "only snapshots of TARGET:ID");
  OnParsed(list, action, [&g, a](Client& cl) { return ListSnapshots(cl, g, *a); });

  auto* del = snapshot->add_subcommand("delete", "delete a snapshot and its file");
  del->add_option("name", a->name)->required();
  OnParsed(del, action, [&g, a](Client& cl) { return DeleteSnapshot(cl, g, *a); });
}

}  // namespace iscsigw::ctl
