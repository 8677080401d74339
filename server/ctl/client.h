// How iscsigwctl reaches the gateway and how it fails. The global flags (Global), the channel they
// describe (OpenChannel: plain, or TLS with an optional client certificate), one call with its
// deadline (Client::Call), and the exit statuses and one-line errors that are part of the CLI's
// contract (docs/reference/cli.md): 0 on success, the gRPC status code on an API error, kExitUsage
// for a usage error, kExitNoInput when a file (a secret, a certificate) cannot be read.
// Single-threaded: the process makes one call, or one call per page of a list.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "iscsigw/v1/gateway.grpc.pb.h"

namespace iscsigw::ctl {

namespace v1 = iscsigw::v1;

inline constexpr int kExitUsage = 64;
inline constexpr int kExitNoInput = 66;

struct Global {
  std::string server = "127.0.0.1:50051";
  std::string output = "table";
  std::string tls_ca, tls_cert, tls_key;
  // The name the server certificate is checked against instead of the host of `server`.
  std::string tls_server_name;
  unsigned timeout_s = 30;
};

// A one-line error on stderr ("iscsigwctl: MSG", newlines folded); returns the exit status `code`.
int Fail(int code, const std::string& msg);
// A failed call: "CODE_NAME: message" on stderr; returns the gRPC status code as the exit status.
int FailRpc(const grpc::Status& s);
// The contents of `path` ("-": stdin) without one trailing newline (or CRLF); false with `*err`
// set when the file cannot be read.
bool ReadFile(const std::string& path, std::string* out, std::string* err);

// The channel to g.server with g's TLS settings into `*out`; 0, or the exit status after the
// error is printed (kExitUsage for --tls-server-name without TLS, kExitNoInput for a PEM file
// that cannot be read).
int OpenChannel(const Global& g, std::shared_ptr<grpc::Channel>* out);

class Client {
 public:
  Client(const Global& g, std::shared_ptr<grpc::Channel> ch)
      : g_(g), stub_(v1::GatewayService::NewStub(ch)) {}

  // One call, with a deadline of g.timeout_s seconds from now.
  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(g_.timeout_s));
    return ((*stub_).*method)(&ctx, req, resp);
  }

  const Global& g_;
  std::unique_ptr<v1::GatewayService::Stub> stub_;
};

}  // namespace iscsigw::ctl
