// The one mapping from the gateway's Status to grpc::Status; the message is
// escaped (state::EscapeText) so that it is valid UTF-8 without control characters. Any thread.
#pragma once

#include <grpcpp/support/status.h>

#include "dataplane/base/status.h"

namespace iscsigw::service {

grpc::Status ToGrpcStatus(const Status& status);

}  // namespace iscsigw::service
