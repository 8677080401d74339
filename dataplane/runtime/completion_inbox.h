// CompletionInbox: how work finished on a thread the reactor does not own (librbd's callback
// threads, a blocking pool) gets back onto the reactor that started it. It is an Asio service of
// the reactor's io_context, so every store on that reactor shares it and it goes away with the
// io_context.
//
// Items: the caller owns each Item (embedded in its operation record); Post() links it into a
// multi-producer single-consumer intrusive list (a lock-free stack, reversed on draining so that
// items run in the order they were posted) and signals an eventfd when the list was empty. The
// reactor waits on the eventfd and runs each item's `run` on its own thread. Nothing is allocated
// per item: the list is intrusive, and the eventfd wait reuses Asio's handler memory.
//
// Depth: unbounded by the inbox itself, bounded by its users: an item is posted only for an
// operation the reactor started (Expect), and operations in flight are bounded by the sessions'
// command windows.
//
// The inbox keeps its io_context running only while items are expected, like any Asio I/O: the
// reactor calls Expect() before it starts an operation whose completion will be posted, and the
// count drops when the item has run.
//
// Threading: For() from any thread; Post() from any thread (including the reactor's own); Expect(),
// pending() and everything else on the reactor thread. An item must stay valid from Post() until
// its run() has started. Items posted after the io_context shut down never run.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <string>

namespace iscsigw::runtime {

class CompletionInbox final : public boost::asio::execution_context::service {
 public:
  struct Item {
    // Runs once on the reactor thread.
    void (*run)(Item* item) = nullptr;
    Item* next = nullptr;  // the inbox's link while posted
  };

  // The inbox of ioc's reactor, set up on first use.
  static CompletionInbox& For(boost::asio::io_context& ioc);

  // Empty when the inbox works; otherwise why not (no eventfd). A store must not use an inbox
  // that failed.
  const std::string& error() const { return error_; }

  // Reactor thread: one more item will be posted. Arms the eventfd wait.
  void Expect();
  // Any thread: hands `item` to the reactor, where item->run(item) runs once. Never runs it inline.
  void Post(Item* item);

  // Items expected and not yet run; items run so far (tests). Reactor thread.
  uint64_t pending() const { return pending_; }
  uint64_t ran() const { return ran_; }

  static boost::asio::execution_context::id id;
  explicit CompletionInbox(boost::asio::io_context& ioc);
  ~CompletionInbox() override;
  CompletionInbox(const CompletionInbox&) = delete;
  CompletionInbox& operator=(const CompletionInbox&) = delete;

 private:
  void shutdown() override;
  void Arm();
  void Drain();

  boost::asio::io_context& ioc_;
  int event_fd_ = -1;
  boost::asio::posix::stream_descriptor event_;  // owns event_fd_
  std::atomic<Item*> head_{nullptr};             // any thread: the posted items, newest first
  bool armed_ = false;                           // reactor thread from here on
  bool shut_down_ = false;
  uint64_t pending_ = 0;
  uint64_t ran_ = 0;
  std::string error_;
};

}  // namespace iscsigw::runtime
