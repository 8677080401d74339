// Readiness checks behind the CSI Probe call (csi/identity_service.h): is the part of the plugin
// this process runs able to serve? The controller needs the gateway's API to answer; the node
// needs the host's iscsiadm to run. A check answers through a callback, so Probe never holds a
// gRPC thread while a gateway is slow or a host command hangs.
//
// Threading: Check may be called from any thread, any number of times at once. `done` runs
// exactly once per call, on a thread of the check's choosing (a gRPC completion thread, the
// check's worker), and must not block. A check outlives the server that calls it: destroy it
// after the gRPC server has shut down.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "csi/host_exec.h"

namespace iscsigw::csi {

class ReadinessCheck {
 public:
  using Done = std::function<void(Status)>;
  virtual ~ReadinessCheck() = default;
  // What is checked, for log lines: "gateway 10.0.0.5:50051".
  virtual std::string Name() const = 0;
  // Starts one check that ends by `deadline`; `done` gets OK when ready, else the reason.
  virtual void Check(std::chrono::system_clock::time_point deadline, Done done) = 0;
};

// Ready when the gateway answers iscsigw.v1.GatewayService/GetGatewayInfo by the deadline.
std::unique_ptr<ReadinessCheck> MakeGatewayCheck(std::shared_ptr<grpc::Channel> gateway,
                                                 std::string gateway_name);

// Ready when `argv` (e.g. iscsiadm --version) exits 0 through `exec`. Commands run one at a time
// on the check's own thread; calls that arrive while one runs share its answer.
class HostCommandCheck final : public ReadinessCheck {
 public:
  HostCommandCheck(std::shared_ptr<HostExec> exec, std::vector<std::string> argv);
  ~HostCommandCheck() override;  // answers waiting calls "shutting down", joins the thread

  std::string Name() const override;
  void Check(std::chrono::system_clock::time_point deadline, Done done) override;

 private:
  void Loop();

  const std::shared_ptr<HostExec> exec_;
  const std::vector<std::string> argv_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Protected by mu_.
  std::vector<Done> waiting_;
  std::chrono::system_clock::time_point deadline_;  // the latest among waiting_
  bool stop_ = false;
  std::thread worker_;  // last: started once the members above exist
};

}  // namespace iscsigw::csi
