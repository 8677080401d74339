#include "dataplane/backing/atomic_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "dataplane/backing/posix_io.h"
#include "dataplane/base/crc32c.h"
#include "dataplane/base/endian.h"
#include "dataplane/base/log.h"

namespace iscsigw::backing {
namespace {

// Header layout (big-endian): magic[8], offset u64, length u64, data CRC32C u32, header CRC32C u32
// (over the 32 bytes before it). The data follows at kHeaderBytes.
constexpr char kMagic[8] = {'I', 'G', 'W', 'A', 'T', 'O', 'M', '1'};
constexpr size_t kUsedHeader = 36;

std::string ErrnoText(int err) { return std::error_code(err, std::system_category()).message(); }

int SyncFd(int fd) { return ::fdatasync(fd) == 0 ? 0 : errno; }

// Makes a directory entry's creation or removal durable.
int SyncDirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid()) return errno;
  return ::fsync(d.get()) == 0 ? 0 : errno;
}

struct Header {
  uint64_t offset = 0;
  uint64_t len = 0;
  uint32_t data_crc = 0;
};

void Encode(const Header& h, uint8_t* out) {
  std::memcpy(out, kMagic, sizeof(kMagic));
  StoreBe64(out + 8, h.offset);
  StoreBe64(out + 16, h.len);
  StoreBe32(out + 24, h.data_crc);
  StoreBe32(out + 28, 0);  // reserved
  StoreBe32(out + 32, Crc32c(out, 32));
}

// False for anything but an intact header: none written, zeroed (retired) or torn.
bool Decode(const uint8_t* in, Header* h) {
  if (std::memcmp(in, kMagic, sizeof(kMagic)) != 0) return false;
  if (LoadBe32(in + 32) != Crc32c(in, 32)) return false;
  h->offset = LoadBe64(in + 8);
  h->len = LoadBe64(in + 16);
  h->data_crc = LoadBe32(in + 24);
  return true;
}

}  // namespace

std::string AtomicJournal::JournalPath(const std::string& lun_path) {
  return lun_path + ".atomic-journal";
}

Result<AtomicJournal::Recovery> AtomicJournal::Recover(const std::string& lun_path, int lun_fd,
                                                       uint64_t lun_size, bool read_only) {
  const std::string path = JournalPath(lun_path);
  const std::string who = "file store " + lun_path + ": atomic write journal " + path + ": ";
  UniqueFd fd(::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return Recovery{};
    return IoError(who + "open: " + ErrnoText(errno));
  }
  auto remove = [&]() -> Status {
    if (read_only) return Status::Ok();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return IoError(who + "unlink: " + ErrnoText(errno));
    }
    if (const int err = SyncDirOf(path); err != 0) return IoError(who + "fsync: " + ErrnoText(err));
    return Status::Ok();
  };
  std::array<uint8_t, kUsedHeader> raw{};
  Header h;
  const int read_err = PreadAll(fd.get(), 0, raw);
  if (read_err != 0 && read_err != EIO) return IoError(who + "read: " + ErrnoText(read_err));
  std::vector<uint8_t> data;
  bool complete = read_err == 0 && Decode(raw.data(), &h);
  if (complete) {
    if (h.len == 0 || h.offset > lun_size || h.len > lun_size - h.offset) {
      return IoError(who + "its record (" + std::to_string(h.len) + " bytes at " +
                     std::to_string(h.offset) + ") lies outside the LUN's " +
                     std::to_string(lun_size) + " bytes; move it away to open the LUN");
    }
    data.resize(h.len);
    const int err = PreadAll(fd.get(), kHeaderBytes, data);
    if (err != 0 && err != EIO) return IoError(who + "read: " + ErrnoText(err));
    // A header without all of its data: the record never became durable, nor its write started.
    complete = err == 0 && Crc32c(data.data(), data.size()) == h.data_crc;
  }
  if (!complete) {
    if (Status s = remove(); !s.ok()) return s;
    return Recovery{Found::kDiscarded};
  }
  if (read_only) {
    return FailedPrecondition(who + "holds an atomic write of " + std::to_string(h.len) +
                              " bytes at " + std::to_string(h.offset) +
                              " that a crash interrupted; open the LUN writable once to complete "
                              "it");
  }
  if (int err = PwriteAll(lun_fd, h.offset, data, false); err != 0 || (err = SyncFd(lun_fd)) != 0) {
    return IoError(who + "writing its record in place: " + ErrnoText(err));
  }
  if (Status s = remove(); !s.ok()) return s;
  return Recovery{Found::kReplayed, h.offset, h.len};
}

AtomicJournal::AtomicJournal(std::string lun_path, uint64_t max_len)
    : path_(JournalPath(lun_path)), max_len_(max_len) {}

AtomicJournal::~AtomicJournal() {
  if (fd_.valid() && !record_left_) {
    fd_.Close();
    ::unlink(path_.c_str());  // a retired journal left behind is discarded at the next open
  }
}

int AtomicJournal::Open() {
  UniqueFd fd(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return errno;
  // Room for the largest record up front: a record then needs no allocation, and its fdatasync
  // no metadata beyond the first.
  if (::fallocate(fd.get(), 0, 0, static_cast<off_t>(kHeaderBytes + max_len_)) != 0 &&
      errno != EOPNOTSUPP) {
    const int err = errno;
    ::unlink(path_.c_str());
    return err;
  }
  // The file must outlast a crash before its first record can count.
  if (const int err = SyncDirOf(path_); err != 0) {
    ::unlink(path_.c_str());
    return err;
  }
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

int AtomicJournal::Write(int lun_fd, uint64_t offset, std::span<const uint8_t> data,
                         WriteGate& gate) {
  if (data.empty()) return 0;
  if (data.size() > max_len_) return EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  if (record_left_) return EIO;
  if (!fd_.valid()) {
    if (const int err = Open(); err != 0) return err;
  }
  // 1. A thin file that cannot hold the range fails here, before anything is written.
  if (::fallocate(lun_fd, 0, static_cast<off_t>(offset), static_cast<off_t>(data.size())) != 0 &&
      errno != EOPNOTSUPP) {
    return errno;
  }
  // 2. The record, durable.
  std::array<uint8_t, kHeaderBytes> header{};
  Encode(Header{offset, data.size(), Crc32c(data.data(), data.size())}, header.data());
  int err = PwriteAll(fd_.get(), 0, header, false);
  if (err == 0) err = PwriteAll(fd_.get(), kHeaderBytes, data, false);
  if (err == 0) err = SyncFd(fd_.get());
  if (err != 0) {
    // Not applied: the record must not become durable later and be replayed.
    if (const int retire_err = Retire(); retire_err != 0) record_left_ = true;
    return err;
  }
  // 3. In place, alone, durable.
  gate.LockExclusive();
  err = PwriteAll(lun_fd, offset, data, false);
  gate.UnlockExclusive();
  if (err == 0) err = SyncFd(lun_fd);
  if (err != 0) {
    record_left_ = true;
    log::Backing().error(
        "atomic write journal {}: writing {} bytes at {} in place: {}; the record stays for the "
        "next open to complete, and atomic writes fail until then",
        path_, data.size(), offset, ErrnoText(err));
    return err;
  }
  // 4. Retired, durably, before the write counts as done.
  return Retire();
}

}  // namespace iscsigw::backing
