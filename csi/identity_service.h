// csi.v1.Identity for iscsigw-csi: who the plugin is, what it offers, and whether it is ready.
// Every instance serves it, whatever its --mode.
//
//   GetPluginInfo          name kPluginName, vendor_version the build's version.
//   GetPluginCapabilities  CONTROLLER_SERVICE when this process runs the controller; online
//                          volume expansion. No VOLUME_ACCESSIBILITY_CONSTRAINTS: every node
//                          reaches the gateway's portals, so a volume is usable anywhere.
//   Probe                  ready=true when every ReadinessCheck passes by the deadline;
//                          ready=false, with the reasons logged, otherwise. Probe answers OK
//                          either way (CSI spec: ready=false means "not yet", an error means
//                          "restart me"), and nothing thrown crosses the gRPC edge.
//
// The service owns its checks. Handlers run on gRPC threads and never block one: Probe finishes
// from the checks' callbacks. Destroy the service after the server has shut down.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "csi/readiness.h"
#include "csi/v1/csi.grpc.pb.h"

namespace iscsigw::csi {

// The CSI driver name: StorageClass provisioner, CSIDriver object, PV spec.csi.driver.
inline constexpr char kPluginName[] = "iscsi.iscsigw.io";

struct IdentityOptions {
  std::string vendor_version;       // the project version (CMake's PROJECT_VERSION)
  bool controller_service = false;  // this process serves csi.v1.Controller
  // Longest a Probe waits for its checks; a caller's shorter deadline wins.
  std::chrono::milliseconds probe_timeout{3000};
};

class IdentityService final : public ::csi::v1::Identity::CallbackService {
 public:
  IdentityService(IdentityOptions options, std::vector<std::unique_ptr<ReadinessCheck>> checks);

  grpc::ServerUnaryReactor* GetPluginInfo(grpc::CallbackServerContext* ctx,
                                          const ::csi::v1::GetPluginInfoRequest* req,
                                          ::csi::v1::GetPluginInfoResponse* resp) override;
  grpc::ServerUnaryReactor* GetPluginCapabilities(
      grpc::CallbackServerContext* ctx, const ::csi::v1::GetPluginCapabilitiesRequest* req,
      ::csi::v1::GetPluginCapabilitiesResponse* resp) override;
  grpc::ServerUnaryReactor* Probe(grpc::CallbackServerContext* ctx,
                                  const ::csi::v1::ProbeRequest* req,
                                  ::csi::v1::ProbeResponse* resp) override;

 private:
  // Logs a probe's outcome: at warn when it changes (ready to not, or another reason), at debug
  // while it stays the same, so a liveness probe every few seconds does not flood the log.
  void Report(const std::string& reasons);

  const IdentityOptions options_;
  const std::vector<std::unique_ptr<ReadinessCheck>> checks_;
  std::mutex mu_;
  std::string last_reasons_;  // protected by mu_; empty: ready
  bool reported_ = false;     // protected by mu_
};

}  // namespace iscsigw::csi
