// iscsigw-csi's command line (its contract: docs/reference/flags.md): every flag also settable
// through an ISCSIGW_CSI_* environment variable, for the pods that run it. Parsing only; main
// wires.
#pragma once

#include <string>
#include <vector>

namespace iscsigw::server {

struct CsiFlags {
  std::string endpoint = "unix:///csi/csi.sock";
  std::string gateway = "127.0.0.1:50051";
  std::string mode = "all";  // controller | node | all
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  std::string node_id;                      // empty: the host's InitiatorName
  std::vector<std::string> node_addresses;  // numeric; reported in the node id
  std::string host_exec = "direct";
  std::string state_dir = "/var/lib/iscsigw-csi";
  std::string log_level = "info";
  std::string log_format = "text";
  unsigned gateway_timeout_s = 10;  // deadline of a call to the gateway
  unsigned copy_timeout_s = 600;    // ... of one that copies data: a clone, a restore, a snapshot
};

// Returns -1 to go on, or the exit code: 0 for --help and --version, CLI11's code for a flag it
// cannot parse.
int ParseCsiFlags(int argc, char** argv, CsiFlags* flags);

}  // namespace iscsigw::server
