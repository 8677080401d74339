// FileRing: the io_uring of one reactor, through which file stores read, write, sync and
// allocate. It is an Asio service of the reactor's io_context, so every store on that reactor
// shares it and it goes away with the io_context.
//
// Submission: Prepare() hands out a submission queue entry for an Op that the caller owns; the
// entries prepared during one reactor turn reach the kernel together, in one io_uring_enter, at the
// end of that turn (a posted handler), or earlier when the submission queue is full.
// Completion: the ring signals an eventfd that the reactor waits on; the reactor then runs each
// finished Op's `complete` on its own thread. No per-I/O allocation: the Op lives in the caller's
// operation until complete runs, and the posted flush and the eventfd wait reuse Asio's handler
// memory.
//
// Depth: the submission queue holds kEntries; completions are never dropped (the kernel queues
// overflow, IORING_FEAT_NODROP), so in-flight operations are bounded by their callers (each
// session's command window), not by the ring.
//
// The ring keeps its io_context running only while operations are in flight, like any Asio I/O.
//
// Fixed buffers: the reactor's owner offers its BufferPool arena (OfferFixedBuffers) before the
// reactor runs; the ring registers it when the first direct file LUN asks for it
// (UseFixedBuffers), so only reactors that serve a direct LUN pin it. (Through the page cache the
// kernel copies and pins nothing, so fixed buffers save nothing there.) A read or write whose
// buffer lies inside it is submitted as IORING_OP_READ_FIXED / WRITE_FIXED with the buffer's
// index (FixedIndex), which spares the kernel pinning the pages on every I/O; any other buffer
// goes as a plain read or write. Registration is best effort: the kernel charges the pinned pages
// to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK, so where the limit is too low for the
// whole arena the ring registers the largest front part that fits (halving down to
// kMinFixedBytes), and where nothing fits it registers nothing; the first such
// shortfall in the process is logged as a warning, and I/O works either way.
//
// Threading: For(), OfferFixedBuffers() and UseFixedBuffers() from any thread (once per store and
// reactor, before the store serves I/O, and stores are opened one at a time); everything else on
// the reactor thread. An Op in flight must outlive its
// completion: stores are destroyed before their reactors, and an offered region must outlive the
// io_context.
#pragma once

#include <liburing.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "dataplane/runtime/io_trace.h"

namespace iscsigw::runtime {

class FileRing final : public boost::asio::execution_context::service {
 public:
  static constexpr unsigned kEntries = 256;
  static constexpr unsigned kMaxBlockingWorkers = 64;

  struct Op {
    // Runs on the reactor thread with the completion's result: >= 0, or a negative errno value.
    void (*complete)(Op* op, int32_t res) = nullptr;
    uint64_t submitted_ns = 0;  // a tracing build's stamp (io_trace.h)
  };

  // io_uring takes at most 1 GiB per registered buffer: a larger region is registered in pieces,
  // at most kMaxFixedBuffers of them (the rest of the region is used as ordinary memory).
  static constexpr size_t kMaxFixedBuffer = size_t{1} << 30;
  static constexpr unsigned kMaxFixedBuffers = 4;
  // Below this, a registration the memlock limit refuses is not retried with a smaller part.
  static constexpr size_t kMinFixedBytes = size_t{1} << 20;

  // The ring of ioc's reactor, set up on first use.
  static FileRing& For(boost::asio::io_context& ioc);

  // Whether this process may use io_uring, known before any file LUN opens: sets up a ring as a
  // reactor's would and tears it down, and records the answer
  // (Enabled(): the iscsigw_io_uring_enabled metric). A refusal (ENOSYS from the kernel,
  // EPERM from a seccomp filter or kernel.io_uring_disabled, ISCSIGW_DISABLE_IO_URING) is logged
  // once per process, with its errno, whether the probe or a reactor's ring meets it first. The
  // data plane calls it as it starts; any thread.
  static void Probe();
  // 1: file stores submit through io_uring; 0: it was refused (by the probe or a reactor's ring)
  // and the fallback pool serves them; -1: not known (nothing probed yet). Any thread.
  static int Enabled();
  // File stores opened on the fallback pool because io_uring was refused; the store counts itself
  // as it opens (CountFallback). Any thread.
  static uint64_t Fallbacks();
  static void CountFallback();

  // Offers `region` (page aligned, anonymous memory) as the fixed buffers of ioc's ring, to be
  // registered when a direct store asks (UseFixedBuffers). Call before the reactor serves I/O;
  // the region must outlive the io_context.
  static void OfferFixedBuffers(boost::asio::io_context& ioc, std::span<uint8_t> region);
  // Registers the offered region, once; a no-op when there is none, the ring failed, or it was
  // already tried. A direct file store calls it as it opens, before its first I/O.
  void UseFixedBuffers();

  // The index of the registered buffer that holds all of [p, p + len), or -1: submit a plain read
  // or write then. Reactor thread; no system call.
  int FixedIndex(const uint8_t* p, size_t len) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (unsigned i = 0; i < fixed_count_; ++i) {
      const uintptr_t off = a - fixed_[i].base;  // wraps (and so fails) below the base
      if (off < fixed_[i].len && len <= fixed_[i].len - off) return static_cast<int>(i);
    }
    return -1;
  }
  // Bytes registered as fixed buffers (0: none); why not all that was offered (empty: all was).
  size_t fixed_bytes() const;
  const std::string& fixed_error() const { return fixed_error_; }

  // Empty when the ring works; otherwise why it could not be set up (io_uring refused by the
  // kernel or a seccomp profile, for example, or ISCSIGW_DISABLE_IO_URING set to anything but 0
  // or empty). A store must not use a ring that failed.
  const std::string& error() const { return error_; }

  // A submission queue entry whose completion runs op->complete, or nullptr when the kernel takes
  // no more submissions right now (the caller then fails that I/O with EAGAIN). The caller fills it
  // with io_uring_prep_* and must not touch user_data.
  io_uring_sqe* Prepare(Op* op);

  // Entries submitted and completions handled so far (tests).
  uint64_t submitted() const { return submitted_; }
  uint64_t completed() const { return completed_; }
  uint64_t in_flight() const { return prepared_ - completed_; }

  static boost::asio::execution_context::id id;
  explicit FileRing(boost::asio::io_context& ioc);
  ~FileRing() override;
  FileRing(const FileRing&) = delete;
  FileRing& operator=(const FileRing&) = delete;

 private:
  void shutdown() override;
  void Submit();
  void ScheduleSubmit();
  void Arm();
  void Reap();
  void RegisterFixed(std::span<uint8_t> region);

  struct Fixed {
    uintptr_t base = 0;
    size_t len = 0;
  };

  boost::asio::io_context& ioc_;
  io_uring ring_{};
  bool ring_ok_ = false;
  int event_fd_ = -1;
  boost::asio::posix::stream_descriptor event_;  // owns a dup of event_fd_
  bool submit_scheduled_ = false;
  bool armed_ = false;  // an eventfd wait is pending
  bool shut_down_ = false;
  unsigned unsubmitted_ = 0;
  uint64_t prepared_ = 0;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  std::string error_;
  Fixed fixed_[kMaxFixedBuffers];  // written while the ring is set up, before any I/O
  unsigned fixed_count_ = 0;
  std::string fixed_error_;
  // A tracing build: the Ops prepared and not yet submitted, to be stamped as they go.
  std::array<Op*, io_trace::kEnabled ? kEntries : 1> trace_unsubmitted_{};
  unsigned trace_n_ = 0;
};

}  // namespace iscsigw::runtime
