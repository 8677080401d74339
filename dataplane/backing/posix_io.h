// Blocking positional I/O of whole ranges, for the threads that may block (the file store's pools,
// the atomic write journal). Any thread; no exception escapes.
#pragma once

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
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

}  // namespace iscsigw::backing
