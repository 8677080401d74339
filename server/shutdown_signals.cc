#include "server/shutdown_signals.h"

#include <pthread.h>

namespace iscsigw::server {

ShutdownSignals::ShutdownSignals() {
  sigemptyset(&sigs_);
  sigaddset(&sigs_, SIGINT);
  sigaddset(&sigs_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs_, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

const char* ShutdownSignals::Wait() {
  int sig = 0;
  sigwait(&sigs_, &sig);
  return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

}  // namespace iscsigw::server
