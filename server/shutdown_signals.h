// The shutdown signals of a server's main thread: SIGINT and SIGTERM are blocked from the moment
// this is built (every thread started afterwards inherits the mask, so no reactor or gRPC thread
// ever takes them) and wait for in Wait(); SIGPIPE is ignored, so a peer that goes away is a
// write error, not a dead process. Build it first thing in main, before any thread starts.
#pragma once

#include <signal.h>

namespace iscsigw::server {

class ShutdownSignals {
 public:
  ShutdownSignals();
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // Blocks until SIGINT or SIGTERM arrives; returns its name.
  const char* Wait();

 private:
  sigset_t sigs_;
};

}  // namespace iscsigw::server
