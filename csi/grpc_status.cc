#include "csi/grpc_status.h"

namespace iscsigw::csi {

grpc::Status ToGrpcStatus(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case StatusCode::kOutOfRange:
      code = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case StatusCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kIoError:
    case StatusCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, status.message());
}

}  // namespace iscsigw::csi
