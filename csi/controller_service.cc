#include "csi/controller_service.h"

namespace iscsigw::csi {

ControllerService::ControllerService(std::shared_ptr<grpc::Channel> gateway,
                                     ControllerOptions options)
    : options_(std::move(options)),
      gateway_(iscsigw::v1::GatewayService::NewStub(std::move(gateway))) {}

}  // namespace iscsigw::csi
