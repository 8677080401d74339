#include "csi/gateway_channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "rpc/grpc_util.h"

namespace iscsigw::csi {

Result<std::shared_ptr<grpc::Channel>> MakeGatewayChannel(const std::string& target,
                                                          const GatewayTls& tls) {
  if (target.empty()) return InvalidArgument("--gateway: empty address");
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return InvalidArgument("--tls-cert and --tls-key must be given together");
  }
  if (!tls.server_name.empty() && !tls.enabled()) {
    return InvalidArgument("--tls-server-name needs --tls-ca (or --tls-cert and --tls-key)");
  }
  grpc::ChannelArguments args;
  // A gateway that comes up after us (or restarts) is found within seconds, not after gRPC's
  // default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!tls.enabled()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions opts;
    if (!tls.ca_file.empty()) {
      auto ca = rpc::ReadPemFile(tls.ca_file, "--tls-ca");
      if (!ca.ok()) return ca.status();
      opts.pem_root_certs = ca.value();
    }
    if (!tls.cert_file.empty()) {
      auto cert = rpc::ReadPemFile(tls.cert_file, "--tls-cert");
      if (!cert.ok()) return cert.status();
      auto key = rpc::ReadPemFile(tls.key_file, "--tls-key");
      if (!key.ok()) return key.status();
      opts.pem_cert_chain = cert.value();
      opts.pem_private_key = key.value();
    }
    if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
    creds = grpc::SslCredentials(opts);
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

}  // namespace iscsigw::csi
