// PendingSteps: what the process is blocked on while it stops (a LUN's flush, an rbd image's
// close that talks to the cluster), so that a bounded shutdown (server/shutdown_bound.h) can say
// what it gave up waiting for. A PendingStep names one step for its lifetime. Any thread; a mutex
// and a small list: for the few blocking steps of a shutdown, never the per-I/O path.
#pragma once

#include <string>
#include <vector>

namespace iscsigw {

class PendingStep {
 public:
  explicit PendingStep(std::string what);
  ~PendingStep();
  PendingStep(const PendingStep&) = delete;
  PendingStep& operator=(const PendingStep&) = delete;

  // The steps under way now, oldest first.
  static std::vector<std::string> List();

 private:
  unsigned long long id_;
};

}  // namespace iscsigw
