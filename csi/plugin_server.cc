#include "csi/plugin_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace iscsigw::csi {

std::string Endpoint::ToString() const {
  return (kind == Kind::kUnix ? "unix://" : "tcp://") + address;
}

Result<Endpoint> ParseEndpoint(std::string_view endpoint) {
  const std::string quoted = "--endpoint " + std::string(endpoint);
  Endpoint e;
  if (endpoint.starts_with("unix://")) {
    e.kind = Endpoint::Kind::kUnix;
    e.address = endpoint.substr(7);
  } else if (endpoint.starts_with("unix:")) {
    e.kind = Endpoint::Kind::kUnix;
    e.address = endpoint.substr(5);
  } else if (endpoint.starts_with("tcp://")) {
    e.kind = Endpoint::Kind::kTcp;
    e.address = endpoint.substr(6);
  } else {
    return InvalidArgument(quoted + ": expected unix:///PATH or tcp://HOST:PORT");
  }
  if (e.kind == Endpoint::Kind::kUnix) {
    if (e.address.empty() || e.address[0] != '/') {
      return InvalidArgument(quoted + ": the socket path must be absolute (unix:///PATH)");
    }
    if (e.address.size() >= sizeof(sockaddr_un::sun_path)) {
      return InvalidArgument(quoted + ": the socket path is longer than " +
                             std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
    }
  } else {
    const auto colon = e.address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == e.address.size() ||
        e.address.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      return InvalidArgument(quoted + ": expected tcp://HOST:PORT");
    }
  }
  return e;
}

Status RemoveStaleSocket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return FailedPrecondition(path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPrecondition(path + ": exists and is not a socket; not removing it");
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return FailedPrecondition(std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size(), sizeof(addr.sun_path) - 1));
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  if (live) return FailedPrecondition(path + ": another process is listening on this socket");
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return FailedPrecondition(path + ": cannot remove the stale socket: " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<std::unique_ptr<PluginServer>> PluginServer::Start(
    const Endpoint& endpoint, std::vector<std::unique_ptr<grpc::Service>> services) {
  std::string listen;
  if (endpoint.kind == Endpoint::Kind::kUnix) {
    if (Status s = RemoveStaleSocket(endpoint.address); !s.ok()) {
      return Status(s.code(), "--endpoint " + endpoint.ToString() + ": " + s.message());
    }
    listen = "unix:" + endpoint.address;
  } else {
    listen = endpoint.address;
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<PluginServer> ps(new PluginServer());
  ps->services_ = std::move(services);
  grpc::ServerBuilder builder;
  int port = 0;
  // CSI runs without transport security: the unix socket's file permissions guard it.
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(),
                           endpoint.kind == Endpoint::Kind::kTcp ? &port : nullptr);
  for (auto& s : ps->services_) builder.RegisterService(s.get());
  ps->server_ = builder.BuildAndStart();
  if (!ps->server_ || (endpoint.kind == Endpoint::Kind::kTcp && port == 0)) {
    ps->server_.reset();  // nothing to shut down; the services go with ps
    return Status(StatusCode::kUnavailable, "--endpoint " + endpoint.ToString() + ": cannot bind");
  }
  ps->endpoint_ = endpoint;
  if (endpoint.kind == Endpoint::Kind::kTcp) {
    ps->endpoint_.address =
        endpoint.address.substr(0, endpoint.address.rfind(':')) + ":" + std::to_string(port);
  }
  return ps;
}

PluginServer::~PluginServer() { Shutdown(); }

void PluginServer::Shutdown(std::chrono::milliseconds grace) {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_.reset();
  services_.clear();
  if (endpoint_.kind == Endpoint::Kind::kUnix) (void)::unlink(endpoint_.address.c_str());
}

}  // namespace iscsigw::csi
