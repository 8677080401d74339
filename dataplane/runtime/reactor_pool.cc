#include "dataplane/runtime/reactor_pool.h"

#include <pthread.h>

#include <string>

#include "dataplane/runtime/file_ring.h"
#include "dataplane/runtime/io_trace.h"
#include "dataplane/runtime/stats.h"

namespace iscsigw::runtime {
namespace {
thread_local int current_reactor = -1;
}

ReactorPool::ReactorPool(unsigned reactors) {
  if (reactors == 0) reactors = 1;
  for (unsigned i = 0; i < reactors; ++i) {
    reactors_.push_back(std::make_unique<Reactor>());
    FileRing::OfferFixedBuffers(reactors_[i]->io, reactors_[i]->buffers.arena());
  }
  // Metrics shards exist before any reactor runs, so the hot path never allocates them.
  Stats::Global().Configure(reactors);
  for (unsigned i = 0; i < reactors; ++i) {
    Stats::Global().SetConnectionGauge(i, &reactors_[i]->connections);
  }
}

ReactorPool::~ReactorPool() {
  Stop();
  for (unsigned i = 0; i < reactors_.size(); ++i) {
    if (Stats::Global().connection_gauge(i) == &reactors_[i]->connections) {
      Stats::Global().SetConnectionGauge(i, nullptr);
    }
  }
}

std::vector<boost::asio::io_context*> ReactorPool::contexts() {
  std::vector<boost::asio::io_context*> out;
  for (auto& r : reactors_) out.push_back(&r->io);
  return out;
}

void ReactorPool::Start() {
  for (unsigned i = 0; i < reactors_.size(); ++i) {
    Reactor* r = reactors_[i].get();
    r->guard.emplace(r->io.get_executor());
    r->thread = std::thread([r, i] {
      current_reactor = static_cast<int>(i);
      const std::string name = "reactor-" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      clockid_t clock{};
      const bool timed = pthread_getcpuclockid(pthread_self(), &clock) == 0;
      if (timed) Stats::Global().SetReactorClock(i, clock);
      r->io.run();
      // The clock names this thread's id: withdraw it before the id can be reused.
      if (timed) Stats::Global().ClearReactorClock(i);
    });
  }
}

void ReactorPool::Stop() {
  for (auto& r : reactors_) r->guard.reset();
  bool joined = false;
  for (auto& r : reactors_) {
    if (r->thread.joinable()) {
      r->thread.join();
      joined = true;
    }
  }
  // A tracing build prints where its commands' time went once the reactors have stopped.
  if constexpr (io_trace::kEnabled) {
    if (joined) io_trace::ReportAtExit();
  }
}

unsigned ReactorPool::PickLeastLoaded() const {
  unsigned best = 0;
  int best_n = reactors_[0]->connections.load(std::memory_order_relaxed);
  for (unsigned i = 1; i < reactors_.size(); ++i) {
    const int n = reactors_[i]->connections.load(std::memory_order_relaxed);
    if (n < best_n) {
      best = i;
      best_n = n;
    }
  }
  return best;
}

int ReactorPool::CurrentIndex() { return current_reactor; }

}  // namespace iscsigw::runtime
