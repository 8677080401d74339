#include "controlplane/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace iscsigw::service {

namespace {

Result<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return InvalidArgument(flag + " " + path + ": cannot open for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) return InvalidArgument(flag + " " + path + ": empty file");
  return ss.str();
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::Start(
    const std::string& listen, const TlsOptions& tls, std::unique_ptr<GatewayServiceImpl> service) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return InvalidArgument("--tls-cert and --tls-key must be given together");
  }
  if (!tls.client_ca_file.empty() && tls.cert_file.empty()) {
    return InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (tls.cert_file.empty()) {
    creds = grpc::InsecureServerCredentials();
  } else {
    auto cert = ReadPem(tls.cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(tls.key_file, "--tls-key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions opts(
        tls.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!tls.client_ca_file.empty()) {
      auto ca = ReadPem(tls.client_ca_file, "--tls-client-ca");
      if (!ca.ok()) return ca.status();
      opts.pem_root_certs = ca.value();
    }
    opts.pem_key_cert_pairs.push_back({key.value(), cert.value()});
    creds = grpc::SslServerCredentials(opts);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<ControlServer> cs(new ControlServer());
  cs->service_ = std::move(service);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  int port = 0;
  builder.AddListeningPort(listen, creds, &port);
  builder.RegisterService(cs->service_.get());
  cs->server_ = builder.BuildAndStart();
  if (!cs->server_ || port == 0) {
    return Status(StatusCode::kUnavailable, "gRPC listen " + listen + ": cannot bind");
  }
  const auto colon = listen.rfind(':');
  cs->address_ = listen.substr(0, colon) + ":" + std::to_string(port);
  return cs;
}

ControlServer::~ControlServer() { Shutdown(); }

std::shared_ptr<grpc::Channel> ControlServer::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void ControlServer::Shutdown() {
  if (!server_) return;
  service_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_.reset();
  service_.reset();
}

}  // namespace iscsigw::service
