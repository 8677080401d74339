#include "server/csi_flags.h"

#include <CLI/CLI.hpp>

#include "server/build_info.h"

namespace iscsigw::server {

int ParseCsiFlags(int argc, char** argv, CsiFlags* f) {
  CLI::App app{"iscsigw-csi: CSI plugin (driver iscsi.iscsigw.io) for iscsigw gateways"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", VersionLine("iscsigw-csi"),
                       "Print the version and commit and exit");
  app.add_option("--endpoint", f->endpoint,
                 "CSI endpoint: unix:///PATH (kubelet, sidecars) or tcp://HOST:PORT (port 0 picks "
                 "a free port)")
      ->envname("ISCSIGW_CSI_ENDPOINT");
  app.add_option("--gateway", f->gateway, "The gateway's gRPC API, HOST:PORT (controller)")
      ->envname("ISCSIGW_CSI_GATEWAY");
  app.add_option("--mode", f->mode, "controller|node|all: which CSI services to serve")
      ->envname("ISCSIGW_CSI_MODE")
      ->check(CLI::IsMember({"controller", "node", "all"}));
  app.add_option("--tls-ca", f->tls_ca, "CA bundle that signed the gateway's certificate (PEM)")
      ->envname("ISCSIGW_CSI_TLS_CA");
  app.add_option("--tls-cert", f->tls_cert, "Client certificate for the gateway (mutual TLS)")
      ->envname("ISCSIGW_CSI_TLS_CERT");
  app.add_option("--tls-key", f->tls_key, "Private key of --tls-cert (PEM)")
      ->envname("ISCSIGW_CSI_TLS_KEY");
  app.add_option("--tls-server-name", f->tls_server_name,
                 "Name to verify in the gateway's certificate instead of the --gateway host")
      ->envname("ISCSIGW_CSI_TLS_SERVER_NAME");
  app.add_option("--gateway-timeout", f->gateway_timeout_s,
                 "Seconds each call to the gateway may take (controller)")
      ->envname("ISCSIGW_CSI_GATEWAY_TIMEOUT")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--copy-timeout", f->copy_timeout_s,
                 "Seconds a gateway call that copies data (a clone, a restore from a snapshot, a "
                 "snapshot) may take; never past the deadline of the CSI call (controller)")
      ->envname("ISCSIGW_CSI_COPY_TIMEOUT")
      ->check(CLI::Range(1u, 86400u));
  app.add_option("--node-id", f->node_id,
                 "Node id NodeGetInfo reports (default: InitiatorName from the host's "
                 "/etc/iscsi/initiatorname.iscsi)")
      ->envname("ISCSIGW_CSI_NODE_ID");
  app.add_option("--node-address", f->node_addresses,
                 "The node's address(es) as the gateway sees its logins (Kubernetes: the node's "
                 "InternalIP, status.hostIP); NodeGetInfo reports them after the initiator name "
                 "and a publish admits the name from them only. Repeatable or comma-separated")
      ->envname("ISCSIGW_CSI_NODE_ADDRESS")
      ->delimiter(',');
  app.add_option("--host-exec", f->host_exec,
                 "direct|nsenter: run host tools here, or in pid 1's namespaces through nsenter")
      ->envname("ISCSIGW_CSI_HOST_EXEC")
      ->check(CLI::IsMember({"direct", "nsenter"}));
  app.add_option("--state-dir", f->state_dir, "The node plugin's own records")
      ->envname("ISCSIGW_CSI_STATE_DIR");
  app.add_option("--log-level", f->log_level, "trace|debug|info|warn|error|critical|off")
      ->envname("ISCSIGW_CSI_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--log-format", f->log_format, "text|json")
      ->envname("ISCSIGW_CSI_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

}  // namespace iscsigw::server
