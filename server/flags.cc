#include "server/flags.h"

#include <arpa/inet.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "dataplane/api/dataplane.h"
#include "server/build_info.h"

namespace iscsigw::server {

namespace {

// What CLI11 cannot check, between flags or through the data plane's parsers: -1 to go on, or 2
// with the reason on stderr.
int CheckFlags(const Flags& flags) {
  if (!flags.shared_config.empty() && flags.gateway_id == 0) {
    std::fprintf(stderr,
                 "--shared-config needs --gateway-id: the gateways that share a configuration "
                 "export the same images, each with its own id\n");
    return 2;
  }
  if (auto d = api::ParseChapDigests(flags.chap_digests); !d.ok()) {
    std::fprintf(stderr, "--chap-digests: %s\n", d.status().message().c_str());
    return 2;
  }
  for (const std::string& entry : flags.rbd_allow) {
    if (Status s = api::BackingPolicy::ValidateRbdAllow(entry); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 2;
    }
  }
  // docs/security.md: the admin API answers whoever reaches it, so off this host it needs client
  // certificates, or an operator who says it may go without.
  if (!IsLocalOnlyListen(flags.grpc_listen) && flags.tls_client_ca.empty() &&
      !flags.grpc_insecure) {
    std::fprintf(stderr,
                 "--grpc-listen %s is reachable from other hosts: give --tls-cert, --tls-key and "
                 "--tls-client-ca (mutual TLS), listen on loopback or a unix: socket, or pass "
                 "--grpc-insecure to serve the admin API without authentication\n",
                 flags.grpc_listen.c_str());
    return 2;
  }
  return -1;
}

}  // namespace

int ParseFlags(int argc, char** argv, Flags* f) {
  CLI::App app{"iscsigwd: iSCSI gateway daemon"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", VersionLine("iscsigwd"),
                       "Print the version and commit and exit");
  app.add_option("--state-dir", f->state_dir, "Directory for state.json and ports.json")
      ->envname("ISCSIGW_STATE_DIR");
  app.add_option("--portal", f->portals,
                 "iSCSI portal HOST:PORT to listen on (repeatable; port 0 picks a free port)")
      ->envname("ISCSIGW_PORTAL")
      ->delimiter(',');
  app.add_option("--advertise", f->advertise,
                 "TargetAddress HOST:PORT that SendTargets returns instead of the portal's own "
                 "address (repeatable; for NAT, Services, NodePorts, load balancers)")
      ->envname("ISCSIGW_ADVERTISE")
      ->delimiter(',');
  app.add_option("--grpc-listen", f->grpc_listen, "gRPC control plane HOST:PORT")
      ->envname("ISCSIGW_GRPC_LISTEN");
  app.add_option("--metrics-listen", f->metrics_listen, "Prometheus metrics HOST:PORT")
      ->envname("ISCSIGW_METRICS_LISTEN");
  app.add_option("--metrics-counting", f->metrics_counting,
                 "Count per-command metrics (false: only to measure their cost)")
      ->envname("ISCSIGW_METRICS_COUNTING");
  app.add_option("--metrics-detail", f->metrics_detail,
                 "lun|target|gateway: per-LUN metric families with {target,lun} labels, summed "
                 "per target, or summed over the gateway (histograms per LUN only at lun; LUN "
                 "online and ALUA state stay per LUN)")
      ->envname("ISCSIGW_METRICS_DETAIL")
      ->check(CLI::IsMember({"lun", "target", "gateway"}));
  app.add_option("--reactors", f->reactors,
                 "Reactor threads (0: one per CPU the process may use: its affinity, capped by its "
                 "cgroup's CPU quota)")
      ->envname("ISCSIGW_REACTORS");
  app.add_option("--gateway-id", f->gateway_id,
                 "This gateway's number among those exporting the same rbd images (1..65535, "
                 "different on each): its ALUA target port group and relative target port id, "
                 "and its rbd LUNs run without librbd's cache. 0: no other gateway exports them")
      ->envname("ISCSIGW_GATEWAY_ID")
      ->check(CLI::Range(0u, 65535u));
  app.add_option("--lun-dir", f->lun_dir,
                 "Directory for LUN files created by a relative path (CSI volumes) and for "
                 "snapshots; created when missing (empty: none)")
      ->envname("ISCSIGW_LUN_DIR");
  app.add_option("--backing-allow", f->backing_allow,
                 "A directory (any file beneath it, reached without a symbolic link) or a block "
                 "device that file LUNs may use besides --lun-dir (repeatable)")
      ->envname("ISCSIGW_BACKING_ALLOW")
      ->delimiter(',');
  app.add_option("--rbd-allow", f->rbd_allow,
                 "POOL or POOL/NAMESPACE that rbd LUNs may use (repeatable; default: none)")
      ->envname("ISCSIGW_RBD_ALLOW")
      ->delimiter(',');
  app.add_option("--rbd-conf", f->rbd_conf,
                 "ceph.conf that rbd LUNs may name (repeatable); the first is used when a LUN "
                 "names none (none given: $CEPH_CONF, /etc/ceph)")
      ->envname("ISCSIGW_RBD_CONF")
      ->delimiter(',');
  app.add_option("--rbd-keyring", f->rbd_keyring,
                 "keyring file that rbd LUNs may name (repeatable); the first is used when a LUN "
                 "names none (none given: what the conf says)")
      ->envname("ISCSIGW_RBD_KEYRING")
      ->delimiter(',');
  app.add_option("--health-interval-ms", f->health_interval_ms,
                 "How often the health probes run: gRPC health iscsigw.readiness is NOT_SERVING "
                 "while the state directory cannot be written or the shared configuration "
                 "cannot be read, iscsigw.liveness while a reactor does not answer")
      ->envname("ISCSIGW_HEALTH_INTERVAL_MS")
      ->check(CLI::Range(100u, 3600000u));
  app.add_option("--bootstrap", f->bootstrap,
                 "JSON state file whose targets and LUNs are created when missing")
      ->envname("ISCSIGW_BOOTSTRAP");
  app.add_option("--shared-config", f->shared_config,
                 "POOL or POOL/NAMESPACE: keep the targets whose LUNs are rbd in the RADOS object "
                 "iscsigw_config there, shared with the other gateways (needs --gateway-id); the "
                 "others stay in the state file")
      ->envname("ISCSIGW_SHARED_CONFIG");
  app.add_option("--shared-config-conf", f->shared_config_conf,
                 "ceph.conf of the --shared-config cluster (empty: $CEPH_CONF, /etc/ceph)")
      ->envname("ISCSIGW_SHARED_CONFIG_CONF");
  app.add_option("--shared-config-client-id", f->shared_config_client_id,
                 "cephx user for --shared-config (empty: admin)")
      ->envname("ISCSIGW_SHARED_CONFIG_CLIENT_ID");
  app.add_option("--shared-config-keyring", f->shared_config_keyring,
                 "keyring file for --shared-config (empty: what the conf says)")
      ->envname("ISCSIGW_SHARED_CONFIG_KEYRING");
  app.add_option("--shutdown-timeout", f->shutdown_timeout_s,
                 "seconds a stop (flushing and closing every LUN) may take before the daemon "
                 "exits non-zero saying what it waited for (0: no bound)")
      ->envname("ISCSIGW_SHUTDOWN_TIMEOUT");
  app.add_option("--log-level", f->log_level, "trace|debug|info|warn|error|critical|off")
      ->envname("ISCSIGW_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--log-format", f->log_format, "text|json")
      ->envname("ISCSIGW_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--tls-cert", f->tls_cert, "gRPC server certificate (PEM)")
      ->envname("ISCSIGW_TLS_CERT");
  app.add_option("--tls-key", f->tls_key, "gRPC server private key (PEM)")
      ->envname("ISCSIGW_TLS_KEY");
  app.add_option("--tls-client-ca", f->tls_client_ca,
                 "CA bundle for client certificates (mutual TLS)")
      ->envname("ISCSIGW_TLS_CLIENT_CA");
  app.add_flag("--grpc-insecure", f->grpc_insecure,
               "Serve the admin API off loopback without client certificates (anyone who reaches "
               "the port can create, change and delete targets and read CHAP settings)")
      ->envname("ISCSIGW_GRPC_INSECURE");
  app.add_option("--chap-digests", f->chap_digests,
                 "CHAP digests initiators may choose, comma-separated: SHA-256, SHA3-256, SHA-1, "
                 "MD5 (leave out the weak ones to refuse them)")
      ->envname("ISCSIGW_CHAP_DIGESTS");
  app.add_option("--nop-interval", f->nop_interval_s, "Seconds of idle time before a NOP-In ping")
      ->envname("ISCSIGW_NOP_INTERVAL")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--nop-timeout", f->nop_timeout_s,
                 "Seconds a ping may go unanswered before the connection is dropped")
      ->envname("ISCSIGW_NOP_TIMEOUT")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--login-timeout", f->login_timeout_s,
                 "Seconds a connection may take from accept to full feature phase")
      ->envname("ISCSIGW_LOGIN_TIMEOUT")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--max-connections", f->max_connections,
                 "Connections at once; when full, the oldest still logging in, then the oldest "
                 "discovery session, makes room")
      ->envname("ISCSIGW_MAX_CONNECTIONS")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--max-connections-per-source", f->max_connections_per_source,
                 "Connections from one address (IPv6: one /64) at once; when full, its oldest "
                 "still logging in, then its oldest discovery session, makes room")
      ->envname("ISCSIGW_MAX_CONNECTIONS_PER_SOURCE")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--max-discovery-sessions", f->max_discovery_sessions,
                 "Discovery sessions at once; more are refused (Out of resources)")
      ->envname("ISCSIGW_MAX_DISCOVERY_SESSIONS")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--discovery-idle-timeout", f->discovery_idle_timeout_s,
                 "Seconds a discovery session may go without a Text request before it is closed")
      ->envname("ISCSIGW_DISCOVERY_IDLE_TIMEOUT")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--max-targets", f->max_targets, "Targets the gateway accepts")
      ->envname("ISCSIGW_MAX_TARGETS")
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--max-luns-per-target", f->max_luns_per_target,
                 "LUNs one target accepts (LUN ids are 0..255)")
      ->envname("ISCSIGW_MAX_LUNS_PER_TARGET")
      ->check(CLI::Range(1u, state::kMaxLunsPerTargetCeiling));
  app.add_option("--max-acl-entries", f->max_acl_entries, "ACL entries one target accepts")
      ->envname("ISCSIGW_MAX_ACL_ENTRIES")
      ->check(CLI::Range(1u, 4096u));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (int rc = CheckFlags(*f); rc >= 0) return rc;
  if (f->portals.empty()) f->portals.push_back("0.0.0.0:3260");
  return -1;
}

bool IsLocalOnlyListen(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0 || listen.rfind("unix-abstract:", 0) == 0) return true;
  const auto colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

}  // namespace iscsigw::server
