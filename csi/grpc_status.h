// The CSI driver's one mapping from Status to grpc::Status; any thread. The
// codes CSI gives a meaning to that Status has no name for (ABORTED, DEADLINE_EXCEEDED) are
// made as grpc::Status where they arise.
#pragma once

#include <grpcpp/support/status.h>

#include "dataplane/base/status.h"

namespace iscsigw::csi {

grpc::Status ToGrpcStatus(const Status& status);

}  // namespace iscsigw::csi
