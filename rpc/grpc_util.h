// What the gRPC servers and clients of the project share (the control plane's GatewayService and
// the CSI driver): the mapping from Status codes to gRPC codes (the gateway API's messages are
// escaped on top of it: controlplane/service/status_map.h), and PEM files read for TLS. Sits
// above base only; any thread.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "base/status.h"

namespace iscsigw::rpc {

// kIoError and kInternal are INTERNAL; the others have a gRPC code of the same name.
grpc::StatusCode ToGrpcCode(StatusCode code);
// The Status as a grpc::Status, its message as it is. The codes CSI gives a meaning to that
// Status has no name for (ABORTED, DEADLINE_EXCEEDED) are made as grpc::Status where they arise.
grpc::Status ToGrpcStatus(const Status& status);

// A PEM file for a TLS flag: INVALID_ARGUMENT naming the flag and the path when it cannot be
// read or is empty.
Result<std::string> ReadPemFile(const std::string& path, const std::string& flag);

}  // namespace iscsigw::rpc
