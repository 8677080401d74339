// The eventfd a reactor waits on for completions that arrive from other threads (librbd's, or the
// kernel's io_uring): created non-blocking and close-on-exec, and handed to an Asio descriptor.
#pragma once

#include <boost/asio/posix/stream_descriptor.hpp>
#include <string>

namespace iscsigw::runtime {

// Creates the eventfd and assigns it to `event`, which then owns it. Returns the descriptor, or
// -1 with `*error` saying what failed (nothing is left open).
int AssignEventFd(boost::asio::posix::stream_descriptor& event, std::string* error);

}  // namespace iscsigw::runtime
