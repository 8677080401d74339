// OnRelease: a hold that runs a function once its last copy is gone, on whichever thread lets it
// go. For waits that span threads and owners, where each party that must finish first keeps a
// copy (a PREEMPT AND ABORT's answer waiting on the tasks it aborted on every reactor and gateway).
// Never null, so that `if (hold)` tells a hold from none. Allocates: not for the per-I/O path.
#pragma once

#include <functional>
#include <memory>
#include <utility>

namespace iscsigw {

inline std::shared_ptr<void> OnRelease(std::function<void()> fn) {
  struct Hold {
    explicit Hold(std::function<void()> f) : fn(std::move(f)) {}
    ~Hold() {
      if (fn) fn();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    std::function<void()> fn;
  };
  return std::make_shared<Hold>(std::move(fn));
}

}  // namespace iscsigw
