// The gRPC server of iscsigw-csi: the CSI services this process runs, plus server reflection and
// grpc.health.v1.Health, on the one endpoint kubelet and the sidecars dial.
//
// Endpoints: unix:///path/csi.sock (what kubelet and the sidecars use; a stale socket file left by
// a previous run is removed first, a live one is refused) and tcp://HOST:PORT (tests; port 0
// picks a free one and endpoint() reports it).
//
// Built and owned by iscsigw-csi's main. The server owns the services; Shutdown stops the server
// first and only then destroys them, so no handler or callback outlives what it uses.
#pragma once

#include <grpcpp/impl/codegen/service_type.h>
#include <grpcpp/server.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace iscsigw::csi {

struct Endpoint {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string address;  // kUnix: an absolute socket path; kTcp: HOST:PORT

  // How the endpoint is written on the command line: unix:///path, tcp://host:port.
  std::string ToString() const;
};

// Accepts unix:///abs/path (also unix:/abs/path) and tcp://HOST:PORT; errors name the value.
Result<Endpoint> ParseEndpoint(std::string_view endpoint);

// Makes `path` free for a new listener: nothing there, or a socket nobody listens on (removed).
// Refuses a socket that accepts connections (another instance runs) and anything not a socket.
Status RemoveStaleSocket(const std::string& path);

class PluginServer {
 public:
  // Binds `endpoint` and starts serving `services`. Errors name the endpoint or the file.
  static Result<std::unique_ptr<PluginServer>> Start(
      const Endpoint& endpoint, std::vector<std::unique_ptr<grpc::Service>> services);
  ~PluginServer();

  // The bound endpoint, a tcp port 0 replaced by the chosen port.
  const Endpoint& endpoint() const { return endpoint_; }
  // Stops accepting calls, gives the calls in flight `grace` to finish and then cancels them
  // (a cancelled call's work that has not started is not started: node_service.h), waits for
  // their handlers to return, then destroys the services and removes the unix socket file.
  // Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  PluginServer() = default;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  Endpoint endpoint_;
};

}  // namespace iscsigw::csi
