// iscsigwctl: the command-line client of the iscsigw.v1 gRPC API (its commands and exit codes are a
// contract: docs/reference/cli.md and docs/reference/flags.md).
//
//   iscsigwctl [--server HOST:PORT] [-o table|json] NOUN VERB ARGS...
//
// The server and TLS settings also come from ISCSIGW_SERVER, ISCSIGW_TLS_CA,
// ISCSIGW_TLS_SERVER_NAME, ISCSIGW_TLS_CLIENT_CERT and ISCSIGW_TLS_CLIENT_KEY, so that the image's
// environment can point the iscsigwctl run inside the gateway pod at the local port with the
// pod's CA and the name its certificate carries (the certificate names the Service, not
// 127.0.0.1).
//
// Nouns: target, lun, snapshot, acl, auth, session, gateway. Human tables by default, protobuf JSON
// with -o json. Secrets are read from a file or stdin ("-"), never from the command line. Exit
// status: 0 on success; the gRPC status code on an API error (3 INVALID_ARGUMENT, 5 NOT_FOUND,
// 6 ALREADY_EXISTS, 8 RESOURCE_EXHAUSTED, 9 FAILED_PRECONDITION, 14 UNAVAILABLE, ...); 64 for a
// usage error; 66 when a secret file cannot be read. Errors are one line on stderr.
//
// This file builds the command line and runs what it asks for; each noun's verbs are in
// server/ctl/<noun>.cc, the channel and the exit statuses in server/ctl/client.h, the tables and
// JSON in server/ctl/output.h.
#include <CLI/CLI.hpp>
#include <memory>

#include "server/build_info.h"
#include "server/ctl/client.h"
#include "server/ctl/commands.h"

namespace iscsigw::ctl {
namespace {

// The options every command takes, before its noun.
void AddGlobalOptions(CLI::App& app, Global& g) {
  app.footer(
      "Exit status: 0 ok; gRPC status code on API errors (3 INVALID_ARGUMENT, 5 NOT_FOUND, "
      "6 ALREADY_EXISTS, 8 RESOURCE_EXHAUSTED, 9 FAILED_PRECONDITION, 14 UNAVAILABLE); 64 usage; "
      "66 unreadable input.\nEnvironment (a flag wins over its variable): ISCSIGW_SERVER, "
      "ISCSIGW_TLS_CA, ISCSIGW_TLS_SERVER_NAME, ISCSIGW_TLS_CLIENT_CERT, ISCSIGW_TLS_CLIENT_KEY.");
  app.require_subcommand(1);
  // Runs as the flag is parsed, before the check for a command: `iscsigwctl --version` alone.
  app.set_version_flag("--version", server::VersionLine("iscsigwctl"),
                       "print the version and commit and exit");
  app.add_option("--server", g.server, "gRPC address HOST:PORT")->envname("ISCSIGW_SERVER");
  app.add_option("-o,--output", g.output, "table|json")->check(CLI::IsMember({"table", "json"}));
  app.add_option("--tls-ca", g.tls_ca, "CA bundle to verify the server (enables TLS)")
      ->envname("ISCSIGW_TLS_CA");
  app.add_option("--tls-server-name", g.tls_server_name,
                 "name to verify the server certificate against (default: the host of --server)")
      ->envname("ISCSIGW_TLS_SERVER_NAME");
  app.add_option("--tls-cert", g.tls_cert, "client certificate for mutual TLS")
      ->envname("ISCSIGW_TLS_CLIENT_CERT");
  app.add_option("--tls-key", g.tls_key, "client key for mutual TLS")
      ->envname("ISCSIGW_TLS_CLIENT_KEY");
  app.add_option("--timeout", g.timeout_s, "seconds per call")->check(CLI::Range(1u, 3600u));
}

int Run(int argc, char** argv) {
  Global g;
  CLI::App app{"iscsigwctl: manage an iscsigw gateway over gRPC (iscsigw.v1)"};
  AddGlobalOptions(app, g);
  // The action chosen by the parser; run after parsing, once the channel exists.
  Action action;
  AddTargetCommands(app, g, action);
  AddLunCommands(app, g, action);
  AddSnapshotCommands(app, g, action);
  AddAclCommands(app, g, action);
  AddAuthCommands(app, g, action);
  AddSessionCommands(app, g, action);
  AddGatewayCommands(app, g, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(kExitUsage, e.what());
  }
  if (!action) return Fail(kExitUsage, "nothing to do (see --help)");

  std::shared_ptr<grpc::Channel> channel;
  if (int rc = OpenChannel(g, &channel); rc != 0) return rc;
  Client client(g, channel);
  return action(client);
}

}  // namespace
}  // namespace iscsigw::ctl

int main(int argc, char** argv) { return iscsigw::ctl::Run(argc, argv); }
