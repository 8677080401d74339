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
// Threading: For() from any thread (once per store and reactor); everything else on the reactor
// thread. An Op in flight must outlive its completion: stores are destroyed before their reactors.
#pragma once

#include <liburing.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <string>

namespace iscsigw::runtime {

class FileRing final : public boost::asio::execution_context::service {
 public:
  static constexpr unsigned kEntries = 256;
  static constexpr unsigned kMaxBlockingWorkers = 64;

  struct Op {
    // Runs on the reactor thread with the completion's result: >= 0, or a negative errno value.
    void (*complete)(Op* op, int32_t res) = nullptr;
  };

  // The ring of ioc's reactor, set up on first use.
  static FileRing& For(boost::asio::io_context& ioc);

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
};

}  // namespace iscsigw::runtime
