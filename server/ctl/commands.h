// iscsigwctl's nouns, one file each (target.cc, lun.cc, snapshot.cc, acl.cc, auth.cc, session.cc,
// gateway.cc). Each Add*Commands adds its noun and verbs to the CLI11 app with their arguments,
// and has the verb the parser picks set `action`: what runs once the channel is open (it reads
// `g` then, after parsing). The verbs' argument values live as long as the app's callbacks and
// the action; `g` and `action` must stay alive while the app parses and the action runs.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <utility>

#include "server/ctl/client.h"

namespace iscsigw::ctl {

// What a parsed command line does with the gateway; its exit status.
using Action = std::function<int(Client&)>;

// When the parser picks `verb`, `action` becomes `run`.
inline void OnParsed(CLI::App* verb, Action& action, Action run) {
  verb->callback([&action, run = std::move(run)] { action = run; });
}

void AddTargetCommands(CLI::App& app, const Global& g, Action& action);
void AddLunCommands(CLI::App& app, const Global& g, Action& action);
void AddSnapshotCommands(CLI::App& app, const Global& g, Action& action);
void AddAclCommands(CLI::App& app, const Global& g, Action& action);
void AddAuthCommands(CLI::App& app, const Global& g, Action& action);
void AddSessionCommands(CLI::App& app, const Global& g, Action& action);
void AddGatewayCommands(CLI::App& app, const Global& g, Action& action);

}  // namespace iscsigw::ctl
