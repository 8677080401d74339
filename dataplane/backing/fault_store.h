// FaultStore: a BackingStore for tests that wraps another and makes its calls slow or failing, the
// way a sick disk or a full thin pool does (leveldb's SpecialEnv idea). Configured per LUN:
//   - which calls: reads, writes (Write, WriteAtomic, ReadModifyWrite, CompareAndWrite, Unmap)
//     and/or flushes, optionally only those touching a byte range, after the first `after_ops`
//     of those have gone through, each with a probability, and at most `max_faults` of them;
//   - what happens to them: started `delay` later (so their data lands later too), on the same
//     reactor, without blocking it; and/or failed with an errno (EIO, ENOSPC, EROFS).
// Calls not chosen go straight through.
// A failed call does not reach the wrapped store: a failed write changes nothing.
//
// The data plane accepts a LUN with faults only in a build configured with
// -DISCSIGW_FAULT_INJECTION=ON (the test build); release builds and the container image refuse
// it. The wrapper may allocate per call (a timer per delayed call): it is never on a production
// path. Threading: as BackingStore; the counters are atomics, the random source is per thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/forwarding_store.h"

namespace iscsigw::backing {

struct FaultSpec {
  std::chrono::milliseconds delay{0};
  int error = 0;  // errno for failing calls; 0: none fail
  bool reads = true;
  bool writes = true;
  bool flushes = true;
  uint64_t after_ops = 0;    // matching calls that succeed before failures start
  double probability = 1.0;  // of each matching call failing after that
  // Only calls whose bytes overlap [offset, offset + length) match; length 0: every call. With a
  // range, flushes (which have none) never match.
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t max_faults = 0;  // calls delayed or failed at most; 0: no limit

  bool active() const { return delay.count() > 0 || error != 0; }
  friend bool operator==(const FaultSpec&, const FaultSpec&) = default;
};

// "EIO", "ENOSPC" or "EROFS" -> errno; 0 for anything else.
int FaultErrnoFromName(std::string_view name);

// Runs fn on reactor `slot` after `delay` (a steady timer on that reactor's io_context).
using DeferFn =
    std::function<void(unsigned slot, std::chrono::milliseconds delay, std::function<void()> fn)>;

class FaultStore final : public ForwardingStore {
 public:
  FaultStore(std::shared_ptr<BackingStore> inner, FaultSpec spec, DeferFn defer);

  // inner(): the store it wraps (a live LUN's fault settings change around the same store).
  // What is not overridden below goes straight through (ForwardingStore).

  // Zero-copy reads would bypass the faults: with read faults or a delay every read goes
  // through Read.
  size_t MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) override;

  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override;
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override;
  void Flush(unsigned slot, IoCompletion done) override;
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   IoCompletion done) override;
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override;
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override;
  void CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                       IoCompletion done) override;

  // Calls failed so far.
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  enum class Op : uint8_t { kRead, kWrite, kFlush };
  // Whether this call, on bytes [offset, offset + len) (len 0: a flush), is delayed or failed.
  bool Selected(Op op, uint64_t offset, uint64_t len);
  // Runs `call` now or after the delay; a failing call completes `done` with its errno instead.
  void Run(unsigned slot, Op op, uint64_t offset, uint64_t len, IoCompletion done,
           std::function<void()> call);

  const FaultSpec spec_;
  const DeferFn defer_;
  std::atomic<uint64_t> matching_{0};
  std::atomic<uint64_t> faulted_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace iscsigw::backing
