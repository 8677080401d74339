// Hot-path counters: plain per-reactor shards that a Prometheus collector
// (controlplane/metrics/collectors.h) sums at scrape time.
//
// Ownership and threading. Every shard has exactly one writer: the reactor whose index it sits at
// (task.slot / Connection::reactor_). A writer bumps a counter with a relaxed load and a relaxed
// store (Add below): on x86-64 that compiles to the same plain `add`/`mov` a non-atomic counter
// would, with no lock prefix and no shared cache line between reactors (shards are cache-line
// aligned). The scrape thread reads the same words with relaxed loads; relaxed atomics make that
// read well-defined (no data race, no torn 64-bit value), and a scrape may see one reactor a few
// increments ahead of another, which Prometheus counters tolerate. Nothing here takes a lock or
// allocates per I/O: shard blocks are allocated once, when the reactor pool starts (reactor
// shards) or when a LUN is first used on a target (LUN shards), under Stats::mu_.
//
// Counting can be switched off at run time (SetEnabled(false)) for overhead measurements; the
// switch is a relaxed bool read once per command.
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace iscsigw::runtime {

// Single-writer increment: relaxed load + relaxed store, no read-modify-write instruction.
inline void Add(std::atomic<uint64_t>& c, uint64_t v) {
  c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}
inline uint64_t Get(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }

// SCSI command classes (label `class`).
enum class CmdClass : uint8_t { kRead = 0, kWrite = 1, kOther = 2 };
inline constexpr size_t kCmdClasses = 3;
inline constexpr std::array<const char*, kCmdClasses> kCmdClassNames = {"read", "write", "other"};

// Classifies a CDB by its operation code (SBC-3 READ/WRITE (6/10/12/16), WRITE AND VERIFY, SBC-4
// WRITE ATOMIC (16)).
constexpr CmdClass ClassifyCdb(uint8_t opcode) {
  switch (opcode) {
    case 0x08:
    case 0x28:
    case 0xa8:
    case 0x88:  // READ (6) (10) (12) (16)
      return CmdClass::kRead;
    case 0x0a:
    case 0x2a:
    case 0xaa:
    case 0x8a:  // WRITE (6) (10) (12) (16)
    case 0x2e:
    case 0x8e:  // WRITE AND VERIFY (10) (16)
    case 0x9c:  // WRITE ATOMIC (16)
      return CmdClass::kWrite;
    default:
      return CmdClass::kOther;
  }
}

// Command latency histogram upper bounds in nanoseconds: 10 us .. 10 s (+Inf is the last bucket).
inline constexpr std::array<uint64_t, 19> kLatencyBoundsNs = {
    10'000,        25'000,        50'000,        100'000,       250'000,
    500'000,       1'000'000,     2'500'000,     5'000'000,     10'000'000,
    25'000'000,    50'000'000,    100'000'000,   250'000'000,   500'000'000,
    1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
inline constexpr size_t kLatencyBuckets = kLatencyBoundsNs.size() + 1;

// Index of the (non-cumulative) bucket that holds `ns`: the first bound >= ns, or the +Inf bucket.
constexpr size_t LatencyBucket(uint64_t ns) {
  size_t i = 0;
  while (i < kLatencyBoundsNs.size() && ns > kLatencyBoundsNs[i]) ++i;
  return i;
}

// Backing store operations (label `op`), timed from the call into the store to its completion.
enum class StoreOp : uint8_t {
  kRead = 0,
  kWrite,
  kFlush,
  kUnmap,
  kReadModifyWrite,
  kCompareAndWrite,
  kWriteAtomic
};
inline constexpr size_t kStoreOps = 7;
inline constexpr std::array<const char*, kStoreOps> kStoreOpNames = {
    "read", "write", "flush", "unmap", "read_modify_write", "compare_and_write", "write_atomic"};

// One reactor's share of one LUN's counters.
struct alignas(64) LunShard {
  std::array<std::atomic<uint64_t>, kCmdClasses> commands{};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> written_bytes{0};
  // Non-cumulative bucket counts; the collector accumulates them.
  std::array<std::array<std::atomic<uint64_t>, kLatencyBuckets>, kCmdClasses> latency{};
  std::array<std::atomic<uint64_t>, kCmdClasses> latency_sum_ns{};
  std::array<std::atomic<uint64_t>, 16> check_conditions{};  // by sense key
  std::atomic<uint64_t> reservation_conflicts{0};
  // CHECK CONDITION with sense key UNIT ATTENTION: a pending unit attention reported (SAM-5 5.14).
  std::atomic<uint64_t> unit_attentions{0};
  // Backing store calls, written by the store's instrumentation on the calling reactor.
  std::array<std::array<std::atomic<uint64_t>, kLatencyBuckets>, kStoreOps> store_latency{};
  std::array<std::atomic<uint64_t>, kStoreOps> store_latency_sum_ns{};
  std::atomic<uint64_t> store_errors{0};

  // Records one finished command. Reactor `slot` only.
  void Record(CmdClass cls, uint64_t bytes, uint64_t latency_ns) {
    const auto c = static_cast<size_t>(cls);
    Add(commands[c], 1);
    if (cls == CmdClass::kRead) Add(read_bytes, bytes);
    if (cls == CmdClass::kWrite) Add(written_bytes, bytes);
    Add(latency[c][LatencyBucket(latency_ns)], 1);
    Add(latency_sum_ns[c], latency_ns);
  }
  // Records one finished backing store call; err is its errno value (0: success). Reactor `slot`
  // only.
  void RecordStoreIo(StoreOp op, uint64_t latency_ns, int err) {
    const auto o = static_cast<size_t>(op);
    Add(store_latency[o][LatencyBucket(latency_ns)], 1);
    Add(store_latency_sum_ns[o], latency_ns);
    if (err != 0) Add(store_errors, 1);
  }
};

// Per-LUN counter block: one shard per reactor, indexed by task.slot.
class LunStats {
 public:
  LunStats(std::string target, uint64_t lun, unsigned reactors)
      : target_(std::move(target)), lun_(lun), n_(reactors), shards_(new LunShard[reactors]) {}
  const std::string& target() const { return target_; }
  uint64_t lun() const { return lun_; }
  unsigned shards() const { return n_; }
  // Null for a reactor index beyond the count the block was sized for.
  LunShard* shard(unsigned slot) { return slot < n_ ? &shards_[slot] : nullptr; }
  const LunShard& shard_at(unsigned i) const { return shards_[i]; }

 private:
  const std::string target_;
  const uint64_t lun_;
  const unsigned n_;
  const std::unique_ptr<LunShard[]> shards_;
};

// Login outcomes (label `result`), from the RFC 7143 11.13.5 status of the final Login Response.
enum class LoginResult : uint8_t {
  kSuccess = 0,
  kAuthenticationFailure,
  kAuthorizationFailure,
  kTargetNotFound,
  kTooManyConnections,
  kInitiatorError,
  kTargetError,
};
inline constexpr size_t kLoginResults = 7;
inline constexpr std::array<const char*, kLoginResults> kLoginResultNames = {
    "success",          "authentication_failure", "authorization_failure",
    "target_not_found", "too_many_connections",   "initiator_error",
    "target_error"};

// Maps a Login Response status (class << 8 | detail) to its result label.
constexpr LoginResult LoginResultFor(uint16_t status) {
  switch (status) {
    case 0x0000:
      return LoginResult::kSuccess;
    case 0x0201:
      return LoginResult::kAuthenticationFailure;
    case 0x0202:
      return LoginResult::kAuthorizationFailure;
    case 0x0203:
    case 0x0204:
      return LoginResult::kTargetNotFound;
    case 0x0206:
      return LoginResult::kTooManyConnections;
    default:
      return (status >> 8) == 3 ? LoginResult::kTargetError : LoginResult::kInitiatorError;
  }
}

// Task management functions (label `function`): RFC 7143 11.5.1 codes 1..8 at their own index,
// anything else at 0 ("other", answered "Function rejected" or "not supported").
inline constexpr size_t kTmfFunctions = 9;
inline constexpr std::array<const char*, kTmfFunctions> kTmfFunctionNames = {
    "other",          "abort_task",         "abort_task_set",    "clear_aca",
    "clear_task_set", "logical_unit_reset", "target_warm_reset", "target_cold_reset",
    "task_reassign"};
constexpr size_t TmfFunctionIndex(uint8_t function) {
  return function >= 1 && function <= 8 ? function : 0;
}
// Task management responses (label `response`): RFC 7143 11.6.1 codes 0..6 at their own index,
// 255 (Function rejected) at 7.
inline constexpr size_t kTmfResponses = 8;
inline constexpr std::array<const char*, kTmfResponses> kTmfResponseNames = {
    "function_complete",
    "task_does_not_exist",
    "lun_does_not_exist",
    "task_still_allegiant",
    "task_allegiance_reassignment_not_supported",
    "not_supported",
    "authorization_failed",
    "function_rejected"};
constexpr size_t TmfResponseIndex(uint8_t response) { return response <= 6 ? response : 7; }

// One reactor's share of one target's counters.
struct alignas(64) TargetShard {
  std::array<std::array<std::atomic<uint64_t>, kTmfResponses>, kTmfFunctions> tmf{};

  // Records one answered task management request. Reactor `slot` only.
  void Tmf(uint8_t function, uint8_t response) {
    Add(tmf[TmfFunctionIndex(function)][TmfResponseIndex(response)], 1);
  }
};

// Per-target counter block: one shard per reactor.
class TargetStats {
 public:
  TargetStats(std::string target, unsigned reactors)
      : target_(std::move(target)), n_(reactors), shards_(new TargetShard[reactors]) {}
  const std::string& target() const { return target_; }
  unsigned shards() const { return n_; }
  // Null for a reactor index beyond the count the block was sized for.
  TargetShard* shard(unsigned slot) { return slot < n_ ? &shards_[slot] : nullptr; }
  const TargetShard& shard_at(unsigned i) const { return shards_[i]; }

 private:
  const std::string target_;
  const unsigned n_;
  const std::unique_ptr<TargetShard[]> shards_;
};

// iSCSI PDU directions (label `direction`).
inline constexpr std::array<const char*, 2> kDirectionNames = {"rx", "tx"};

// One reactor's process-level counters.
struct alignas(64) ReactorShard {
  // [direction][opcode & 0x3f]
  std::array<std::array<std::atomic<uint64_t>, 64>, 2> pdus{};
  std::array<std::atomic<uint64_t>, kLoginResults> logins{};
  std::atomic<uint64_t> logouts{0};
  std::atomic<uint64_t> r2ts{0};
  std::atomic<uint64_t> rejects{0};
  std::atomic<uint64_t> digest_errors{0};
  std::atomic<uint64_t> nop_timeouts{0};
  std::atomic<uint64_t> connections_opened{0};
  std::atomic<uint64_t> connections_closed{0};

  void Pdu(int dir, uint8_t opcode) { Add(pdus[dir][opcode & 0x3f], 1); }
};

// The process-wide set of shards. Configure/ForLun/Snapshot take mu_ (never per I/O); the shard
// pointers they hand out stay valid for the life of the process (LUN blocks are kept even when
// the LUN is removed, so its counters never go backwards if it comes back).
class Stats {
 public:
  static constexpr unsigned kMaxReactors = 1024;

  static Stats& Global();

  // Allocates shards for reactors [0, reactors). Idempotent; only grows.
  void Configure(unsigned reactors);
  unsigned reactors() const { return reactors_.load(std::memory_order_acquire); }

  // The shard of reactor `slot`, or null if Configure has not covered it. Any thread.
  ReactorShard* reactor(unsigned slot) const {
    return slot < kMaxReactors ? reactor_[slot].load(std::memory_order_acquire) : nullptr;
  }
  // The counter block of (target, lun), created on first use. Any thread; takes mu_.
  LunStats* ForLun(const std::string& target, uint64_t lun);
  // Every LUN block, for the collector. Takes mu_.
  std::vector<const LunStats*> Luns() const;
  // The counter block of a target, created on first use. Any thread; takes mu_.
  TargetStats* ForTarget(const std::string& target);
  // Every target block, for the collector. Takes mu_.
  std::vector<const TargetStats*> Targets() const;

  // The live connection count of reactor i (ReactorPool's own counter), or null.
  void SetConnectionGauge(unsigned i, const std::atomic<int>* gauge) {
    if (i < kMaxReactors) conn_gauge_[i].store(gauge, std::memory_order_release);
  }
  const std::atomic<int>* connection_gauge(unsigned i) const {
    return i < kMaxReactors ? conn_gauge_[i].load(std::memory_order_acquire) : nullptr;
  }

  // The CPU-time clock (pthread_getcpuclockid) of reactor i's thread while it runs. The reactor
  // sets it when its thread starts and clears it before the thread exits; the collector reads the
  // clock at scrape, so busy time costs the reactor nothing.
  void SetReactorClock(unsigned i, clockid_t clock) {
    if (i < kMaxReactors) reactor_clock_[i].store(clock, std::memory_order_release);
  }
  void ClearReactorClock(unsigned i) {
    if (i < kMaxReactors) reactor_clock_[i].store(kNoClock, std::memory_order_release);
  }
  // Seconds of CPU time reactor i's thread has used, or a negative value when it is not running.
  double ReactorCpuSeconds(unsigned i) const;

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void SetEnabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  Stats();
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;
  ~Stats();

 private:
  mutable std::mutex mu_;
  std::array<std::atomic<ReactorShard*>, kMaxReactors> reactor_{};
  std::atomic<unsigned> reactors_{0};
  std::array<std::atomic<const std::atomic<int>*>, kMaxReactors> conn_gauge_{};
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<LunStats>> luns_;  // guarded by mu_
  std::map<std::string, std::unique_ptr<TargetStats>> targets_;                 // guarded by mu_
  static constexpr clockid_t kNoClock = -1;
  std::array<std::atomic<clockid_t>, kMaxReactors> reactor_clock_;
  std::atomic<bool> enabled_{true};
};

// A steady_clock time as NowNs counts it.
inline uint64_t SteadyNs(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

// Monotonic nanoseconds for latency measurement (steady_clock: vDSO, no system call).
inline uint64_t NowNs() { return SteadyNs(std::chrono::steady_clock::now()); }

}  // namespace iscsigw::runtime
