// Test helper: an IoCompletion that records how often it ran and with which error, for store
// calls that complete inline or that the test completes itself.
#pragma once

#include <cstdint>

#include "dataplane/backing/backing_store.h"

namespace iscsigw::backing {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Result {
  int calls = 0;
  int err = -1;
};

inline IoCompletion Record(Result* r) {
  return IoCompletion{[](void* ctx, int err) {
                        auto* res = static_cast<Result*>(ctx);
                        ++res->calls;
                        res->err = err;
                      },
                      r};
}

}  // namespace iscsigw::backing
