// FileStore: a LUN on a regular file or a block device, through the io_uring of each reactor
// (runtime::FileRing).
//
// Slots: a call made on slot i is submitted to reactor i's ring and completes on reactor i's
// thread. Every read, write, flush and unmap is its own ring operation, so as many reach the
// device at once as the initiators keep in flight, and the entries of one reactor turn reach the
// kernel in one system call. Nothing blocks a reactor:
//   - Read/Write resubmit the rest of a short transfer until the whole range is done.
//   - FUA: a direct write carries RWF_DSYNC (the device gets a FUA write); a write through the
//     page cache completes only after an fdatasync that began once its data had landed. (io_uring
//     runs the buffered writes to one file one at a time, so there RWF_DSYNC would serialise the
//     syncs too.)
//   - Flush and those FUA writes share group commits: each slot keeps one fdatasync
//     (IORING_OP_FSYNC, IORING_FSYNC_DATASYNC) in flight, and it completes every flush and FUA
//     write that was waiting when it began (on the fallback pool too: one fdatasync per slot at
//     a time, so that a writeback error is never split between two). Unmap is an
//     IORING_OP_FALLOCATE.
//   - GetProvisioning (lseek SEEK_DATA/SEEK_HOLE, which io_uring lacks), ReadModifyWrite (which
//     must exclude every write, see WriteGate) and Prefetch run on a small process-wide blocking
//     pool (2 threads) and post their completion back to the slot's io_context.
// With `direct`, reads and writes that meet the file's direct I/O alignment use an O_DIRECT
// descriptor and skip the page cache; the rest (and the pool's calls) use the ordinary one.
// A direct read or write whose buffer lies in the ring's registered arena (the reactor's
// BufferPool, see FileRing) is submitted as a fixed read/write, which spares pinning its pages;
// any other as a plain one.
// Atomic writes (WRITE ATOMIC), on regular files only: a redo journal beside the file
// (AtomicJournal, "<path>.atomic-journal.<random>") on a pool of its own; each is durable when it
// completes. While one goes in place it holds both gates: reads take the read gate shared (like
// writes the write gate), so that a read sees all of it or none. Open first completes an atomic
// write that a crash interrupted. An atomic write that fails in place fences the store (ready()
// ESHUTDOWN, NOT READY to initiators) until the next open completes it. A block device has no
// place for a journal and offers no atomic writes.
// Where io_uring is refused (seccomp), every call runs on a pool of 16 threads instead, with a
// warning that says so.
// Each operation in flight lives in a per-slot record taken from a free list that grows, in
// chunks, only when more are in flight than ever before: no allocation per I/O.
//
// Lifetime: the io_contexts must outlive the store, and the store must outlive every I/O started on
// it (the LUN that owns the store is kept alive by the tasks that use it). No exception escapes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/file/allowed_paths.h"
#include "dataplane/backing/file/atomic_journal.h"
#include "dataplane/backing/write_gate.h"
#include "dataplane/runtime/file_ring.h"

namespace iscsigw::backing {

struct FileStoreOptions {
  std::string path;
  // Size of the LUN. 0: the existing file's or device's size. For a regular file that does not
  // exist yet (and read_only is false) the file is created and ftruncate'd to this size. An
  // existing file or device smaller than size_bytes is an error (the LUN would have blocks with
  // nowhere to go).
  uint64_t size_bytes = 0;
  bool read_only = false;  // O_RDONLY; writes then complete with EROFS
  // O_DIRECT: reads and writes whose buffer, length and offset meet the file's direct I/O
  // alignment bypass the page cache (a second descriptor); any other goes through the page cache,
  // which Linux keeps coherent with direct I/O on the same file. Open fails, naming the reason,
  // where the file system has no direct I/O.
  bool direct = false;
  // Where the path may lead (docs/security.md): opened, created and removed only through it. Null
  // (the store's own tests): the path is opened as it is; the data plane always sets it.
  std::shared_ptr<const AllowedPaths> allowed{};
};

class FileStore final : public BackingStore {
 public:
  // Opens (or creates) the file and takes the ring of each io_context in `slots` (index = slot).
  // Errors name the path and the reason, e.g. "file store /x/y: open: No such file or directory".
  static Result<std::unique_ptr<FileStore>> Open(
      const FileStoreOptions& options, const std::vector<boost::asio::io_context*>& slots);

  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  std::string_view kind() const override { return "file"; }
  // ESHUTDOWN once an atomic write left a live journal record (see WriteAtomic); 0 otherwise.
  int ready() const override;
  std::string offline_reason() const override;
  uint64_t size_bytes() const override { return size_bytes_.load(std::memory_order_relaxed); }
  bool persistent() const override { return true; }
  bool read_only() const { return read_only_; }
  const std::string& path() const { return path_; }
  bool direct() const { return direct_fd_ >= 0; }
  // Direct I/O alignment of buffers and of offsets and lengths (bytes; 0 without direct).
  uint32_t direct_mem_align() const { return mem_align_; }
  uint32_t direct_offset_align() const { return offset_align_; }

  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override;
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override;
  void Flush(unsigned slot, IoCompletion done) override;

  AtomicLimits atomic_limits() const override;
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   IoCompletion done) override;

  // Thin provisioning for regular files: Unmap punches holes (fallocate PUNCH_HOLE|KEEP_SIZE, so
  // the range reads as zeros), GetProvisioning reports holes (lseek SEEK_DATA/SEEK_HOLE).
  // ReadModifyWrite excludes every write and unmap through gate_ (while one runs, they go through
  // the pool behind it).
  bool thin_provisioned() const override { return regular_file_; }
  // A regular file's allocated blocks (fstat st_blocks * 512); a block device's whole size.
  uint64_t allocated_bytes() const override;
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override;
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       IoCompletion done) override;
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override;
  // posix_fadvise(WILLNEED) on the pool.
  void Prefetch(uint64_t offset, uint64_t len) override;
  // A regular file is extended with ftruncate (sparse); a block device must already be that big.
  int Grow(uint64_t new_size_bytes) override;
  // Operations of `slot` in flight now, and the records its free list holds (tests; read on
  // that slot's reactor).
  uint32_t in_flight(unsigned slot) const;
  uint32_t op_records(unsigned slot) const;
  // Reads and writes of `slot` that went through the page cache although the store is direct,
  // because they were not aligned (tests).
  uint64_t unaligned(unsigned slot) const;
  // Whether `slot` submits through an io_uring (false: the fallback pool), and the group
  // fdatasyncs it has issued (tests).
  bool uses_ring(unsigned slot) const;
  uint64_t group_syncs(unsigned slot) const;
  // Direct reads and writes of `slot` submitted on a registered (fixed) buffer of the reactor's
  // ring (tests).
  uint64_t fixed(unsigned slot) const;

 private:
  struct Op;
  struct Slot;
  FileStore(std::string path, uint64_t size_bytes, bool read_only, int fd);
  Op* TakeOp(Slot& slot);
  void Issue(Op* op);
  void IssueOnPool(Op* op, int fd, uint8_t* data, size_t piece, uint64_t offset);
  static void Complete(runtime::FileRing::Op* ring_op, int32_t res);
  void Finish(Op* op, int err);
  void QueueSync(Op* op);
  void StartSync(Slot& slot);
  void SyncDone(Slot& slot, int err);
  // The slow path of Write and Unmap while a ReadModifyWrite holds the gate: on the pool, under
  // the gate's mutex.
  void RunBehindGate(Slot& slot, WriteGate& gate, std::function<int()> fn, IoCompletion done);
  static void AtomicDone(AtomicJournal::Request* request, int err);
  int SyncFd(const Slot& slot) const;  // the slot's own descriptor for fdatasync (Slot::sync_fd)

  const std::string path_;
  std::atomic<uint64_t> size_bytes_;
  const bool read_only_;
  const int fd_;         // owned; through the page cache
  int direct_fd_ = -1;   // owned; O_DIRECT (-1 without direct)
  int journal_fd_ = -1;  // owned; the atomic journal's own description of the file (-1: none)
  uint32_t mem_align_ = 0;
  uint32_t offset_align_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;  // slots_[i] used only on reactor i's thread
  bool regular_file_ = false;                 // set by Open
  WriteGate gate_;                            // any thread
  WriteGate read_gate_;                       // reads shared; atomic writes exclusive
  AtomicJournal::Gates gates_{gate_, read_gate_};
  std::unique_ptr<AtomicJournal> journal_;  // regular files that can be written
};

}  // namespace iscsigw::backing
