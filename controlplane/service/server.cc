#include "controlplane/service/server.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/server_interceptor.h>

#include <chrono>
#include <utility>

#include "base/log.h"
#include "controlplane/service/health.h"
#include "rpc/grpc_util.h"

namespace iscsigw::service {

namespace {

// The names that answer readiness: its own, and those every gateway answered before it existed
// (the server, "", and the service), kept for the clients that ask them.
constexpr const char* kReadyServices[] = {kReadinessService, "", "iscsigw.v1.GatewayService"};

void SetReady(grpc::HealthCheckServiceInterface* health, bool serving) {
  for (const char* name : kReadyServices) health->SetServingStatus(name, serving);
}

// gRPC answers a request it cannot parse (a proto3 string field that is not UTF-8, a truncated
// field) with UNIMPLEMENTED and no message: the callback API's stand-in for a handler it could
// not run. Every GatewayService method is implemented, so on them that status can only mean a bad
// request, and the client is told so: INVALID_ARGUMENT, the code for every other malformed input.
class UnparsableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status s = methods->GetSendStatus();
      if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED && s.error_message().empty()) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "the request could not be parsed: a string field is not valid UTF-8, or the message "
            "is malformed"));
      }
    }
    methods->Proceed();
  }
};

class UnparsableRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // Only the methods the service has: an unknown name stays UNIMPLEMENTED.
    static const auto* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            iscsigw::v1::GatewayService::service_full_name());
    const std::string prefix = "/" + service->full_name() + "/";
    const std::string method = info->method() ? info->method() : "";
    if (method.rfind(prefix, 0) != 0 ||
        service->FindMethodByName(method.substr(prefix.size())) == nullptr) {
      return nullptr;
    }
    return new UnparsableRequestInterceptor();
  }
};

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::Start(
    const std::string& listen, const TlsOptions& tls, std::unique_ptr<GatewayServiceImpl> service) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return InvalidArgument("--tls-cert and --tls-key must be given together");
  }
  if (!tls.client_ca_file.empty() && tls.cert_file.empty()) {
    return InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (tls.cert_file.empty()) {
    creds = grpc::InsecureServerCredentials();
  } else {
    auto cert = rpc::ReadPemFile(tls.cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = rpc::ReadPemFile(tls.key_file, "--tls-key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions opts(
        tls.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!tls.client_ca_file.empty()) {
      auto ca = rpc::ReadPemFile(tls.client_ca_file, "--tls-client-ca");
      if (!ca.ok()) return ca.status();
      opts.pem_root_certs = ca.value();
    }
    opts.pem_key_cert_pairs.push_back({key.value(), cert.value()});
    creds = grpc::SslServerCredentials(opts);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<ControlServer> cs(new ControlServer());
  cs->service_ = std::move(service);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<UnparsableRequestInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  int port = 0;
  builder.AddListeningPort(listen, creds, &port);
  builder.RegisterService(cs->service_.get());
  cs->server_ = builder.BuildAndStart();
  if (!cs->server_ || port == 0) {
    return Status(StatusCode::kUnavailable, "gRPC listen " + listen + ": cannot bind");
  }
  if (listen.rfind("unix", 0) == 0) {
    cs->address_ = listen;  // a socket path: no port to fill in
  } else {
    const auto colon = listen.rfind(':');
    cs->address_ = listen.substr(0, colon) + ":" + std::to_string(port);
  }
  auto* health = cs->server_->GetHealthCheckService();
  // Not ready until the first check says so (a gateway whose shared configuration is not loaded
  // yet, or whose state directory cannot be written, never answers SERVING on the way).
  SetReady(health, false);
  health->SetServingStatus(kLivenessService, true);
  ControlServer* raw = cs.get();
  // Liveness first: it watches the first readiness probe too. That probe runs here, so the
  // answer is decided by the time the server is handed out.
  raw->liveness_thread_ = std::thread([raw] { raw->ProbeLoop([raw] { raw->CheckLiveness(); }); });
  raw->CheckReadiness(/*started=*/false);
  raw->readiness_thread_ = std::thread([raw] { raw->ProbeLoop([raw] { raw->CheckReadiness(); }); });
  return cs;
}

void ControlServer::ProbeLoop(const std::function<void()>& probe) {
  std::unique_lock lock(health_mu_);
  while (!health_stop_) {
    lock.unlock();
    probe();
    lock.lock();
    health_cv_.wait_for(lock, service_->health_interval(), [this] { return health_stop_; });
  }
}

void ControlServer::CheckReadiness(bool started) {
  // Never 0 (that means no probe under way): the clock's epoch is long past.
  readiness_probe_since_.store(std::chrono::steady_clock::now().time_since_epoch().count());
  const Status ready = Readiness(service_->CheckStateDir(), service_->SharedHealth());
  std::lock_guard lock(ready_mu_);
  readiness_probe_since_.store(0);
  // After a hung probe, its answer replaces the NOT_SERVING the liveness thread set.
  const bool was_hung = std::exchange(probe_hung_, false);
  if (started && !was_hung && ready.ok() == ready_) return;
  ready_ = ready.ok();
  auto* health = server_->GetHealthCheckService();
  SetReady(health, ready_);
  if (ready_) {
    // A start that is ready at once is the usual case, not a change worth a line.
    if (started) log::Ctl().info("health: {} SERVING", kReadinessService);
  } else if (!started) {
    // A start before the shared configuration is read: expected, not an error yet.
    log::Ctl().info("health: {} NOT_SERVING at start: {}", kReadinessService, ready.message());
  } else {
    log::Ctl().error("health: {} NOT_SERVING: {}", kReadinessService, ready.message());
  }
}

void ControlServer::CheckReadinessProbe() {
  const int64_t since = readiness_probe_since_.load();
  if (since == 0) return;
  const auto running = std::chrono::steady_clock::now().time_since_epoch() -
                       std::chrono::steady_clock::duration(since);
  const Status probe = ReadinessProbe(running, service_->health_interval());
  if (probe.ok()) return;
  std::lock_guard lock(ready_mu_);
  // The same probe still under way (it may have ended meanwhile), and not turned yet.
  if (readiness_probe_since_.load() != since || probe_hung_) return;
  probe_hung_ = true;
  ready_ = false;
  auto* health = server_->GetHealthCheckService();
  SetReady(health, false);
  // Liveness stays: a restart does not unhang a state volume (docs/operations.md, "Health and
  // probes").
  log::Ctl().error("health: {} NOT_SERVING: {}", kReadinessService, probe.message());
}

void ControlServer::CheckLiveness() {
  CheckReadinessProbe();
  const Status live = Liveness(service_->UnresponsiveReactors(kReactorAnswerWithin));
  if (live.ok() == live_) return;
  live_ = live.ok();
  server_->GetHealthCheckService()->SetServingStatus(kLivenessService, live_);
  if (live_) {
    log::Ctl().info("health: {} SERVING", kLivenessService);
  } else {
    log::Ctl().error("health: {} NOT_SERVING: {}", kLivenessService, live.message());
  }
}

ControlServer::~ControlServer() { Shutdown(); }

std::shared_ptr<grpc::Channel> ControlServer::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void ControlServer::Shutdown() {
  if (!server_) return;
  {
    std::lock_guard lock(health_mu_);
    health_stop_ = true;
  }
  health_cv_.notify_all();
  if (readiness_thread_.joinable()) readiness_thread_.join();
  if (liveness_thread_.joinable()) liveness_thread_.join();
  service_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_.reset();
  service_.reset();
}

}  // namespace iscsigw::service
