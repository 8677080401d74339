#include "dataplane/runtime/completion_inbox.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dataplane/runtime/event_fd.h"

namespace iscsigw::runtime {

boost::asio::execution_context::id CompletionInbox::id;

CompletionInbox& CompletionInbox::For(boost::asio::io_context& ioc) {
  return boost::asio::use_service<CompletionInbox>(ioc);
}

CompletionInbox::CompletionInbox(boost::asio::io_context& ioc)
    : boost::asio::execution_context::service(ioc), ioc_(ioc), event_(ioc) {
  event_fd_ = AssignEventFd(event_, &error_);
}

CompletionInbox::~CompletionInbox() = default;

void CompletionInbox::shutdown() {
  shut_down_ = true;
  boost::system::error_code ignored;
  event_.close(ignored);  // the pending wait is cancelled; its handler is destroyed, not run
  event_fd_ = -1;
}

void CompletionInbox::Expect() {
  ++pending_;
  if (!armed_ && !shut_down_) Arm();
}

void CompletionInbox::Post(Item* item) {
  Item* old = head_.load(std::memory_order_relaxed);
  do {
    item->next = old;
  } while (!head_.compare_exchange_weak(old, item, std::memory_order_release,
                                        std::memory_order_relaxed));
  // Only the first item of an empty list signals: the reactor reads the eventfd before it takes
  // the list, so an item pushed after that finds the list empty and signals again.
  if (old == nullptr) {
    const uint64_t one = 1;
    (void)!::write(event_fd_, &one, sizeof(one));
  }
}

// The eventfd is waited on only while items are expected: a pending wait is work for the
// io_context, and an idle inbox must not keep its reactor from stopping.
void CompletionInbox::Arm() {
  armed_ = true;
  event_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this](const boost::system::error_code&) {
                      armed_ = false;
                      if (shut_down_ || pending_ == 0) return;
                      // Armed again before the list is taken: an item posted after that signals
                      // the eventfd while this wait is queued, so none is left behind.
                      Arm();
                      Drain();
                    });
}

void CompletionInbox::Drain() {
  uint64_t signals = 0;
  (void)!::read(event_fd_, &signals, sizeof(signals));
  Item* list = head_.exchange(nullptr, std::memory_order_acquire);
  // Newest first: reversed, they run in the order they were posted.
  Item* fifo = nullptr;
  while (list != nullptr) {
    Item* next = list->next;
    list->next = fifo;
    fifo = list;
    list = next;
  }
  while (fifo != nullptr) {
    Item* next = fifo->next;  // read first: run() may reuse the item at once
    --pending_;
    ++ran_;
    fifo->run(fifo);
    fifo = next;
  }
  if (pending_ == 0 && armed_) {
    boost::system::error_code ignored;
    event_.cancel(ignored);
  }
}

}  // namespace iscsigw::runtime
