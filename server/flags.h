// iscsigwd's command line (its contract: docs/reference/flags.md, which
// tests/docs/check_reference.py keeps complete): every flag also settable through an ISCSIGW_*
// environment variable, for containers. Parsing only; main wires.
#pragma once

#include <string>
#include <vector>

#include "controlplane/state/limits.h"

namespace iscsigw::server {

struct Flags {
  std::string state_dir = "/var/lib/iscsigw";
  std::vector<std::string> portals;
  std::vector<std::string> advertise;  // SendTargets' TargetAddress values; empty: the portal's own
  std::string grpc_listen = "127.0.0.1:50051";
  // Loopback by default: the container image and the manifests, which scrape from other pods, set
  // 0.0.0.0 themselves (docs/security.md).
  std::string metrics_listen = "127.0.0.1:9540";
  bool metrics_counting = true;  // off: hot-path counters stay zero (overhead measurements)
  // lun|target|gateway: per-LUN families kept, summed per target, or summed over the gateway
  // (controlplane/metrics/detail.h).
  std::string metrics_detail = "lun";
  unsigned reactors = 0;
  unsigned gateway_id = 0;  // 0: alone; else one of several gateways on the same rbd images
  std::string bootstrap;
  // POOL or POOL/NAMESPACE: the rbd targets live in the RADOS object iscsigw_config there, shared
  // with the other gateways (controlplane/state/shared_config.h); empty: in the state file.
  std::string shared_config;
  std::string shared_config_conf;       // its cluster's ceph.conf; empty: librados' default
  std::string shared_config_client_id;  // cephx user; empty: admin
  std::string shared_config_keyring;    // keyring path; empty: what the conf says
  std::string lun_dir;
  // Where LUN backings may live besides --lun-dir (docs/security.md): directories and block
  // devices for file LUNs; pools (POOL or POOL/NAMESPACE) for rbd LUNs, with the ceph.conf and
  // keyring files they may use (the first of each is the default). Empty: none.
  std::vector<std::string> backing_allow;
  std::vector<std::string> rbd_allow;
  std::vector<std::string> rbd_conf;
  std::vector<std::string> rbd_keyring;
  unsigned health_interval_ms = 5000;
  // How long a stop (flushing and closing every LUN) may take before the daemon exits non-zero
  // saying what it was blocked on (server/shutdown_bound.h); 0: no bound.
  unsigned shutdown_timeout_s = 60;  // LUN files by relative path and snapshots; empty: none
  std::string log_level = "info";
  std::string log_format = "text";
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // The gRPC listener may be reachable off this host without client certificates: said out loud
  // (docs/security.md), warned about at every start.
  bool grpc_insecure = false;
  // The CHAP digests initiators may choose, strongest first (docs/security.md).
  std::string chap_digests = "SHA-256,SHA3-256,SHA-1,MD5";
  unsigned nop_interval_s = 30;
  unsigned nop_timeout_s = 15;
  unsigned login_timeout_s = 15;
  unsigned max_connections = 1024;
  // docs/security.md, "Connections".
  unsigned max_connections_per_source = 256;
  unsigned max_discovery_sessions = 64;
  unsigned discovery_idle_timeout_s = 30;
  // Control plane limits (controlplane/state/limits.h).
  unsigned max_targets = state::kDefaultMaxTargets;
  unsigned max_luns_per_target = state::kDefaultMaxLunsPerTarget;
  unsigned max_acl_entries = state::kDefaultMaxAclEntriesPerTarget;
};

// Returns -1 to go on, or the exit code: 0 for --help and --version; CLI11's code for a flag it
// cannot parse (an unknown flag, a value out of range); 2 for a usage error found after parsing
// (--shared-config without --gateway-id, a bad --chap-digests or --rbd-allow, --grpc-listen off
// loopback without --tls-client-ca or --grpc-insecure).
int ParseFlags(int argc, char** argv, Flags* flags);

// Whether a --grpc-listen address is reachable from this host only: a unix socket, or a loopback
// host (127.0.0.0/8, ::1, localhost).
bool IsLocalOnlyListen(const std::string& listen);

}  // namespace iscsigw::server
