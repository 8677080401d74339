// iscsigwctl auth set|clear: CHAP for a target or for discovery. Secrets come from files or stdin
// ("-"), never from the command line.
#include <cstdio>
#include <memory>
#include <string>

#include "server/ctl/commands.h"
#include "server/ctl/output.h"

namespace iscsigw::ctl {
namespace {

struct AuthArgs {
  std::string target, user, secret_file, mutual_user, mutual_secret_file;
  bool discovery = false;
};

int SetChap(Client& cl, const Global& g, const AuthArgs& a) {
  if (a.discovery == !a.target.empty()) {
    return Fail(kExitUsage, "give a target or --discovery (one of them)");
  }
  if (a.mutual_user.empty() != a.mutual_secret_file.empty()) {
    return Fail(kExitUsage, "--mutual-user and --mutual-secret-file go together");
  }
  if (a.secret_file == "-" && a.mutual_secret_file == "-") {
    return Fail(kExitUsage, "only one secret can come from stdin");
  }
  v1::SetChapRequest req;
  req.set_target(a.target);
  std::string secret, err;
  if (!ReadFile(a.secret_file, &secret, &err)) return Fail(kExitNoInput, err);
  req.mutable_chap()->set_user(a.user);
  req.mutable_chap()->set_secret(secret);
  if (!a.mutual_user.empty()) {
    std::string msecret;
    if (!ReadFile(a.mutual_secret_file, &msecret, &err)) return Fail(kExitNoInput, err);
    req.mutable_chap()->set_mutual_user(a.mutual_user);
    req.mutable_chap()->set_mutual_secret(msecret);
  }
  v1::ChapConfig resp;
  auto s = cl.Call(&v1::GatewayService::Stub::SetChap, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("CHAP set for %s (%s)\n", a.target.empty() ? "discovery" : a.target.c_str(),
                resp.mutual_user().empty() ? "one-way" : "mutual");
  }
  return 0;
}

int ClearChap(Client& cl, const Global& g, const AuthArgs& a) {
  if (a.discovery == !a.target.empty()) {
    return Fail(kExitUsage, "give a target or --discovery (one of them)");
  }
  v1::ClearChapRequest req;
  req.set_target(a.target);
  v1::ChapConfig resp;
  auto s = cl.Call(&v1::GatewayService::Stub::ClearChap, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("CHAP cleared for %s\n", a.target.empty() ? "discovery" : a.target.c_str());
  }
  return 0;
}

}  // namespace

void AddAuthCommands(CLI::App& app, const Global& g, Action& action) {
  auto* auth = app.add_subcommand("auth", "CHAP credentials")->require_subcommand(1);
  auto a = std::make_shared<AuthArgs>();

  auto* set = auth->add_subcommand("set", "require CHAP for a target, or for discovery");
  set->add_option("target", a->target, "target (omit with --discovery)");
  set->add_flag("--discovery", a->discovery, "discovery sessions instead of a target");
  set->add_option("--user", a->user, "CHAP name the initiator sends")->required();
  set->add_option("--secret-file", a->secret_file, "file with the secret, or - for stdin")
      ->required();
  set->add_option("--mutual-user", a->mutual_user, "CHAP name of the target (mutual CHAP)");
  set->add_option("--mutual-secret-file", a->mutual_secret_file, "file with the target's secret");
  OnParsed(set, action, [&g, a](Client& cl) { return SetChap(cl, g, *a); });

  auto* clear = auth->add_subcommand("clear", "stop requiring CHAP");
  clear->add_option("target", a->target, "target (omit with --discovery)");
  clear->add_flag("--discovery", a->discovery);
  OnParsed(clear, action, [&g, a](Client& cl) { return ClearChap(cl, g, *a); });
}

}  // namespace iscsigw::ctl
