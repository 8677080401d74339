// csi.v1.Controller for iscsigw-csi: volumes are LUNs on an iscsigw gateway, managed through its
// gRPC API (iscsigw.v1.GatewayService) over the channel the service is given. The controller
// never touches a node; what a node needs to log in (portals, target IQN, LUN, CHAP) travels to it
// in the volume context and the publish context.
//
// Runs once per cluster (the provisioner pod, --mode controller or all). The gateway is the
// source of truth: the service keeps no state of its own beyond the stub, so a restarted
// controller carries on where the last one stopped.
//
// Handlers run on gRPC threads and must not block them on the gateway: call it with the async
// stub and finish from its callback. Errors cross the edge as grpc::Status, never as exceptions.
// Until an RPC is overridden here, gRPC answers it UNIMPLEMENTED.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <memory>
#include <string>

#include "csi/v1/csi.grpc.pb.h"
#include "iscsigw/v1/gateway.grpc.pb.h"

namespace iscsigw::csi {

struct ControllerOptions {
  // Deadline of each call to the gateway.
  std::chrono::milliseconds gateway_timeout{10'000};
};

class ControllerService final : public ::csi::v1::Controller::CallbackService {
 public:
  // `gateway`: a channel to the gateway's gRPC API (TLS or not, see csi/gateway_channel.h).
  ControllerService(std::shared_ptr<grpc::Channel> gateway, ControllerOptions options);

 private:
  const ControllerOptions options_;
  const std::shared_ptr<iscsigw::v1::GatewayService::Stub> gateway_;
};

}  // namespace iscsigw::csi
