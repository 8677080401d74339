#include "dataplane/backing/file_store.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/random_access_file.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

namespace iscsigw::backing {
namespace {

namespace asio = boost::asio;

std::string ErrnoText(int err) { return std::error_code(err, std::system_category()).message(); }

Status OpenError(const std::string& path, std::string_view what, int err) {
  return IoError("file store " + path + ": " + std::string(what) + ": " + ErrnoText(err));
}

// Maps an Asio error to a positive errno for IoCompletion. Non-system errors (end of file while
// the range is inside size_bytes, i.e. the file shrank under us) become EIO.
int ToErrno(const boost::system::error_code& ec) {
  if (ec.category() == boost::system::system_category() && ec.value() > 0) return ec.value();
  return EIO;
}

// fdatasync must not run on a reactor; this pool is shared by every file store of the process.
asio::thread_pool& SyncPool() {
  static asio::thread_pool pool(2);
  return pool;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Blocking positional I/O for the pool: the whole range or a positive errno.
int PreadAll(int fd, uint64_t offset, std::span<uint8_t> buf) {
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n =
        ::pread(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

int PwriteAll(int fd, uint64_t offset, std::span<const uint8_t> buf) {
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n =
        ::pwrite(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

// One descriptor pair of a slot. Asio runs at most one read and one write at a time per file
// object (later ones wait in its queue), so a slot spreads its calls over lanes.
struct FileStore::Lane {
  explicit Lane(asio::io_context& ioc) : file(ioc), dsync_file(ioc) {}
  asio::random_access_file file;        // plain writes and reads
  asio::random_access_file dsync_file;  // O_DSYNC: FUA writes (closed when read-only)
  uint32_t reads = 0;                   // in flight; reactor thread only
  uint32_t writes = 0;
};

struct FileStore::Slot {
  explicit Slot(asio::io_context& ioc) : ioc(&ioc) {}
  asio::io_context* ioc;
  std::vector<std::unique_ptr<Lane>> lanes;  // reserved to the maximum at open: never moves
  uint32_t next = 0;                         // round robin once every lane is busy
};

namespace {

// Reads [offset, offset+len) in as many async_read_some_at calls as it takes. Copied into each
// Asio operation (Asio recycles the handler memory), so there is no separate allocation.
struct ReadOp {
  asio::random_access_file* file;
  uint32_t* in_flight;  // the lane's count of reads, held until the whole range is read
  uint64_t offset;
  uint8_t* data;
  size_t len;
  size_t done_bytes;
  IoCompletion done;

  void Start() {
    file->async_read_some_at(offset + done_bytes, asio::buffer(data + done_bytes, len - done_bytes),
                             std::move(*this));
  }
  void operator()(const boost::system::error_code& ec, size_t n) {
    done_bytes += n;
    if (ec) return Finish(ToErrno(ec));
    if (n == 0) return Finish(EIO);
    if (done_bytes == len) return Finish(0);
    Start();
  }
  void Finish(int err) {
    --*in_flight;
    done(err);
  }
};

struct WriteOp {
  asio::random_access_file* file;
  uint32_t* in_flight;  // the lane's count of writes
  uint64_t offset;
  const uint8_t* data;
  size_t len;
  size_t done_bytes;
  IoCompletion done;
  WriteGate* gate;  // entered (shared) by the caller; left once the data has landed
  unsigned slot;

  void Start() {
    file->async_write_some_at(offset + done_bytes,
                              asio::buffer(data + done_bytes, len - done_bytes), std::move(*this));
  }
  void operator()(const boost::system::error_code& ec, size_t n) {
    done_bytes += n;
    if (ec) return Finish(ToErrno(ec));
    if (n == 0) return Finish(EIO);
    if (done_bytes == len) return Finish(0);
    Start();
  }
  void Finish(int err) {
    --*in_flight;
    gate->ExitShared(slot);
    done(err);
  }
};

}  // namespace

Result<std::unique_ptr<FileStore>> FileStore::Open(
    const FileStoreOptions& options, const std::vector<boost::asio::io_context*>& slots) {
  const std::string& path = options.path;
  if (path.empty()) return InvalidArgument("file store: path is empty");
  if (slots.empty()) return InvalidArgument("file store " + path + ": no reactor io_context given");
  if (options.lanes_per_slot == 0) return InvalidArgument("file store " + path + ": no lanes");
  for (auto* ioc : slots) {
    if (ioc == nullptr) return InvalidArgument("file store " + path + ": null io_context");
  }

  const int mode = (options.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  bool created = false;
  int raw = -1;
  if (!options.read_only && options.size_bytes > 0) {
    raw = ::open(path.c_str(), mode | O_CREAT | O_EXCL, 0600);
    if (raw >= 0) {
      created = true;
    } else if (errno != EEXIST) {
      return OpenError(path, "create", errno);
    }
  }
  if (raw < 0) {
    raw = ::open(path.c_str(), mode);
    if (raw < 0) return OpenError(path, "open", errno);
  }
  Fd fd(raw);
  auto fail = [&](Status status) {
    if (created) ::unlink(path.c_str());
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

  // The O_DSYNC descriptor is reopened through /proc so that it names the same inode even if the
  // path was renamed since the open above.
  int dsync_raw = -1;
  if (!options.read_only) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
    dsync_raw = ::open(self.c_str(), O_RDWR | O_DSYNC | O_CLOEXEC);
    if (dsync_raw < 0) dsync_raw = ::open(path.c_str(), O_RDWR | O_DSYNC | O_CLOEXEC);
    if (dsync_raw < 0) return fail(OpenError(path, "open O_DSYNC", errno));
  }
  Fd dsync(dsync_raw);

  std::unique_ptr<FileStore> store(new FileStore(path, size, options.read_only, fd.release()));
  store->regular_file_ = S_ISREG(st.st_mode);
  store->dsync_fd_ = dsync.release();
  store->max_lanes_ = options.lanes_per_slot;
  for (auto* ioc : slots) {
    auto slot = std::make_unique<Slot>(*ioc);
    slot->lanes.reserve(options.lanes_per_slot);
    if (int err = store->AddLane(*slot); err != 0) return fail(OpenError(path, "dup", err));
    store->slots_.push_back(std::move(slot));
  }
  return store;
}

FileStore::FileStore(std::string path, uint64_t size_bytes, bool read_only, int fd)
    : path_(std::move(path)), size_bytes_(size_bytes), read_only_(read_only), fd_(fd) {}

int FileStore::AddLane(Slot& slot) {
  auto lane = std::make_unique<Lane>(*slot.ioc);
  // Each file object owns a dup of the descriptor (Asio closes what it owns).
  auto assign = [](asio::random_access_file& f, int from) {
    const int d = ::dup(from);
    if (d < 0) return errno;
    boost::system::error_code ec;
    f.assign(d, ec);
    if (ec) {
      ::close(d);
      return ToErrno(ec);
    }
    return 0;
  };
  if (int err = assign(lane->file, fd_); err != 0) return err;
  if (dsync_fd_ >= 0) {
    if (int err = assign(lane->dsync_file, dsync_fd_); err != 0) return err;
  }
  slot.lanes.push_back(std::move(lane));
  return 0;
}

// A lane with no call of this kind in flight; a new lane while there are fewer than max_lanes_
// (once per lane in the store's life: descriptors and a small object, not per I/O); otherwise the
// next lane round robin, behind the call it runs.
FileStore::Lane& FileStore::PickLane(Slot& slot, bool write) {
  for (auto& l : slot.lanes) {
    if ((write ? l->writes : l->reads) == 0) return *l;
  }
  if (slot.lanes.size() < max_lanes_ && AddLane(slot) == 0) return *slot.lanes.back();
  return *slot.lanes[slot.next++ % slot.lanes.size()];
}

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

FileStore::~FileStore() {
  slots_.clear();  // closes the per-lane descriptors
  if (dsync_fd_ >= 0) ::close(dsync_fd_);
  ::close(fd_);
}

size_t FileStore::lanes(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->lanes.size() : 0;
}

void FileStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);  // caller bug: no such reactor
  Slot& s = *slots_[slot];
  if (buf.empty()) {
    asio::post(*s.ioc, [done] { done(0); });
    return;
  }
  Lane& lane = PickLane(s, false);
  ++lane.reads;
  ReadOp{&lane.file, &lane.reads, offset, buf.data(), buf.size(), 0, done}.Start();
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
    // An exclusive operation (ReadModifyWrite, Unmap) is active: write on the pool behind it.
    const int fd = fua ? dsync_fd_ : fd_;
    asio::post(SyncPool(), [this, fd, offset, buf, ioc = s.ioc, done] {
      int err = 0;
      {
        std::lock_guard<std::mutex> lock(gate_.mutex());
        err = PwriteAll(fd, offset, buf);
      }
      asio::post(*ioc, [done, err] { done(err); });
    });
    return;
  }
  Lane& lane = PickLane(s, true);
  ++lane.writes;
  WriteOp{fua ? &lane.dsync_file : &lane.file,
          &lane.writes,
          offset,
          buf.data(),
          buf.size(),
          0,
          done,
          &gate_,
          slot}
      .Start();
}

void FileStore::Flush(unsigned slot, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  asio::io_context* ioc = slots_[slot]->ioc;
  asio::post(SyncPool(), [fd = fd_, ioc, done] {
    const int err = ::fdatasync(fd) == 0 ? 0 : errno;
    asio::post(*ioc, [done, err] { done(err); });
  });
}

// ---------------------------------------------------------------------------------------------
// Provisioning and read-modify-write: blocking calls on the pool, completions posted to the slot.

void FileStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  asio::io_context* ioc = slots_[slot]->ioc;
  if (read_only_ || !regular_file_) {
    const int err = read_only_ ? EROFS : ENOTSUP;
    asio::post(*ioc, [done, err] { done(err); });
    return;
  }
  asio::post(SyncPool(), [this, offset, len, ioc, done] {
    gate_.LockExclusive();
    // KEEP_SIZE: the file keeps its length; the hole reads as zeros (fallocate(2)).
    int err = ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                          static_cast<off_t>(offset), static_cast<off_t>(len)) == 0
                  ? 0
                  : errno;
    if (err == EOPNOTSUPP) {
      // A file system without holes: zeros are what an unmapped block must read as (LBPRZ=1).
      err = ::fallocate(fd_, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                        static_cast<off_t>(len)) == 0
                ? 0
                : errno;
    }
    gate_.UnlockExclusive();
    asio::post(*ioc, [done, err] { done(err); });
  });
}

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
  asio::post(SyncPool(), [this, offset, end, out, ioc, done] {
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
  const int fd = fua ? dsync_fd_ : fd_;
  asio::post(SyncPool(), [this, fd, offset, scratch, modify, ioc, done] {
    gate_.LockExclusive();
    int err = PreadAll(fd_, offset, scratch);
    if (err == 0) {
      const std::span<const uint8_t> out = modify.fn(modify.ctx, scratch);
      if (!out.empty()) err = PwriteAll(fd, offset, out.first(scratch.size()));
    }
    gate_.UnlockExclusive();
    asio::post(*ioc, [done, err] { done(err); });
  });
}

void FileStore::Prefetch(uint64_t offset, uint64_t len) {
  asio::post(SyncPool(), [fd = fd_, offset, len] {
    (void)::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len),
                          POSIX_FADV_WILLNEED);
  });
}

}  // namespace iscsigw::backing
