#include "controlplane/state/lun_files.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace iscsigw::state {

namespace {

std::string Errno(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

// ENOSPC and EDQUOT are a full LUN directory, which callers (CSI) tell apart from other failures.
Status FileError(const std::string& what, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return Status(StatusCode::kResourceExhausted, Errno(what, path, err));
  }
  return IoError(Errno(what, path, err));
}

std::string DirOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError("open", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : FileError("fsync", dir, err);
}

// Copies [0, size) of `in` to `out` data extent by data extent, so that holes stay holes.
Status SparseCopy(int in, int out, uint64_t size, const std::string& src, const std::string& dst) {
  auto off = static_cast<off_t>(0);
  const auto end = static_cast<off_t>(size);
  while (off < end) {
    off_t data = ::lseek(in, off, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole is left
      return FileError("lseek SEEK_DATA", src, errno);
    }
    if (data >= end) break;
    off_t hole = ::lseek(in, data, SEEK_HOLE);
    if (hole < 0) return FileError("lseek SEEK_HOLE", src, errno);
    if (hole > end) hole = end;
    loff_t in_off = data;
    loff_t out_off = data;
    while (in_off < hole) {
      const ssize_t n =
          ::copy_file_range(in, &in_off, out, &out_off, static_cast<size_t>(hole - in_off), 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return FileError("copy_file_range to", dst, errno);
      }
      if (n == 0) return IoError("copy_file_range from " + src + ": unexpected end of file");
    }
    off = hole;
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ResolveLunPath(const std::string& dir, const std::string& path) {
  if (path.empty()) return InvalidArgument("path is empty");
  if (path[0] == '/') return path;
  if (dir.empty()) {
    return InvalidArgument("path " + path +
                           " is relative and the gateway has no LUN directory (--lun-dir)");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || part.size() > 255) {
      return InvalidArgument("path " + path +
                             ": a relative path must be plain names without '.', '..' or '//'");
    }
    if (start == 0 && part == "snapshots") {
      return InvalidArgument("path " + path + ": snapshots/ in the LUN directory is the gateway's");
    }
    start = end + 1;
  }
  return dir + (dir.back() == '/' ? "" : "/") + path;
}

std::string SnapshotDir(const std::string& lun_dir) { return lun_dir + "/snapshots"; }

Status PrepareLunDir(const std::string& dir) {
  for (const std::string& d : {dir, SnapshotDir(dir)}) {
    if (::mkdir(d.c_str(), 0750) != 0 && errno != EEXIST) return FileError("mkdir", d, errno);
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0) return FileError("stat", d, errno);
    if (!S_ISDIR(st.st_mode)) return FailedPrecondition(d + " is not a directory");
  }
  return Status::Ok();
}

Result<DirCapacity> CapacityOf(const std::string& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return FileError("statvfs", dir, errno);
  DirCapacity c;
  c.total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  c.available_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return c;
}

bool SharesBlocks(const std::string& dir) {
  std::string a = dir + "/.reflink-probe-XXXXXX";
  std::string b = dir + "/.reflink-probe-XXXXXX";
  UniqueFd fa(::mkstemp(a.data()));
  if (fa.get() < 0) return false;
  UniqueFd fb(::mkstemp(b.data()));
  bool shared = false;
  if (fb.get() >= 0) {
    char block[4096] = {1};
    shared = ::pwrite(fa.get(), block, sizeof(block), 0) == sizeof(block) &&
             ::ioctl(fb.get(), FICLONE, fa.get()) == 0;
    ::unlink(b.c_str());
  }
  ::unlink(a.c_str());
  return shared;
}

Result<CopyResult> CopyLunFile(const api::AllowedPaths& allowed, const std::string& src,
                               const std::string& dst, uint64_t size_bytes, bool clone_only,
                               const std::string& why_clone_only) {
  auto opened_in = allowed.Open(src, O_RDONLY);
  if (!opened_in.ok()) return opened_in.status();
  UniqueFd in = std::move(opened_in.value());
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) return FileError("fstat", src, errno);
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(src + " is not a regular file");
  const auto src_size = static_cast<uint64_t>(st.st_size);
  if (size_bytes != 0 && size_bytes < src_size) {
    return Status(StatusCode::kOutOfRange, "size_bytes " + std::to_string(size_bytes) +
                                               " is smaller than the source's " +
                                               std::to_string(src_size));
  }
  auto opened_out = allowed.Open(dst, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (!opened_out.ok()) {
    if (opened_out.status().code() == StatusCode::kAlreadyExists) {
      return AlreadyExists(dst + " already exists");
    }
    return opened_out.status();
  }
  UniqueFd out = std::move(opened_out.value());
  CopyResult result;
  Status s = Status::Ok();
  if (::ioctl(out.get(), FICLONE, in.get()) == 0) {
    result.shared_blocks = true;
  } else if (clone_only) {
    s = FailedPrecondition(dst + " cannot share blocks with " + src + " (" + std::strerror(errno) +
                           "); " + why_clone_only);
  } else {
    s = SparseCopy(in.get(), out.get(), src_size, src, dst);
  }
  const uint64_t final_size = size_bytes == 0 ? src_size : size_bytes;
  if (s.ok() && ::ftruncate(out.get(), static_cast<off_t>(final_size)) != 0) {
    s = FileError("ftruncate", dst, errno);
  }
  if (s.ok() && ::fdatasync(out.get()) != 0) s = FileError("fdatasync", dst, errno);
  if (s.ok()) s = SyncDir(DirOf(dst));
  if (!s.ok()) {
    (void)allowed.Unlink(dst);
    return s;
  }
  result.size_bytes = final_size;
  return result;
}

Status RemoveLunFile(const api::AllowedPaths& allowed, const std::string& path) {
  auto there = allowed.Open(path, O_PATH);
  if (!there.ok()) {
    return there.status().code() == StatusCode::kNotFound ? Status::Ok() : there.status();
  }
  struct stat st {};
  if (::fstat(there.value().get(), &st) != 0) return FileError("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return FailedPrecondition(path + " is not a regular file; it is left in place");
  }
  if (Status s = allowed.Unlink(path); !s.ok()) return s;
  return SyncDir(DirOf(path));
}

}  // namespace iscsigw::state
