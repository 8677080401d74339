// The gateway API's Status as a grpc::Status: rpc::ToGrpcCode's code, the message escaped
// (state::EscapeText) so that it is valid UTF-8 without control characters. Any thread.
#pragma once

#include <grpcpp/support/status.h>

#include "base/status.h"

namespace iscsigw::service {

grpc::Status ToGrpcStatus(const Status& status);

}  // namespace iscsigw::service
