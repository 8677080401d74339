// The control plane's gRPC server: GatewayService, grpc.health.v1.Health and server reflection on
// one listening address, plaintext (loopback by default) or TLS / mutual TLS from PEM files.
// Built and owned by iscsigwd; Shutdown() before the data plane stops.
//
// Health (controlplane/service/health.h says what each service name means): two threads of this
// object probe every health_interval, one the reactors (Health/Check "iscsigw.liveness"), the
// other the state directory and the shared configuration ("iscsigw.readiness", "" and
// iscsigw.v1.GatewayService), so that a probe of the storage that hangs never holds up liveness.
// The readiness names answer NOT_SERVING until the first readiness check decides, and the
// liveness thread turns them NOT_SERVING when a readiness probe hangs (ReadinessProbeLimit).
// Each change of an answer is logged once, with its reason.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/server.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "controlplane/service/gateway_service.h"

namespace iscsigw::service {

// The largest request the server accepts; a larger one is answered RESOURCE_EXHAUSTED by gRPC
// before it is parsed. 4 MiB holds the largest legitimate request, a CreateTarget naming the most
// ACL entries a target may have (controlplane/state/limits.h); it is also the default receive
// limit of gRPC clients, so the largest response (one such target) reaches them too.
inline constexpr int kMaxRequestBytes = 4 << 20;
// Calls in flight on one client connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); a client
// that opens more waits for a slot.
inline constexpr int kMaxConcurrentStreams = 256;

struct TlsOptions {
  std::string cert_file;       // server certificate chain (PEM); empty: plaintext
  std::string key_file;        // private key (PEM)
  std::string client_ca_file;  // set: clients must present a certificate signed by this CA
};

class ControlServer {
 public:
  // Binds `listen` ("host:port", port 0 picks one). Errors name the address or the file.
  static Result<std::unique_ptr<ControlServer>> Start(const std::string& listen,
                                                      const TlsOptions& tls,
                                                      std::unique_ptr<GatewayServiceImpl> service);
  ~ControlServer();

  // "host:port" with the bound port.
  const std::string& address() const { return address_; }
  // A channel to this server that bypasses the network (tests, in-process clients).
  std::shared_ptr<grpc::Channel> InProcessChannel();
  // Stops accepting calls and waits (bounded) for running ones. Idempotent.
  void Shutdown();

 private:
  ControlServer() = default;
  // Runs `probe` every health_interval until Shutdown.
  void ProbeLoop(const std::function<void()>& probe);
  // started: false for the first check, before the server is handed out.
  void CheckReadiness(bool started = true);
  // Also turns readiness NOT_SERVING when its probe hangs.
  void CheckLiveness();
  void CheckReadinessProbe();

  std::unique_ptr<GatewayServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::mutex health_mu_;
  std::condition_variable health_cv_;
  bool health_stop_ = false;  // guarded by health_mu_
  // steady_clock ticks when the readiness probe under way started, 0 when none is: set by the
  // readiness thread, read by the liveness thread.
  std::atomic<int64_t> readiness_probe_since_{0};
  std::mutex ready_mu_;      // orders the two threads' readiness answers
  bool ready_ = false;       // guarded by ready_mu_: what the readiness names answer
  bool probe_hung_ = false;  // guarded by ready_mu_: the liveness thread turned them
  bool live_ = true;         // the liveness thread's
  std::thread readiness_thread_;
  std::thread liveness_thread_;
};

}  // namespace iscsigw::service
