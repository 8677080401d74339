#include "dataplane/backing/file/allowed_paths.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>

namespace iscsigw::backing {

namespace {

constexpr int kOpenat2Retries = 8;  // EAGAIN: a rename or mount raced the resolution

// Whether the kernel offers openat2; cleared at the first ENOSYS.
std::atomic<bool> g_have_openat2{true};

std::string Hint() { return std::string(kAllowedPathsHint); }

Status Refused(const std::string& path, const std::string& why) {
  return PermissionDenied(path + " " + why + ": " + Hint());
}

// An error of a file system call on an allowed path.
Status CallError(const std::string& path, const char* call, int err) {
  std::string msg = path + ": " + call + ": " + ErrnoText(err);
  switch (err) {
    case ELOOP:
    case EXDEV:
      return Refused(path, "is reached through a symbolic link or leaves its directory");
    case ENOENT:
      return NotFound(std::move(msg));
    case EEXIST:
      return AlreadyExists(std::move(msg));
    case ENOSPC:
    case EDQUOT:
      return Status(StatusCode::kResourceExhausted, std::move(msg));
    default:
      return IoError(std::move(msg));
  }
}

// Splits "a/b/c" into its components (the text was checked: none is empty, "." or "..").
std::vector<std::string> Components(std::string_view rest) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find('/', start);
    if (end == std::string_view::npos) end = rest.size();
    parts.emplace_back(rest.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// What an opened LUN path may be: a regular file or a block device (a directory only when asked
// for one). A FIFO, socket or character device is never a LUN.
Status CheckKind(int fd, const std::string& path, int flags) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return CallError(path, "fstat", errno);
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return Status::Ok();
  if (S_ISDIR(st.st_mode) && (flags & (O_DIRECTORY | O_PATH)) != 0) return Status::Ok();
  if (S_ISLNK(st.st_mode)) {
    return Refused(path, "is reached through a symbolic link or leaves its directory");
  }
  return InvalidArgument(path + ": not a regular file or block device");
}

// errno of a failed openat(O_NOFOLLOW) of `name` in `at`, with ENOTDIR from a symbolic link (an
// O_DIRECTORY open of one) reported as ELOOP, like any other link met on the way.
int WalkErrno(int at, const std::string& name) {
  const int err = errno;
  struct stat st {};
  if (err == ENOTDIR && ::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(st.st_mode)) {
    return ELOOP;
  }
  return err;
}

}  // namespace

Result<std::shared_ptr<const AllowedPaths>> AllowedPaths::Make(
    const std::vector<std::string>& roots, bool walk_only) {
  std::shared_ptr<AllowedPaths> allowed(new AllowedPaths());
  allowed->walk_only_ = walk_only;
  for (const std::string& root : roots) {
    if (root.empty() || root[0] != '/') {
      return InvalidArgument("backing path " + root + ": must be an absolute path");
    }
    char resolved[PATH_MAX];
    if (::realpath(root.c_str(), resolved) == nullptr) {
      return InvalidArgument("backing path " + root + ": " + ErrnoText(errno));
    }
    struct stat st {};
    if (::stat(resolved, &st) != 0) {
      return InvalidArgument("backing path " + root + ": " + ErrnoText(errno));
    }
    if (S_ISDIR(st.st_mode)) {
      UniqueFd fd(::open(resolved, O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!fd.valid()) {
        return InvalidArgument("backing path " + root + ": " + ErrnoText(errno));
      }
      allowed->dirs_.push_back(Dir{resolved, std::move(fd)});
    } else if (S_ISBLK(st.st_mode)) {
      allowed->devices_.push_back(Device{root, resolved, st.st_rdev});
    } else {
      return InvalidArgument("backing path " + root + ": not a directory or a block device");
    }
  }
  return std::shared_ptr<const AllowedPaths>(std::move(allowed));
}

std::shared_ptr<const AllowedPaths> AllowedPaths::None() {
  static const std::shared_ptr<const AllowedPaths> none(new AllowedPaths());
  return none;
}

std::vector<std::string> AllowedPaths::roots() const {
  std::vector<std::string> out;
  for (const Dir& d : dirs_) out.push_back(d.path);
  for (const Device& d : devices_) out.push_back(d.given);
  return out;
}

const AllowedPaths::Dir* AllowedPaths::DirFor(std::string_view path, std::string_view* rest) const {
  const Dir* best = nullptr;
  for (const Dir& d : dirs_) {
    size_t skip = 0;
    if (d.path == "/") {
      skip = 1;
    } else if (path.size() > d.path.size() + 1 && path.substr(0, d.path.size()) == d.path &&
               path[d.path.size()] == '/') {
      skip = d.path.size() + 1;
    } else {
      continue;
    }
    if (best == nullptr || d.path.size() > best->path.size()) {
      best = &d;
      *rest = path.substr(skip);
    }
  }
  return best;
}

const AllowedPaths::Device* AllowedPaths::DeviceFor(std::string_view path) const {
  for (const Device& d : devices_) {
    if (path == d.given || path == d.resolved) return &d;
  }
  return nullptr;
}

Status AllowedPaths::Check(std::string_view path) const {
  const std::string p(path);
  if (path.empty() || path[0] != '/') return Refused(p, "is not an absolute path");
  for (const std::string& part : Components(path.substr(1))) {
    if (part.empty() || part == "." || part == "..") {
      return Refused(p, "has an empty, '.' or '..' component");
    }
  }
  if (DeviceFor(path) != nullptr) return Status::Ok();
  std::string_view rest;
  if (DirFor(path, &rest) != nullptr) return Status::Ok();
  return Refused(p, "is outside the allowed directories and devices");
}

Result<UniqueFd> AllowedPaths::OpenBeneath(const Dir& dir, std::string_view rest,
                                           const std::string& path, int flags, mode_t mode) const {
  const std::string rel(rest);
  flags |= O_CLOEXEC;
  if (!walk_only_ && g_have_openat2.load(std::memory_order_relaxed)) {
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags);
    how.mode = (flags & O_CREAT) != 0 ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    for (int attempt = 0; attempt < kOpenat2Retries; ++attempt) {
      const long fd = ::syscall(SYS_openat2, dir.fd.get(), rel.c_str(), &how, sizeof(how));
      if (fd >= 0) return UniqueFd(static_cast<int>(fd));
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno != ENOSYS) return CallError(path, "open", errno);
      g_have_openat2.store(false, std::memory_order_relaxed);
      break;
    }
    if (g_have_openat2.load(std::memory_order_relaxed)) {
      return CallError(path, "open", EAGAIN);
    }
  }
  // The walk: every directory on the way opened without following a symbolic link.
  const std::vector<std::string> parts = Components(rest);
  UniqueFd held;
  int at = dir.fd.get();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const int next = ::openat(at, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return CallError(path, "open", WalkErrno(at, parts[i]));
    held.Reset(next);
    at = next;
  }
  const int fd = ::openat(at, parts.back().c_str(), flags | O_NOFOLLOW, mode);
  if (fd < 0) return CallError(path, "open", WalkErrno(at, parts.back()));
  return UniqueFd(fd);
}

Result<UniqueFd> AllowedPaths::Open(const std::string& path, int flags, mode_t mode) const {
  if (Status s = Check(path); !s.ok()) return s;
  // Opened non-blocking, so that a FIFO planted at the path cannot hold the caller; the flag is
  // cleared once the kind is checked.
  const bool add_nonblock = (flags & (O_NONBLOCK | O_PATH)) == 0;
  const int open_flags = flags | (add_nonblock ? O_NONBLOCK : 0);
  UniqueFd fd;
  if (const Device* dev = DeviceFor(path)) {
    // A device is never created: with O_CREAT | O_EXCL it "exists".
    if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return CallError(path, "open", EEXIST);
    fd.Reset(::open(path.c_str(), (open_flags & ~O_CREAT) | O_CLOEXEC));
    if (!fd.valid()) return CallError(path, "open", errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return CallError(path, "fstat", errno);
    if (!S_ISBLK(st.st_mode) || st.st_rdev != dev->rdev) {
      return Refused(path, "is no longer the block device --backing-allow named");
    }
  } else {
    std::string_view rest;
    const Dir* dir = DirFor(path, &rest);
    if (dir == nullptr) return Refused(path, "is outside the allowed directories and devices");
    auto opened = OpenBeneath(*dir, rest, path, open_flags, mode);
    if (!opened.ok()) return opened.status();
    fd = std::move(opened.value());
    if (Status s = CheckKind(fd.get(), path, flags); !s.ok()) return s;
  }
  if (add_nonblock) {
    const int fl = ::fcntl(fd.get(), F_GETFL);
    if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) {
      return CallError(path, "fcntl", errno);
    }
  }
  return fd;
}

Status AllowedPaths::Unlink(const std::string& path) const {
  if (Status s = Check(path); !s.ok()) return s;
  std::string_view rest;
  const Dir* dir = DirFor(path, &rest);
  if (dir == nullptr) return Refused(path, "is a device, which the gateway never removes");
  const size_t slash = rest.rfind('/');
  UniqueFd parent;
  int at = dir->fd.get();
  if (slash != std::string_view::npos) {
    auto opened = OpenBeneath(*dir, rest.substr(0, slash), path, O_PATH | O_DIRECTORY, 0);
    if (!opened.ok()) {
      return opened.status().code() == StatusCode::kNotFound ? Status::Ok() : opened.status();
    }
    parent = std::move(opened.value());
    at = parent.get();
  }
  const std::string base(slash == std::string_view::npos ? rest : rest.substr(slash + 1));
  if (::unlinkat(at, base.c_str(), 0) != 0 && errno != ENOENT) {
    return CallError(path, "unlink", errno);
  }
  return Status::Ok();
}

}  // namespace iscsigw::backing
