#include "server/ctl/client.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace iscsigw::ctl {
namespace {

const char* CodeName(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "ERROR";
  }
}

}  // namespace

int Fail(int code, const std::string& msg) {
  std::string line = msg;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "iscsigwctl: %s\n", line.c_str());
  return code;
}

int FailRpc(const grpc::Status& s) {
  std::string msg = std::string(CodeName(s.error_code())) + ": " + s.error_message();
  // gRPC's words when the certificate does not name the host dialed, typically 127.0.0.1 inside
  // the gateway pod against a certificate that names the Service.
  if (s.error_message().find("not in peer certificate") != std::string::npos) {
    msg +=
        " (give a name the certificate carries with --tls-server-name or "
        "ISCSIGW_TLS_SERVER_NAME)";
  }
  return Fail(static_cast<int>(s.error_code()), msg);
}

bool ReadFile(const std::string& path, std::string* out, std::string* err) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      *err = "cannot read " + path;
      return false;
    }
    ss << in.rdbuf();
  }
  *out = ss.str();
  // A secret file usually ends with one newline that is not part of the secret.
  if (!out->empty() && out->back() == '\n') out->pop_back();
  if (!out->empty() && out->back() == '\r') out->pop_back();
  return true;
}

int OpenChannel(const Global& g, std::shared_ptr<grpc::Channel>* out) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  if (g.tls_ca.empty() && g.tls_cert.empty()) {
    if (!g.tls_server_name.empty()) {
      return Fail(kExitUsage, "--tls-server-name needs TLS (--tls-ca or --tls-cert)");
    }
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions opts;
    std::string err;
    if (!g.tls_ca.empty() && !ReadFile(g.tls_ca, &opts.pem_root_certs, &err)) {
      return Fail(kExitNoInput, err);
    }
    if (!g.tls_cert.empty() && (!ReadFile(g.tls_cert, &opts.pem_cert_chain, &err) ||
                                !ReadFile(g.tls_key, &opts.pem_private_key, &err))) {
      return Fail(kExitNoInput, err);
    }
    creds = grpc::SslCredentials(opts);
    if (!g.tls_server_name.empty()) args.SetSslTargetNameOverride(g.tls_server_name);
  }
  *out = grpc::CreateCustomChannel(g.server, creds, args);
  return 0;
}

}  // namespace iscsigw::ctl
