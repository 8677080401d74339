// ShutdownBound: a stop that cannot finish (an rbd image whose cluster does not answer, a flush
// on a dead disk) must not hang the daemon forever. Built before what it guards, armed when the
// stop begins; if it is still armed `seconds` later, it logs what the stop is blocked on
// (PendingStep::List) and ends the process with kExitCode. Destroyed (after everything built
// after it, the data plane and its stores included) it disarms. 0 seconds: no bound.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace iscsigw::server {

class ShutdownBound {
 public:
  static constexpr int kExitCode = 3;

  ShutdownBound() = default;
  ~ShutdownBound();
  ShutdownBound(const ShutdownBound&) = delete;
  ShutdownBound& operator=(const ShutdownBound&) = delete;

  void Arm(unsigned seconds);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace iscsigw::server
