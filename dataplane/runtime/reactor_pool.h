// ReactorPool: N reactor threads, each running its own Asio io_context (concurrency hint 1) and
// owning a BufferPool, whose arena it offers to that io_context's FileRing as fixed buffers (pinned
// only if a file store sets the ring up). A connection is placed on the least-loaded reactor and
// stays there.
// Threading: Start/Stop from the owner thread; Pick/AddConnection from any thread (atomics, once
// per connection, never per I/O); context(i)/buffers(i) are used on reactor i's own thread.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "dataplane/runtime/buffer_pool.h"

namespace iscsigw::runtime {

class ReactorPool {
 public:
  explicit ReactorPool(unsigned reactors);
  ~ReactorPool();

  unsigned size() const { return static_cast<unsigned>(reactors_.size()); }
  boost::asio::io_context& context(unsigned i) { return reactors_[i]->io; }
  BufferPool& buffers(unsigned i) { return reactors_[i]->buffers; }
  std::vector<boost::asio::io_context*> contexts();

  void Start();
  // Lets each io_context finish its queued work, then joins the threads.
  void Stop();

  // The reactor with the fewest connections; ties go to the lowest index.
  unsigned PickLeastLoaded() const;
  void AddConnection(unsigned i, int delta) {
    reactors_[i]->connections.fetch_add(delta, std::memory_order_relaxed);
  }
  int connections(unsigned i) const {
    return reactors_[i]->connections.load(std::memory_order_relaxed);
  }
  // Index of the reactor whose thread calls this, or -1 for any other thread.
  static int CurrentIndex();

 private:
  struct Reactor {
    // Before io: the ring (a service of io) holds the arena registered, and handlers destroyed
    // with io may still return buffers, so the pool goes last.
    BufferPool buffers;
    boost::asio::io_context io{1};
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;
    std::atomic<int> connections{0};
    std::thread thread;
  };
  std::vector<std::unique_ptr<Reactor>> reactors_;
};

}  // namespace iscsigw::runtime
