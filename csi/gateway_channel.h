// The channel from iscsigw-csi's controller to the gateway's gRPC API (iscsigw.v1): plaintext,
// or TLS / mutual TLS from PEM files (the counterpart of iscsigwd's --tls-cert, --tls-key and
// --tls-client-ca). Made once at start; the channel reconnects by itself for the process's life.
#pragma once

#include <grpcpp/channel.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace iscsigw::csi {

struct GatewayTls {
  std::string ca_file;      // CA bundle that signed the gateway's certificate
  std::string cert_file;    // client certificate chain for mutual TLS (with key_file)
  std::string key_file;     // its private key
  std::string server_name;  // name to verify in the gateway's certificate, if not the host's

  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

// `target` is HOST:PORT. Errors name the flag and the file that could not be used.
Result<std::shared_ptr<grpc::Channel>> MakeGatewayChannel(const std::string& target,
                                                          const GatewayTls& tls);

}  // namespace iscsigw::csi
