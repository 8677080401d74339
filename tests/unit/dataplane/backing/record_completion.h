// Test helpers for the stores: an IoCompletion that records how often it ran, with which error and
// on which thread; and the byte pattern the store tests write and read back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "dataplane/backing/backing_store.h"

namespace iscsigw::backing {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Result {
  int calls = 0;
  int err = -1;
  std::thread::id thread;
};

inline IoCompletion Record(Result* r) {
  return IoCompletion{[](void* ctx, int err) {
                        auto* res = static_cast<Result*>(ctx);
                        ++res->calls;
                        res->err = err;
                        res->thread = std::this_thread::get_id();
                      },
                      r};
}

// n bytes that differ from one block to the next and from one seed to another.
inline std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 12));
  return v;
}

}  // namespace iscsigw::backing
