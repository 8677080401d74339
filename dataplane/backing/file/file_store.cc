#include "dataplane/backing/file/file_store.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <mutex>
#include <string>
#include <utility>

#include "base/log.h"
#include "base/unique_fd.h"
#include "dataplane/backing/file/posix_io.h"
#include "dataplane/backing/op_pool.h"

namespace iscsigw::backing {
namespace {

namespace asio = boost::asio;

Status OpenError(const std::string& path, std::string_view what, int err) {
  return IoError("file store " + path + ": " + std::string(what) + ": " + ErrnoText(err));
}

// Work for a reactor's io_context while a call runs on a pool on its behalf: the reactor does not
// stop (nor its store go away) before the completion it will get.
asio::executor_work_guard<asio::io_context::executor_type> Busy(asio::io_context& ioc) {
  return asio::make_work_guard(ioc);
}

// The calls io_uring lacks must not run on a reactor; this pool is shared by every file store of
// the process.
asio::thread_pool& SyncPool() {
  static asio::thread_pool pool(2);
  return pool;
}

// Punches a hole, or zeroes the range on a file system without holes: either way it reads as zeros
// afterwards, which is what an unmapped block must read as (LBPRZ=1).
constexpr int kPunch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
constexpr int kZero = FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;

int Deallocate(int fd, uint64_t offset, uint64_t len) {
  auto run = [&](int mode) {
    return ::fallocate(fd, mode, static_cast<off_t>(offset), static_cast<off_t>(len)) == 0 ? 0
                                                                                           : errno;
  };
  const int err = run(kPunch);
  return err == EOPNOTSUPP ? run(kZero) : err;
}

// The alignment direct I/O on fd needs, of buffers (*mem) and of offsets and lengths (*offset):
// statx's STATX_DIOALIGN (Linux 6.1; 6.11 for block devices), else a block device's logical block
// size, else a page. False when the file system says the file has no direct I/O.
bool DirectAlignment(int fd, bool block_device, uint32_t* mem, uint32_t* offset) {
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
    if (sx.stx_dio_mem_align == 0 || sx.stx_dio_offset_align == 0) return false;
    *mem = sx.stx_dio_mem_align;
    *offset = sx.stx_dio_offset_align;
    return true;
  }
  int logical = 0;
  if (block_device && ::ioctl(fd, BLKSSZGET, &logical) == 0 && logical > 0) {
    *mem = *offset = static_cast<uint32_t>(logical);
    return true;
  }
  *mem = *offset = 4096;
  return true;
}

// Without io_uring, every call of every file store blocks a thread of this pool.
constexpr unsigned kFallbackThreads = 16;
asio::thread_pool& FallbackPool() {
  static asio::thread_pool pool(kFallbackThreads);
  return pool;
}

// One ring submission moves at most this much; a longer range is resubmitted in pieces.
constexpr size_t kMaxPiece = size_t{1} << 30;

}  // namespace

// One operation in flight: its ring record and what it needs to resubmit and to finish.
struct FileStore::Op : runtime::FileRing::Op {
  enum class Kind : uint8_t { kRead, kWrite, kWriteback, kSync, kUnmap };
  FileStore* store = nullptr;
  Slot* slot = nullptr;
  Kind kind = Kind::kRead;
  bool fua = false;
  bool dsync = false;       // this piece: a write with RWF_DSYNC
  bool sync_after = false;  // a FUA write through the page cache: fdatasync once it has landed
  bool gated = false;       // holds the gate shared (writes and unmaps)
  bool read_gated = false;  // holds the read gate shared (reads)
  bool carrier = false;     // the record whose ring operation is its slot's group fdatasync
  int mode = 0;             // fallocate mode
  uint64_t offset = 0;
  uint8_t* data = nullptr;  // const for writes: the ring only reads it
  uint64_t len = 0;
  uint64_t done_bytes = 0;
  IoCompletion done;
  Op* next_free = nullptr;
  Op* next_sync = nullptr;        // in its slot's sync_waiting or sync_covered list
  AtomicJournal::Request atomic;  // an atomic write: its place in the journal's queue
};

struct FileStore::Slot {
  Slot(asio::io_context& context, runtime::FileRing* file_ring, unsigned slot_index)
      : ioc(&context), ring(file_ring), index(slot_index) {}
  asio::io_context* ioc;
  runtime::FileRing* ring;  // null: io_uring refused, calls run on FallbackPool()
  unsigned index;
  OpPool<Op> ops;
  uint64_t unaligned = 0;
  uint64_t fixed = 0;
  uint64_t group_syncs = 0;
  // Group commit: the records waiting for an fdatasync that begins after they arrived (FUA writes
  // through the page cache whose data has landed, and flushes), and those the fdatasync in
  // flight covers. One fdatasync at a time per slot: it covers everything that waited for it.
  Op* sync_waiting = nullptr;
  Op** sync_waiting_tail = &sync_waiting;
  Op* sync_covered = nullptr;
  bool sync_running = false;
  // The slot's own open file description of the file, for its group fdatasync: Linux reports a
  // writeback error once per open file description, so each slot's next fdatasync reports every
  // error, whichever slot's (or FUA write's, or journal's) sync took it first. -1: fd_.
  int sync_fd = -1;
  ~Slot() {
    if (sync_fd >= 0) ::close(sync_fd);
  }
};

Result<std::unique_ptr<FileStore>> FileStore::Open(
    const FileStoreOptions& options, const std::vector<boost::asio::io_context*>& slots) {
  const std::string& path = options.path;
  if (path.empty()) return InvalidArgument("file store: path is empty");
  if (slots.empty()) return InvalidArgument("file store " + path + ": no reactor io_context given");
  for (auto* ioc : slots) {
    if (ioc == nullptr) return InvalidArgument("file store " + path + ": null io_context");
  }

  const int mode = (options.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  const AllowedPaths* allowed = options.allowed.get();
  // open(2), through the allowed paths when there are some; errno-style failures keep the
  // store's own message ("file store PATH: open: ...").
  auto open_path = [&](int flags, mode_t perm, const char* what) -> Result<UniqueFd> {
    if (allowed != nullptr) {
      auto r = allowed->Open(path, flags, perm);
      if (!r.ok()) return Status(r.status().code(), "file store " + r.status().message());
      return r;
    }
    UniqueFd fd(::open(path.c_str(), flags, perm));
    if (!fd.valid()) {
      const int err = errno;
      Status s = OpenError(path, what, err);
      return err == EEXIST ? AlreadyExists(s.message()) : s;
    }
    return fd;
  };
  bool created = false;
  UniqueFd fd;
  if (!options.read_only && options.size_bytes > 0) {
    auto r = open_path(mode | O_CREAT | O_EXCL, 0600, "create");
    if (r.ok()) {
      fd = std::move(r.value());
      created = true;
    } else if (r.status().code() != StatusCode::kAlreadyExists) {
      return r.status();
    }
  }
  if (!fd.valid()) {
    auto r = open_path(mode, 0, "open");
    if (!r.ok()) return r.status();
    fd = std::move(r.value());
  }
  auto fail = [&](Status status) {
    if (created) {
      if (allowed != nullptr) {
        (void)allowed->Unlink(path);
      } else {
        ::unlink(path.c_str());
      }
    }
    return status;
  };

  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(OpenError(path, "fstat", errno));
  uint64_t actual = 0;
  if (S_ISREG(st.st_mode)) {
    if (created && ::ftruncate(fd.get(), static_cast<off_t>(options.size_bytes)) != 0) {
      return fail(OpenError(path, "ftruncate", errno));
    }
    actual = created ? options.size_bytes : static_cast<uint64_t>(st.st_size);
  } else if (S_ISBLK(st.st_mode)) {
    if (::ioctl(fd.get(), BLKGETSIZE64, &actual) != 0) {
      return fail(OpenError(path, "BLKGETSIZE64", errno));
    }
  } else {
    return fail(InvalidArgument("file store " + path + ": not a regular file or block device"));
  }
  uint64_t size = options.size_bytes == 0 ? actual : options.size_bytes;
  if (size == 0) return fail(InvalidArgument("file store " + path + ": size is 0 bytes"));
  if (actual < size) {
    return fail(InvalidArgument("file store " + path + ": is " + std::to_string(actual) +
                                " bytes, smaller than size_bytes " + std::to_string(size)));
  }

  int direct_raw = -1;
  uint32_t mem_align = 0, offset_align = 0;
  if (options.direct) {
    // Reopened through /proc, so that it names the same inode even if the path was renamed.
    const int mode_direct = (options.read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC;
    const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
    direct_raw = ::open(self.c_str(), mode_direct);
    if (direct_raw < 0 && errno == ENOENT) {  // no /proc: the path again, as allowed
      auto r = open_path(mode_direct, 0, "open O_DIRECT");
      if (!r.ok() && r.status().code() != StatusCode::kInvalidArgument) {
        return fail(r.status());
      }
      direct_raw = r.ok() ? r.value().release() : -1;
      errno = EINVAL;  // O_DIRECT refused by the file system
    }
    if (direct_raw < 0) {
      return fail(errno == EINVAL
                      ? InvalidArgument("file store " + path +
                                        ": direct: the file system has no direct I/O (O_DIRECT)")
                      : OpenError(path, "open O_DIRECT", errno));
    }
    if (!DirectAlignment(direct_raw, S_ISBLK(st.st_mode), &mem_align, &offset_align)) {
      ::close(direct_raw);
      return fail(InvalidArgument("file store " + path +
                                  ": direct: the file system has no direct I/O for this file"));
    }
  }
  UniqueFd direct(direct_raw);

  // Where io_uring is refused (a container runtime's default seccomp profile blocks it, for
  // one), the store still works: every call runs on a thread pool instead, at a cost. The ring
  // logs the refusal once per process; each store that falls back is counted.
  std::vector<runtime::FileRing*> rings;
  for (auto* ioc : slots) {
    runtime::FileRing& ring = runtime::FileRing::For(*ioc);
    if (!ring.error().empty()) {
      log::Backing().debug("file store {}: {}: reads and writes run on a pool of {} threads", path,
                           ring.error(), kFallbackThreads);
      runtime::FileRing::CountFallback();
      rings.assign(slots.size(), nullptr);
      break;
    }
    rings.push_back(&ring);
  }

  if (S_ISREG(st.st_mode)) {
    // Journals of another file of this name (a removed LUN's) are recognised and dropped.
    auto recovery = AtomicJournal::Recover(path, fd.get(), size, options.read_only);
    if (!recovery.ok()) return fail(recovery.status());
    if (recovery->found == AtomicJournal::Found::kReplayed) {
      log::Backing().warn(
          "file store {}: completed an atomic write of {} bytes at offset {} that a crash had "
          "interrupted",
          path, recovery->len, recovery->offset);
    }
  }

  std::unique_ptr<FileStore> store(new FileStore(path, size, options.read_only, fd.release()));
  store->regular_file_ = S_ISREG(st.st_mode);
  if (store->regular_file_ && !options.read_only) {
    // Its in-place writes and their fdatasync through a file description of its own, so that a
    // writeback error of its pages is reported to it (see Slot::sync_fd).
    store->journal_fd_ = ReopenFd(store->fd_, O_RDWR);
    if (store->journal_fd_ < 0) {
      return IoError("file store " + path +
                     ": opening it again for atomic writes: " + ErrnoText(errno));
    }
    store->journal_ = std::make_unique<AtomicJournal>(path, store->journal_fd_, store->gates_,
                                                      kAtomicWriteMaxBytes);
  }
  store->direct_fd_ = direct.release();
  store->mem_align_ = mem_align;
  store->offset_align_ = offset_align;
  for (size_t i = 0; i < slots.size(); ++i) {
    store->slots_.push_back(std::make_unique<Slot>(*slots[i], rings[i], static_cast<unsigned>(i)));
    if (!options.read_only) {
      store->slots_.back()->sync_fd = ReopenFd(store->fd_, O_RDWR);
      if (store->slots_.back()->sync_fd < 0) {
        return IoError("file store " + path +
                       ": opening it again for its syncs: " + ErrnoText(errno));
      }
    }
    if (store->direct_fd_ >= 0 && rings[i] != nullptr) rings[i]->UseFixedBuffers();
  }
  return store;
}

FileStore::FileStore(std::string path, uint64_t size_bytes, bool read_only, int fd)
    : path_(std::move(path)), size_bytes_(size_bytes), read_only_(read_only), fd_(fd) {}

uint64_t FileStore::allocated_bytes() const {
  if (!regular_file_) return size_bytes();
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return 0;
  // stat(2): st_blocks counts 512-byte units whatever the file system's block size.
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

int FileStore::Grow(uint64_t new_size_bytes) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return errno;
  uint64_t actual = 0;
  if (S_ISREG(st.st_mode)) {
    actual = static_cast<uint64_t>(st.st_size);
    if (actual < new_size_bytes) {
      if (read_only_) return EROFS;
      if (::ftruncate(fd_, static_cast<off_t>(new_size_bytes)) != 0) return errno;
    }
  } else {
    if (::ioctl(fd_, BLKGETSIZE64, &actual) != 0) return errno;
    if (actual < new_size_bytes) return ENOSPC;
  }
  size_bytes_.store(new_size_bytes, std::memory_order_relaxed);
  return 0;
}

int FileStore::SyncFd(const Slot& slot) const { return slot.sync_fd >= 0 ? slot.sync_fd : fd_; }

FileStore::~FileStore() {
  slots_.clear();
  journal_.reset();
  if (journal_fd_ >= 0) ::close(journal_fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  ::close(fd_);
}

uint64_t FileStore::unaligned(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->unaligned : 0;
}

bool FileStore::uses_ring(unsigned slot) const {
  return slot < slots_.size() && slots_[slot]->ring != nullptr;
}

uint64_t FileStore::group_syncs(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->group_syncs : 0;
}

uint64_t FileStore::fixed(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->fixed : 0;
}

uint32_t FileStore::in_flight(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->ops.in_flight() : 0;
}

uint32_t FileStore::op_records(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->ops.records() : 0;
}

// ---------------------------------------------------------------------------------------------
// Ring operations.

// A free record of the slot, with the store and slot set.
FileStore::Op* FileStore::TakeOp(Slot& slot) {
  Op* op = slot.ops.Take();
  op->complete = &FileStore::Complete;
  op->store = this;
  op->slot = &slot;
  return op;
}

void FileStore::Issue(Op* op) {
  const size_t piece = std::min<uint64_t>(op->len - op->done_bytes, kMaxPiece);
  uint8_t* const data = op->data + op->done_bytes;
  const uint64_t offset = op->offset + op->done_bytes;
  // Direct where the piece meets the alignment; otherwise through the page cache.
  int fd = fd_;
  if (direct_fd_ >= 0 && (op->kind == Op::Kind::kRead || op->kind == Op::Kind::kWrite)) {
    if (reinterpret_cast<uintptr_t>(data) % mem_align_ == 0 && piece % offset_align_ == 0 &&
        offset % offset_align_ == 0) {
      fd = direct_fd_;
    } else {
      ++op->slot->unaligned;
    }
  }
  // FUA: a direct write carries RWF_DSYNC, which the device completes as a FUA write. Through
  // the page cache the write goes plain and joins the slot's group fdatasync once it has landed
  // (QueueSync): io_uring runs buffered writes to one file one at a time, so RWF_DSYNC there
  // would make every FUA write wait for the sync of the one before (5K against 20K IOPS at QD32).
  op->dsync = op->kind == Op::Kind::kWrite && op->fua && fd == direct_fd_;
  if (op->kind == Op::Kind::kWrite && op->fua && !op->dsync) op->sync_after = true;
  if (op->slot->ring == nullptr) return IssueOnPool(op, fd, data, piece, offset);
  io_uring_sqe* sqe = op->slot->ring->Prepare(op);
  if (sqe == nullptr) return Finish(op, EAGAIN);
  // A direct read or write on a buffer in the reactor's registered arena goes as a fixed one: the
  // kernel does not pin its pages again for this I/O. Through the page cache nothing is pinned (the
  // kernel copies), so there a fixed buffer saves nothing, and measured a little slower. (fd is
  // the direct descriptor for reads and writes only.)
  const int fixed = fd == direct_fd_ ? op->slot->ring->FixedIndex(data, piece) : -1;
  if (fixed >= 0) ++op->slot->fixed;
  const auto n = static_cast<unsigned>(piece);
  switch (op->kind) {
    case Op::Kind::kRead:
      if (fixed >= 0) {
        io_uring_prep_read_fixed(sqe, fd, data, n, offset, fixed);
      } else {
        io_uring_prep_read(sqe, fd, data, n, offset);
      }
      break;
    case Op::Kind::kWrite:
      if (fixed >= 0) {
        io_uring_prep_write_fixed(sqe, fd, data, n, offset, fixed);
      } else {
        io_uring_prep_write(sqe, fd, data, n, offset);
      }
      if (op->dsync) sqe->rw_flags = RWF_DSYNC;
      break;
    case Op::Kind::kWriteback:
      io_uring_prep_sync_file_range(
          sqe, fd_, static_cast<unsigned>(op->len), op->offset,
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      break;
    case Op::Kind::kSync:
      io_uring_prep_fsync(sqe, SyncFd(*op->slot), IORING_FSYNC_DATASYNC);
      break;
    case Op::Kind::kUnmap:
      io_uring_prep_fallocate(sqe, fd_, op->mode, static_cast<off_t>(op->offset),
                              static_cast<off_t>(op->len));
      break;
  }
}

// Without a ring: the same operation as a blocking call on the fallback pool, its result handed
// back to the slot's reactor as a ring completion would be.
void FileStore::IssueOnPool(Op* op, int fd, uint8_t* data, size_t piece, uint64_t offset) {
  asio::post(FallbackPool(), [this, op, fd, data, piece, offset, work = Busy(*op->slot->ioc)] {
    ssize_t n = 0;
    do {
      switch (op->kind) {
        case Op::Kind::kRead:
          n = ::pread(fd, data, piece, static_cast<off_t>(offset));
          break;
        case Op::Kind::kWrite: {
          iovec iov{data, piece};
          n = ::pwritev2(fd, &iov, 1, static_cast<off_t>(offset), op->dsync ? RWF_DSYNC : 0);
          break;
        }
        case Op::Kind::kWriteback:
          n = ::sync_file_range(
              fd, static_cast<off_t>(op->offset), static_cast<off_t>(op->len),
              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
          break;
        case Op::Kind::kSync:
          n = ::fdatasync(SyncFd(*op->slot));
          break;
        case Op::Kind::kUnmap:
          n = ::fallocate(fd, op->mode, static_cast<off_t>(op->offset),
                          static_cast<off_t>(op->len));
          break;
      }
    } while (n < 0 && errno == EINTR);
    const int32_t res = n < 0 ? -errno : static_cast<int32_t>(n);
    asio::post(*op->slot->ioc, [op, res] { Complete(op, res); });
  });
}

void FileStore::Complete(runtime::FileRing::Op* ring_op, int32_t res) {
  Op* op = static_cast<Op*>(ring_op);
  FileStore* self = op->store;
  if (res < 0) {
    if (op->kind == Op::Kind::kUnmap && res == -EOPNOTSUPP && op->mode == kPunch) {
      op->mode = kZero;  // no holes on this file system: zeroes instead
      return self->Issue(op);
    }
    return self->Finish(op, -res);
  }
  if (op->kind == Op::Kind::kRead || op->kind == Op::Kind::kWrite) {
    // 0 bytes: end of file inside size_bytes (the file shrank under us).
    if (res == 0) return self->Finish(op, EIO);
    op->done_bytes += static_cast<uint64_t>(res);
    if (op->done_bytes < op->len) return self->Issue(op);
    if (op->sync_after) {
      // Its own range written back first, side by side with the others; then the group
      // fdatasync has only the device's cache (and any metadata) left to flush.
      op->kind = Op::Kind::kWriteback;
      op->sync_after = false;
      return self->Issue(op);
    }
  }
  if (op->kind == Op::Kind::kWriteback) {
    op->kind = Op::Kind::kSync;
    return self->QueueSync(op);
  }
  self->Finish(op, 0);
}

void FileStore::QueueSync(Op* op) {
  // One fdatasync at a time per slot, on the pool too: two at once through the slot's one file
  // description would split a writeback error between them (the kernel reports it to the first
  // to look), and the other could answer GOOD for a write that was lost.
  Slot& s = *op->slot;
  op->next_sync = nullptr;
  *s.sync_waiting_tail = op;
  s.sync_waiting_tail = &op->next_sync;
  if (!s.sync_running) StartSync(s);
}

void FileStore::StartSync(Slot& s) {
  Op* carrier = s.sync_waiting;
  s.sync_covered = carrier;
  s.sync_waiting = nullptr;
  s.sync_waiting_tail = &s.sync_waiting;
  s.sync_running = true;
  ++s.group_syncs;
  carrier->carrier = true;  // its Finish ends the whole group (SyncDone)
  Issue(carrier);
}

void FileStore::SyncDone(Slot& s, int err) {
  Op* op = s.sync_covered;
  s.sync_covered = nullptr;
  s.sync_running = false;
  // The next group starts before this one's completions run, which may queue more.
  if (s.sync_waiting != nullptr) StartSync(s);
  while (op != nullptr) {
    Op* next = op->next_sync;
    Finish(op, err);
    op = next;
  }
}

void FileStore::Finish(Op* op, int err) {
  if (op->carrier) {
    op->carrier = false;
    return SyncDone(*op->slot, err);
  }
  Slot& slot = *op->slot;
  if (op->gated) gate_.ExitShared(slot.index);
  if (op->read_gated) read_gate_.ExitShared(slot.index);
  const IoCompletion done = op->done;
  slot.ops.Give(op);
  done(err);
}

void FileStore::RunBehindGate(Slot& slot, WriteGate& gate, std::function<int()> fn,
                              IoCompletion done) {
  asio::post(SyncPool(), [&gate, fn = std::move(fn), ioc = slot.ioc, done, work = Busy(*slot.ioc)] {
    int err = 0;
    {
      std::lock_guard<std::mutex> lock(gate.mutex());
      err = fn();
    }
    asio::post(*ioc, [done, err] { done(err); });
  });
}

void FileStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);  // caller bug: no such reactor
  Slot& s = *slots_[slot];
  if (buf.empty()) {
    asio::post(*s.ioc, [done] { done(0); });
    return;
  }
  if (!read_gate_.TryEnterShared(slot)) {
    // An atomic write is going in place: read behind it.
    return RunBehindGate(
        s, read_gate_, [fd = fd_, offset, buf] { return PreadAll(fd, offset, buf); }, done);
  }
  Op* op = TakeOp(s);
  op->kind = Op::Kind::kRead;
  op->read_gated = true;
  op->offset = offset;
  op->data = buf.data();
  op->len = buf.size();
  op->done = done;
  Issue(op);
}

void FileStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                      IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  Slot& s = *slots_[slot];
  if (read_only_ || buf.empty()) {
    const int err = read_only_ ? EROFS : 0;
    asio::post(*s.ioc, [done, err] { done(err); });
    return;
  }
  if (!gate_.TryEnterShared(slot)) {
    // A ReadModifyWrite is active: write on the pool behind it.
    return RunBehindGate(
        s, gate_, [fd = fd_, offset, buf, fua] { return PwriteAllDurable(fd, offset, buf, fua); },
        done);
  }
  Op* op = TakeOp(s);
  op->kind = Op::Kind::kWrite;
  op->gated = true;
  op->fua = fua;
  op->offset = offset;
  op->data = const_cast<uint8_t*>(buf.data());
  op->len = buf.size();
  op->done = done;
  Issue(op);
}

void FileStore::Flush(unsigned slot, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kSync;
  op->done = done;
  QueueSync(op);
}

void FileStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  Slot& s = *slots_[slot];
  if (read_only_ || !regular_file_ || len == 0) {
    const int err = read_only_ ? EROFS : !regular_file_ ? ENOTSUP : 0;
    asio::post(*s.ioc, [done, err] { done(err); });
    return;
  }
  if (!gate_.TryEnterShared(slot)) {
    return RunBehindGate(
        s, gate_, [fd = fd_, offset, len] { return Deallocate(fd, offset, len); }, done);
  }
  Op* op = TakeOp(s);
  op->kind = Op::Kind::kUnmap;
  op->gated = true;
  op->mode = kPunch;
  op->offset = offset;
  op->len = len;
  op->done = done;
  Issue(op);
}

// ---------------------------------------------------------------------------------------------
// On the pool: calls io_uring lacks, and read-modify-write, which must hold the gate exclusively.

void FileStore::GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                                IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  asio::io_context* ioc = slots_[slot]->ioc;
  const uint64_t end = std::min(offset + max_len, size_bytes());
  if (!regular_file_) {
    *out = Extent{true, end - offset};
    asio::post(*ioc, [done] { done(0); });
    return;
  }
  asio::post(SyncPool(), [this, offset, end, out, ioc, done, work = Busy(*ioc)] {
    int err = 0;
    const off_t data = ::lseek(fd_, static_cast<off_t>(offset), SEEK_DATA);
    if (data < 0 && errno != ENXIO) {
      err = errno;
    } else if (data < 0 || static_cast<uint64_t>(data) > offset) {
      // A hole up to the next data (ENXIO: no data after offset).
      const uint64_t next = data < 0 ? end : std::min<uint64_t>(end, static_cast<uint64_t>(data));
      *out = Extent{false, next - offset};
    } else {
      const off_t hole = ::lseek(fd_, static_cast<off_t>(offset), SEEK_HOLE);
      if (hole < 0) {
        err = errno;
      } else {
        *out = Extent{true, std::min<uint64_t>(end, static_cast<uint64_t>(hole)) - offset};
      }
    }
    asio::post(*ioc, [done, err] { done(err); });
  });
}

void FileStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch,
                                bool fua, ModifyFn modify, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  asio::io_context* ioc = slots_[slot]->ioc;
  if (read_only_) {
    asio::post(*ioc, [done] { done(EROFS); });
    return;
  }
  asio::post(SyncPool(), [this, fua, offset, scratch, modify, ioc, done, work = Busy(*ioc)] {
    gate_.LockExclusive();
    int err = PreadAll(fd_, offset, scratch);
    if (err == 0) {
      const std::span<const uint8_t> out = modify.fn(modify.ctx, scratch);
      if (!out.empty()) err = PwriteAllDurable(fd_, offset, out.first(scratch.size()), fua);
    }
    gate_.UnlockExclusive();
    asio::post(*ioc, [done, err] { done(err); });
  });
}

BackingStore::AtomicLimits FileStore::atomic_limits() const {
  // A read-only file keeps its limits (its atomic writes are refused as write protected).
  return regular_file_ ? AtomicLimits{kAtomicWriteMaxBytes, 0} : AtomicLimits{};
}

void FileStore::WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                            IoCompletion done) {
  (void)fua;  // every atomic write is durable when it completes
  if (slot >= slots_.size()) return done(EINVAL);
  Slot& s = *slots_[slot];
  if (read_only_ || journal_ == nullptr) {
    const int err = read_only_ ? EROFS : ENOTSUP;
    asio::post(*s.ioc, [done, err] { done(err); });
    return;
  }
  Op* op = TakeOp(s);
  op->kind = Op::Kind::kWrite;  // never issued to the ring: the journal writes it
  op->done = done;
  s.ioc->get_executor().on_work_started();  // the reactor runs on until its completion
  op->atomic.offset = offset;
  op->atomic.data = buf;
  op->atomic.ctx = op;
  op->atomic.finish = &FileStore::AtomicDone;
  journal_->Submit(&op->atomic);
}

void FileStore::AtomicDone(AtomicJournal::Request* request, int err) {
  Op* op = static_cast<Op*>(request->ctx);
  asio::post(*op->slot->ioc, [op, err] {
    op->slot->ioc->get_executor().on_work_finished();
    op->store->Finish(op, err);
  });
}

int FileStore::ready() const {
  // A record left for the next open: serving on would show its range torn, and writes to it would
  // be undone by the replay.
  return journal_ != nullptr && journal_->record_left() ? ESHUTDOWN : 0;
}

std::string FileStore::offline_reason() const {
  if (ready() == 0) return {};
  return "an atomic write failed in place or could not retire its journal record (see the log); "
         "the record is written in place when the LUN opens next: restart the gateway once the "
         "file and its directory can be written";
}

void FileStore::Prefetch(uint64_t offset, uint64_t len) {
  asio::post(SyncPool(), [fd = fd_, offset, len] {
    (void)::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len),
                          POSIX_FADV_WILLNEED);
  });
}

}  // namespace iscsigw::backing
