#include "csi/grpc_status.h"

#include "rpc/grpc_util.h"

namespace iscsigw::csi {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(rpc::ToGrpcCode(status.code()), status.message());
}

}  // namespace iscsigw::csi
