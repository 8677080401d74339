#include "csi/readiness.h"

#include <grpcpp/client_context.h>

#include "iscsigw/v1/gateway.grpc.pb.h"

namespace iscsigw::csi {
namespace {

std::string CodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const auto i = static_cast<size_t>(code);
  return i < std::size(kNames) ? kNames[i] : std::to_string(i);
}

class GatewayCheck final : public ReadinessCheck {
 public:
  GatewayCheck(std::shared_ptr<grpc::Channel> channel, std::string name)
      : stub_(iscsigw::v1::GatewayService::NewStub(std::move(channel))), name_(std::move(name)) {}

  std::string Name() const override { return "gateway " + name_; }

  void Check(std::chrono::system_clock::time_point deadline, Done done) override {
    // One call's state, freed by its completion; the stub is shared so that a call still in
    // flight keeps it alive.
    struct Call {
      std::shared_ptr<iscsigw::v1::GatewayService::Stub> stub;
      grpc::ClientContext ctx;
      iscsigw::v1::GetGatewayInfoRequest req;
      iscsigw::v1::GatewayInfo resp;
    };
    auto* call = new Call;
    call->stub = stub_;
    call->ctx.set_deadline(deadline);
    call->stub->async()->GetGatewayInfo(
        &call->ctx, &call->req, &call->resp,
        [call, done = std::move(done), name = Name()](grpc::Status s) {
          std::unique_ptr<Call> owned(call);
          if (s.ok()) {
            done(Status::Ok());
          } else {
            done(Status(
                StatusCode::kUnavailable,
                name + ": GetGatewayInfo: " + CodeName(s.error_code()) + " " + s.error_message()));
          }
        });
  }

 private:
  const std::shared_ptr<iscsigw::v1::GatewayService::Stub> stub_;
  const std::string name_;
};

}  // namespace

std::unique_ptr<ReadinessCheck> MakeGatewayCheck(std::shared_ptr<grpc::Channel> gateway,
                                                 std::string gateway_name) {
  return std::make_unique<GatewayCheck>(std::move(gateway), std::move(gateway_name));
}

HostCommandCheck::HostCommandCheck(std::shared_ptr<HostExec> exec, std::vector<std::string> argv)
    : exec_(std::move(exec)), argv_(std::move(argv)), worker_([this] { Loop(); }) {}

HostCommandCheck::~HostCommandCheck() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::string HostCommandCheck::Name() const {
  std::string name = "host command";
  for (const auto& a : argv_) name += " " + a;
  return name;
}

void HostCommandCheck::Check(std::chrono::system_clock::time_point deadline, Done done) {
  {
    std::lock_guard lock(mu_);
    if (!stop_) {
      if (waiting_.empty() || deadline > deadline_) deadline_ = deadline;
      waiting_.push_back(std::move(done));
      cv_.notify_one();
      return;
    }
  }
  done(Status(StatusCode::kUnavailable, Name() + ": shutting down"));
}

void HostCommandCheck::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !waiting_.empty(); });
    std::vector<Done> batch;
    batch.swap(waiting_);
    if (stop_) {
      lock.unlock();
      for (auto& d : batch) d(Status(StatusCode::kUnavailable, Name() + ": shutting down"));
      return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::system_clock::now());
    lock.unlock();
    Status s;
    if (left.count() <= 0) {
      s = Status(StatusCode::kUnavailable, Name() + ": no time left before the deadline");
    } else {
      ExecOptions opts;
      opts.timeout = left;
      auto r = exec_->Run(argv_, opts);
      if (!r.ok()) {
        s = r.status();
      } else if (!r.value().ok()) {
        s = Status(StatusCode::kUnavailable, Name() + ": " + r.value().Describe());
      }
    }
    for (auto& d : batch) d(s);
    lock.lock();
  }
}

}  // namespace iscsigw::csi
