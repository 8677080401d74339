// The one mapping from the gateway's Status to grpc::Status (STYLE.md errors). Any thread.
#pragma once

#include <grpcpp/support/status.h>

#include "dataplane/base/status.h"

namespace iscsigw::service {

grpc::Status ToGrpcStatus(const Status& status);

}  // namespace iscsigw::service
