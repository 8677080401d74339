#include "dataplane/backing/file/atomic_journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "base/crc32c.h"
#include "base/endian.h"
#include "base/log.h"
#include "dataplane/backing/file/posix_io.h"

namespace iscsigw::backing {
namespace {

// Header layout (big-endian): magic[8], offset u64, length u64, data CRC32C u32, reserved u32,
// the LUN file's identity (device u64, inode u64, birth time: seconds u64, nanoseconds u32), and
// the header's CRC32C u32 over the 60 bytes before it. The data follows at kHeaderBytes.
constexpr char kMagic[8] = {'I', 'G', 'W', 'A', 'T', 'O', 'M', '2'};
constexpr size_t kIdentityAt = 32;
constexpr size_t kIdentityBytes = 28;
constexpr size_t kCrcAt = kIdentityAt + kIdentityBytes;
constexpr size_t kUsedHeader = kCrcAt + 4;
constexpr char kSuffix[] = ".atomic-journal";

// Atomic writes of every file store wait for fdatasyncs here, not on the pool of the calls
// io_uring lacks (COMPARE AND WRITE, GET LBA STATUS): each journal holds at most one thread.
boost::asio::thread_pool& JournalPool() {
  static boost::asio::thread_pool pool(4);
  return pool;
}

int SyncFd(int fd) { return ::fdatasync(fd) == 0 ? 0 : errno; }

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
std::string BaseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Makes a directory entry's creation or removal durable.
int SyncDirOf(const std::string& path) {
  UniqueFd d(::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid()) return errno;
  return ::fsync(d.get()) == 0 ? 0 : errno;
}

// The file's device, inode and birth time (0 where the file system keeps none): a record names
// the file it belongs to, so that a journal is never replayed into another file of the same name.
bool Identity(int fd, uint8_t* out) {
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME, &sx) != 0) return false;
  StoreBe64(out, (uint64_t{sx.stx_dev_major} << 32) | sx.stx_dev_minor);
  StoreBe64(out + 8, sx.stx_ino);
  const bool born = (sx.stx_mask & STATX_BTIME) != 0;
  StoreBe64(out + 16, born ? static_cast<uint64_t>(sx.stx_btime.tv_sec) : 0);
  StoreBe32(out + 24, born ? sx.stx_btime.tv_nsec : 0);
  return true;
}

// An exclusive OFD lock on the whole file: held by a live store's journal; false (EAGAIN) when
// another descriptor, of this process or another, holds it.
bool TryLock(int fd, bool write) {
  struct flock fl {};
  fl.l_type = write ? F_WRLCK : F_RDLCK;
  fl.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

struct Header {
  uint64_t offset = 0;
  uint64_t len = 0;
  uint32_t data_crc = 0;
  uint8_t identity[kIdentityBytes] = {};
};

void Encode(const Header& h, uint8_t* out) {
  std::memcpy(out, kMagic, sizeof(kMagic));
  StoreBe64(out + 8, h.offset);
  StoreBe64(out + 16, h.len);
  StoreBe32(out + 24, h.data_crc);
  StoreBe32(out + 28, 0);
  std::memcpy(out + kIdentityAt, h.identity, kIdentityBytes);
  StoreBe32(out + kCrcAt, Crc32c(out, kCrcAt));
}

// False for anything but an intact header: none written, zeroed (retired) or torn.
bool Decode(const uint8_t* in, Header* h) {
  if (std::memcmp(in, kMagic, sizeof(kMagic)) != 0) return false;
  if (LoadBe32(in + kCrcAt) != Crc32c(in, kCrcAt)) return false;
  h->offset = LoadBe64(in + 8);
  h->len = LoadBe64(in + 16);
  h->data_crc = LoadBe32(in + 24);
  std::memcpy(h->identity, in + kIdentityAt, kIdentityBytes);
  return true;
}

// One journal file found at open.
struct JournalFile {
  enum Kind { kNone, kLive, kDiscard, kReplay } kind = kNone;
  Header header{};
  std::vector<uint8_t> data{};
};

Result<JournalFile> Examine(const std::string& path, const std::string& who,
                            const uint8_t* identity, uint64_t lun_size, bool read_only,
                            UniqueFd* fd) {
  fd->Reset(::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
  if (!fd->valid()) {
    if (errno == ENOENT) return JournalFile{};  // gone meanwhile
    return IoError(who + "open: " + ErrnoText(errno));
  }
  // A live store's journal (another store of this file, still closing): not ours to touch.
  if (!TryLock(fd->get(), !read_only)) {
    if (errno == EAGAIN || errno == EACCES) return JournalFile{JournalFile::kLive, {}, {}};
    return IoError(who + "lock: " + ErrnoText(errno));
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return IoError(who + "fstat: " + ErrnoText(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  JournalFile f{JournalFile::kDiscard, {}, {}};
  std::array<uint8_t, kUsedHeader> raw{};
  if (size < kUsedHeader) return f;
  if (const int err = PreadAll(fd->get(), 0, raw); err != 0) {
    return IoError(who + "read: " + ErrnoText(err));
  }
  if (!Decode(raw.data(), &f.header)) return f;
  if (std::memcmp(f.header.identity, identity, kIdentityBytes) != 0) {
    log::Backing().warn("{}holds a record of another file of that name; discarded", who);
    return f;
  }
  const Header& h = f.header;
  if (h.len == 0 || h.offset > lun_size || h.len > lun_size - h.offset) {
    return IoError(who + "its record (" + std::to_string(h.len) + " bytes at " +
                   std::to_string(h.offset) + ") lies outside the LUN's " +
                   std::to_string(lun_size) + " bytes; move the journal away to open the LUN");
  }
  // A header without all of its data: the record never became durable, nor its write started.
  if (size < AtomicJournal::kHeaderBytes + h.len) return f;
  f.data.resize(h.len);
  if (const int err = PreadAll(fd->get(), AtomicJournal::kHeaderBytes, f.data); err != 0) {
    return IoError(who + "read: " + ErrnoText(err));
  }
  if (Crc32c(f.data.data(), f.data.size()) == h.data_crc) f.kind = JournalFile::kReplay;
  return f;
}

}  // namespace

bool AtomicJournal::IsJournalOf(const std::string& name, const std::string& lun_name) {
  const std::string prefix = lun_name + kSuffix + ".";
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0;
}

Result<AtomicJournal::Recovery> AtomicJournal::Recover(const std::string& lun_path, int lun_fd,
                                                       uint64_t lun_size, bool read_only) {
  std::vector<std::string> journals;
  {
    DIR* dir = ::opendir(DirOf(lun_path).c_str());
    if (dir == nullptr) {
      return IoError("file store " + lun_path + ": listing its directory: " + ErrnoText(errno));
    }
    const std::string lun_name = BaseOf(lun_path);
    while (const dirent* e = ::readdir(dir)) {
      if (IsJournalOf(e->d_name, lun_name)) journals.push_back(DirOf(lun_path) + "/" + e->d_name);
    }
    ::closedir(dir);
  }
  Recovery recovery;
  if (journals.empty()) return recovery;
  uint8_t identity[kIdentityBytes] = {};
  if (!Identity(lun_fd, identity)) {
    return IoError("file store " + lun_path + ": statx: " + ErrnoText(errno));
  }
  for (const std::string& path : journals) {
    const std::string who = "file store " + lun_path + ": atomic write journal " + path + ": ";
    UniqueFd fd;
    auto found = Examine(path, who, identity, lun_size, read_only, &fd);
    if (!found.ok()) return found.status();
    if (found->kind == JournalFile::kNone || found->kind == JournalFile::kLive) continue;
    if (found->kind == JournalFile::kReplay) {
      const Header& h = found->header;
      if (read_only) {
        return FailedPrecondition(who + "holds an atomic write of " + std::to_string(h.len) +
                                  " bytes at " + std::to_string(h.offset) +
                                  " that a crash interrupted; open the LUN writable once to "
                                  "complete it");
      }
      int err = PwriteAll(lun_fd, h.offset, found->data, false);
      if (err == 0) err = SyncFd(lun_fd);
      if (err != 0) return IoError(who + "writing its record in place: " + ErrnoText(err));
      recovery.found = Found::kReplayed;
      recovery.offset = h.offset;
      recovery.len = h.len;
      ++recovery.replayed;
    } else if (recovery.found == Found::kNothing) {
      recovery.found = Found::kDiscarded;
    }
    if (read_only) continue;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return IoError(who + "unlink: " + ErrnoText(errno));
    }
    if (const int err = SyncDirOf(path); err != 0) {
      return IoError(who + "fsync: " + ErrnoText(err));
    }
  }
  return recovery;
}

AtomicJournal::AtomicJournal(std::string lun_path, int lun_fd, Gates gates, uint64_t max_len)
    : lun_path_(std::move(lun_path)), lun_fd_(lun_fd), gates_(gates), max_len_(max_len) {
  if (!Identity(lun_fd_, identity_)) std::memset(identity_, 0, sizeof(identity_));
}

AtomicJournal::~AtomicJournal() {
  if (fd_.valid() && !record_left_.load(std::memory_order_acquire)) {
    ::unlink(path_.c_str());  // its own name: never another journal's
  }
}

std::string AtomicJournal::path() const { return path_; }

void AtomicJournal::Submit(Request* request) {
  request->next = nullptr;
  std::lock_guard<std::mutex> lock(queue_mu_);
  *tail_ = request;
  tail_ = &request->next;
  if (draining_) return;
  draining_ = true;
  boost::asio::post(JournalPool(), [this] { Drain(); });
}

void AtomicJournal::Drain() {
  Request* request = nullptr;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    request = head_;
    head_ = request->next;
    if (head_ == nullptr) tail_ = &head_;
  }
  for (;;) {
    const int err = Write(request->offset, request->data);
    Request* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      next = head_;
      if (next != nullptr) {
        head_ = next->next;
        if (head_ == nullptr) tail_ = &head_;
      } else {
        draining_ = false;
      }
    }
    // Last: once the last request has finished, the store (and this journal) may go.
    request->finish(request, err);
    if (next == nullptr) return;
    request = next;
  }
}

int AtomicJournal::Open() {
  std::random_device rd;
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%08x%08x", rd(), rd());
  std::string path = lun_path_ + kSuffix + "." + suffix;
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return errno;
  int err = TryLock(fd.get(), true) ? 0 : errno;
  // Room for the largest record up front: a record then needs no allocation, and its fdatasync
  // no metadata beyond the first.
  if (err == 0 && ::fallocate(fd.get(), 0, 0, static_cast<off_t>(kHeaderBytes + max_len_)) != 0 &&
      errno != EOPNOTSUPP) {
    err = errno;
  }
  // The file must outlast a crash before its first record can count.
  if (err == 0) err = SyncDirOf(path);
  if (err != 0) {
    ::unlink(path.c_str());
    return err;
  }
  path_ = std::move(path);
  fd_ = std::move(fd);
  return 0;
}

int AtomicJournal::Retire() {
  const std::array<uint8_t, kUsedHeader> zeros{};
  int err = PwriteAll(fd_.get(), 0, zeros, false);
  if (err == 0) err = SyncFd(fd_.get());
  if (err == 0) return 0;
  // The record must not outlive its write: without the file it cannot be replayed.
  log::Backing().error("atomic write journal {}: retiring a record: {}; removing the journal",
                       path_, ErrnoText(err));
  fd_.Close();
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) return errno;
  return SyncDirOf(path_);
}

int AtomicJournal::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (data.empty()) return 0;
  if (data.size() > max_len_) return EINVAL;
  if (record_left()) return EIO;
  if (!fd_.valid()) {
    if (const int err = Open(); err != 0) return err;
  }
  // 1. Where the file system shares blocks (reflink clones), unshare the range; then allocate it.
  // A file system that cannot hold the range fails here, before anything is written.
  const auto off = static_cast<off_t>(offset);
  const auto len = static_cast<off_t>(data.size());
  if (::fallocate(lun_fd_, FALLOC_FL_UNSHARE_RANGE, off, len) != 0 && errno != EOPNOTSUPP &&
      errno != EINVAL) {
    return errno;
  }
  if (::fallocate(lun_fd_, 0, off, len) != 0 && errno != EOPNOTSUPP) return errno;
  // 2. The record, durable.
  std::array<uint8_t, kHeaderBytes> header{};
  Header h{offset, data.size(), Crc32c(data.data(), data.size())};
  std::memcpy(h.identity, identity_, kIdentityBytes);
  Encode(h, header.data());
  int err = PwriteAll(fd_.get(), 0, header, false);
  if (err == 0) err = PwriteAll(fd_.get(), kHeaderBytes, data, false);
  if (err == 0) err = SyncFd(fd_.get());
  if (err != 0) {
    // Not applied: the record must not become durable later and be replayed.
    if (fd_.valid() && Retire() != 0) record_left_.store(true, std::memory_order_release);
    return err;
  }
  // 3. In place, alone; then durable.
  gates_.writes.LockExclusive();
  gates_.reads.LockExclusive();
  err = PwriteAll(lun_fd_, offset, data, false);
  gates_.reads.UnlockExclusive();
  gates_.writes.UnlockExclusive();
  if (err == 0) err = SyncFd(lun_fd_);
  if (err != 0) {
    record_left_.store(true, std::memory_order_release);
    log::Backing().error(
        "atomic write journal {}: writing {} bytes at {} in place: {}; the record stays for the "
        "next open of the LUN to complete",
        path_, data.size(), offset, ErrnoText(err));
    return err;
  }
  // 4. Retired, durably, before the write counts as done. A record that could be neither zeroed
  // nor removed is live: the next open writes it in place again, so from here nothing else may be
  // written to the LUN, or that replay would undo it. The store stops serving, as after step 3.
  if (err = Retire(); err != 0) {
    record_left_.store(true, std::memory_order_release);
    log::Backing().error(
        "atomic write journal {}: the record of {} bytes at {} could not be retired: {}; it may "
        "stay, for the next open of the LUN to write in place again",
        path_, data.size(), offset, ErrnoText(err));
  }
  return err;
}

}  // namespace iscsigw::backing
