// Blocking positional I/O of whole ranges, for the threads that may block (the file store's pools,
// the atomic write journal). Any thread; no exception escapes.
#pragma once

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <span>

namespace iscsigw::backing {

// The whole range, or a positive errno (EIO for an end of file inside it).
inline int PreadAll(int fd, uint64_t offset, std::span<uint8_t> buf) {
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

// pwrite with RWF_DSYNC when fua: the data is stable when it returns.
inline int PwriteAll(int fd, uint64_t offset, std::span<const uint8_t> buf, bool fua) {
  size_t done = 0;
  while (done < buf.size()) {
    iovec iov{const_cast<uint8_t*>(buf.data() + done), buf.size() - done};
    const ssize_t n =
        ::pwritev2(fd, &iov, 1, static_cast<off_t>(offset + done), fua ? RWF_DSYNC : 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// A new open file description of the file `fd` refers to (through /proc/self/fd), with `flags`.
// Linux reports a writeback error once to each open file description: a waiter with one of its
// own learns of every error that happens while it is open, whichever other waiter's sync took the
// error first. -1 with errno on failure.
inline int ReopenFd(int fd, int flags) {
  char path[40];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  return ::open(path, flags | O_CLOEXEC);
}

// A write that is stable when it returns 0 (fua), through an open file description of its own
// (ReopenFd), so that a writeback error of its pages is reported to it even when another waiter's
// sync on `fd` takes that error first; without fua, pwrite on `fd`.
inline int PwriteAllDurable(int fd, uint64_t offset, std::span<const uint8_t> buf, bool fua) {
  if (!fua) return PwriteAll(fd, offset, buf, false);
  const int own = ReopenFd(fd, O_WRONLY);
  if (own < 0) return errno;
  int err = PwriteAll(own, offset, buf, false);
  if (err == 0 && ::fdatasync(own) != 0) err = errno;
  ::close(own);
  return err;
}

}  // namespace iscsigw::backing
