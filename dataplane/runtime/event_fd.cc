#include "dataplane/runtime/event_fd.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "base/status.h"

namespace iscsigw::runtime {

int AssignEventFd(boost::asio::posix::stream_descriptor& event, std::string* error) {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    *error = std::string("eventfd: ") + ErrnoText(errno);
    return -1;
  }
  boost::system::error_code ec;
  event.assign(fd, ec);
  if (ec) {
    ::close(fd);
    *error = "eventfd: " + ec.message();
    return -1;
  }
  return fd;
}

}  // namespace iscsigw::runtime
