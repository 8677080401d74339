#include "dataplane/runtime/file_ring.h"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "base/status.h"
#include "dataplane/runtime/event_fd.h"
#include "dataplane/runtime/stats.h"

namespace iscsigw::runtime {

boost::asio::execution_context::id FileRing::id;

namespace {
// Completions handled per wake-up before the reactor turns to its sockets again.
constexpr unsigned kReapBatch = 4 * FileRing::kEntries;

// Where an io_context's owner leaves the region it offers until the ring is set up.
class FixedOffer final : public boost::asio::execution_context::service {
 public:
  static boost::asio::execution_context::id id;
  explicit FixedOffer(boost::asio::io_context& ioc) : service(ioc) {}
  std::span<uint8_t> region;

 private:
  void shutdown() override {}
};
boost::asio::execution_context::id FixedOffer::id;

// One warning per process: every reactor meets the same limit.
std::atomic<bool> fixed_warned{false};

// io_uring refused: recorded for monitoring, and said once per process (every reactor's ring and
// the start-up probe meet the same refusal).
std::atomic<int> io_uring_enabled{-1};
std::atomic<uint64_t> io_uring_fallbacks{0};
std::atomic<bool> refusal_logged{false};
void NoteRefused(const std::string& why) {
  io_uring_enabled.store(0, std::memory_order_relaxed);
  if (refusal_logged.exchange(true)) return;
  log::Backing().warn(
      "io_uring refused ({}): file LUNs run their reads and writes on a fallback thread pool, "
      "at a fraction of the speed; allow io_uring_setup, io_uring_enter and io_uring_register "
      "(seccomp profile, kernel.io_uring_disabled) for full speed (docs/running.md)",
      why);
}

// "io_uring_setup: Operation not permitted (EPERM)".
std::string CallErrorText(const char* call, int err) {
  std::string text = std::string(call) + ": " + ErrnoText(err);
  if (const char* name = ::strerrorname_np(err)) text += std::string(" (") + name + ")";
  return text;
}

// Why io_uring cannot serve this process, or empty when it can. `ring` is set up (and left to the
// caller) when the setup call succeeded.
std::string SetUp(io_uring* ring, bool* ring_ok) {
  *ring_ok = false;
  if (const char* off = std::getenv("ISCSIGW_DISABLE_IO_URING"); off && *off && *off != '0') {
    return "io_uring disabled by ISCSIGW_DISABLE_IO_URING";
  }
  io_uring_params params{};
  // Room for the completions of several full submission queues before the kernel has to queue
  // overflow.
  params.flags = IORING_SETUP_CQSIZE;
  params.cq_entries = 4 * FileRing::kEntries;
  if (int rc = io_uring_queue_init_params(FileRing::kEntries, ring, &params); rc < 0) {
    return CallErrorText("io_uring_setup", -rc);
  }
  *ring_ok = true;
  if (!(params.features & IORING_FEAT_NODROP)) {
    return "io_uring: this kernel may drop completions (no IORING_FEAT_NODROP; Linux 5.5+)";
  }
  return {};
}

std::string MiB(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string MemlockText() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return "unknown";
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(rl.rlim_cur >> 10) + " KiB";
}
}  // namespace

FileRing& FileRing::For(boost::asio::io_context& ioc) {
  return boost::asio::use_service<FileRing>(ioc);
}

void FileRing::OfferFixedBuffers(boost::asio::io_context& ioc, std::span<uint8_t> region) {
  boost::asio::use_service<FixedOffer>(ioc).region = region;
}

void FileRing::UseFixedBuffers() {
  if (!error_.empty() || fixed_count_ > 0 || !fixed_error_.empty()) return;
  if (boost::asio::has_service<FixedOffer>(ioc_)) {
    RegisterFixed(boost::asio::use_service<FixedOffer>(ioc_).region);
  }
}

size_t FileRing::fixed_bytes() const {
  size_t n = 0;
  for (unsigned i = 0; i < fixed_count_; ++i) n += fixed_[i].len;
  return n;
}

void FileRing::RegisterFixed(std::span<uint8_t> region) {
  if (region.empty() || fixed_count_ > 0) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t offered = std::min(region.size(), kMaxFixedBuffer * kMaxFixedBuffers);
  size_t len = offered - offered % page;
  int rc = 0;
  for (;;) {
    iovec iov[kMaxFixedBuffers];
    unsigned n = 0;
    for (size_t at = 0; at < len; at += kMaxFixedBuffer) {
      iov[n++] = iovec{region.data() + at, std::min(kMaxFixedBuffer, len - at)};
    }
    rc = io_uring_register_buffers(&ring_, iov, n);
    if (rc == 0) {
      for (unsigned i = 0; i < n; ++i) {
        fixed_[i] = Fixed{reinterpret_cast<uintptr_t>(iov[i].iov_base), iov[i].iov_len};
      }
      fixed_count_ = n;
      break;
    }
    // ENOMEM: the pages would exceed RLIMIT_MEMLOCK (without CAP_IPC_LOCK). A front part may fit,
    // and the pool hands out the front of its arena first.
    const size_t half = len / 2 - (len / 2) % page;
    if (rc != -ENOMEM || half < kMinFixedBytes) break;
    len = half;
  }
  if (len == offered && rc == 0) return;
  const std::string why = rc == 0 ? "RLIMIT_MEMLOCK " + MemlockText()
                                  : ErrnoText(-rc) + ", RLIMIT_MEMLOCK " + MemlockText();
  fixed_error_ = rc == 0 ? "registered " + MiB(len) + " of " + MiB(offered) + " (" + why + ")"
                         : "registering " + MiB(offered) + " failed (" + why + ")";
  if (!fixed_warned.exchange(true, std::memory_order_relaxed)) {
    log::Backing().warn(
        "io_uring fixed buffers: {}; file reads and writes outside them pin their buffers on every "
        "I/O. Raise the memlock limit (ulimit -l) or grant CAP_IPC_LOCK for full speed",
        fixed_error_);
  } else {
    log::Backing().debug("io_uring fixed buffers: {}", fixed_error_);
  }
}

void FileRing::Probe() {
  io_uring ring{};
  bool ring_ok = false;
  const std::string why = SetUp(&ring, &ring_ok);
  if (ring_ok) io_uring_queue_exit(&ring);
  if (why.empty()) {
    // A reactor's ring refused earlier keeps the answer at 0.
    int unknown = -1;
    io_uring_enabled.compare_exchange_strong(unknown, 1, std::memory_order_relaxed);
  } else {
    NoteRefused(why);
  }
}

int FileRing::Enabled() { return io_uring_enabled.load(std::memory_order_relaxed); }
uint64_t FileRing::Fallbacks() { return io_uring_fallbacks.load(std::memory_order_relaxed); }
void FileRing::CountFallback() { io_uring_fallbacks.fetch_add(1, std::memory_order_relaxed); }

FileRing::FileRing(boost::asio::io_context& ioc)
    : boost::asio::execution_context::service(ioc), ioc_(ioc), event_(ioc) {
  struct Refusal {
    FileRing* ring;
    ~Refusal() {
      if (!ring->error_.empty()) NoteRefused(ring->error_);
    }
  } refusal{this};
  error_ = SetUp(&ring_, &ring_ok_);
  if (!error_.empty()) return;
  event_fd_ = AssignEventFd(event_, &error_);
  if (event_fd_ < 0) return;
  // Blocking work the kernel hands to its workers (fdatasync, buffered writes that must wait):
  // as many at once as a deep queue of FUA writes needs for their syncs to be committed together.
  // The default is 4 per CPU. Best effort: older kernels keep theirs.
  unsigned workers[2] = {kMaxBlockingWorkers, 0};  // bounded, unbounded (0: unchanged)
  (void)io_uring_register_iowq_max_workers(&ring_, workers);
  if (int rc = io_uring_register_eventfd(&ring_, event_fd_); rc < 0) {
    error_ = CallErrorText("io_uring_register_eventfd", -rc);
    return;
  }
}

FileRing::~FileRing() {
  if (ring_ok_) io_uring_queue_exit(&ring_);
}

void FileRing::shutdown() {
  shut_down_ = true;
  boost::system::error_code ignored;
  event_.close(ignored);  // the pending wait is cancelled; its handler is destroyed, not run
}

io_uring_sqe* FileRing::Prepare(Op* op) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    Submit();  // the submission queue is full: hand this turn's entries over now
    sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return nullptr;
  }
  // Zeroed, so that no field of an earlier use survives the caller's io_uring_prep_*; those
  // helpers leave user_data alone, so it can be set first.
  std::memset(sqe, 0, sizeof(*sqe));
  io_uring_sqe_set_data(sqe, op);
  ++unsubmitted_;
  ++prepared_;
  if constexpr (io_trace::kEnabled) {
    if (trace_n_ < trace_unsubmitted_.size()) trace_unsubmitted_[trace_n_++] = op;
  }
  if (!armed_) Arm();
  ScheduleSubmit();
  return sqe;
}

void FileRing::ScheduleSubmit() {
  if (submit_scheduled_) return;
  submit_scheduled_ = true;
  boost::asio::post(ioc_, [this] {
    submit_scheduled_ = false;
    Submit();
    // Reads served from the page cache complete inside io_uring_enter: run them now rather than
    // after a trip through the eventfd. Safe here, on a handler of its own, not inside a store
    // call.
    Reap();
  });
}

void FileRing::Submit() {
  if (unsubmitted_ == 0) return;
  const int rc = io_uring_submit(&ring_);
  if (rc >= 0) {
    submitted_ += static_cast<unsigned>(rc);
    unsubmitted_ -= std::min<unsigned>(unsubmitted_, static_cast<unsigned>(rc));
    if constexpr (io_trace::kEnabled) {
      // The kernel takes entries in order: the first rc prepared went.
      const uint64_t now = NowNs();
      const unsigned k = std::min(trace_n_, static_cast<unsigned>(rc));
      for (unsigned i = 0; i < k; ++i) trace_unsubmitted_[i]->submitted_ns = now;
      std::copy(trace_unsubmitted_.begin() + k, trace_unsubmitted_.begin() + trace_n_,
                trace_unsubmitted_.begin());
      trace_n_ -= k;
    }
  }
  // EAGAIN/EBUSY (the kernel is short of memory for requests or overflow): try again next turn.
  if (unsubmitted_ > 0) ScheduleSubmit();
}

// The eventfd is waited on only while operations are in flight: a pending wait is work for the
// io_context, and an idle ring must not keep its reactor from stopping.
void FileRing::Arm() {
  armed_ = true;
  event_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this](const boost::system::error_code&) {
                      armed_ = false;
                      // Cancelled when the ring went idle (or closed at shutdown): nothing to do,
                      // unless operations started again since.
                      if (shut_down_ || in_flight() == 0) return;
                      // Armed again before the completion queue is drained: a completion posted
                      // after the drain signals the eventfd while this wait is queued, so none is
                      // left behind.
                      Arm();
                      Reap();
                    });
}

void FileRing::Reap() {
  uint64_t signals = 0;
  if (event_fd_ >= 0) (void)!::read(event_fd_, &signals, sizeof(signals));
  unsigned n = 0;
  io_uring_cqe* cqe = nullptr;
  while (n < kReapBatch && io_uring_peek_cqe(&ring_, &cqe) == 0) {
    auto* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
    const int32_t res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    ++completed_;
    ++n;
    if constexpr (io_trace::kEnabled) io_trace::current_ring = {op->submitted_ns, NowNs()};
    op->complete(op, res);
    if constexpr (io_trace::kEnabled) io_trace::current_ring = {};
  }
  // More waiting: they signalled before the eventfd was read, so no wake-up will come for them.
  if (n == kReapBatch) {
    boost::asio::post(ioc_, [this] { Reap(); });
  } else if (in_flight() == 0 && armed_) {
    boost::system::error_code ignored;
    event_.cancel(ignored);
  }
}

}  // namespace iscsigw::runtime
