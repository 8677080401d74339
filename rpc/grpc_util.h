// What the gRPC servers and clients of the project share (the control plane's GatewayService and
// the CSI driver): the one mapping from Status codes to gRPC codes, and PEM
// files read for TLS. Sits above dataplane/base only; any thread.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "dataplane/base/status.h"

namespace iscsigw::rpc {

// kIoError and kInternal are INTERNAL; the others have a gRPC code of the same name.
grpc::StatusCode ToGrpcCode(StatusCode code);

// A PEM file for a TLS flag: INVALID_ARGUMENT naming the flag and the path when it cannot be
// read or is empty.
Result<std::string> ReadPemFile(const std::string& path, const std::string& flag);

}  // namespace iscsigw::rpc
