#include "controlplane/service/status_map.h"

#include "controlplane/state/text_check.h"
#include "rpc/grpc_util.h"

namespace iscsigw::service {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // Validators echo what the client sent ("character '\xe2' is not allowed"): the message a
  // client reads is well-formed UTF-8 without control characters whatever that was.
  return grpc::Status(rpc::ToGrpcCode(status.code()), state::EscapeText(status.message()));
}

}  // namespace iscsigw::service
