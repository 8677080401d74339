// OfflineRbdStore (rbd_store.h): an rbd LUN whose image is retried in the background until it
// opens.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "dataplane/backing/deferred_shared_object.h"
#include "dataplane/backing/rbd/rbd_store.h"

namespace iscsigw::backing {

struct OfflineRbdStore::State {
  RbdStoreOptions options;
  std::vector<boost::asio::io_context*> slots;
  uint32_t block_size = 512;
  uint64_t offline_size = 0;
  std::string name;
  std::atomic<RbdStore*> live{nullptr};          // set once by the retry thread; owned by `store`
  std::unique_ptr<RbdStore> store;               // written by the retry thread before `live`
  std::shared_ptr<DeferredSharedObject> shared;  // options.shared(); attached before `live`
  // The retry thread has returned. Shared on its own: a retired thread's entry must not keep the
  // state (and the store it holds open) alive.
  std::shared_ptr<std::atomic<bool>> ended = std::make_shared<std::atomic<bool>>(false);
  std::mutex mu;  // guards what follows
  std::condition_variable cv;
  bool stop = false;
  std::string reason;
};

OfflineRbdStore::OfflineRbdStore(RbdStoreOptions options,
                                 std::vector<boost::asio::io_context*> slots, uint32_t block_size,
                                 std::string first_error)
    : state_(std::make_shared<State>()), slots_(slots) {
  State& s = *state_;
  s.name = options.pool + "/" + (options.ns.empty() ? "" : options.ns + "/") + options.image;
  s.offline_size = options.size_bytes != 0 ? options.size_bytes : block_size;
  s.options = std::move(options);
  s.slots = std::move(slots);
  s.block_size = block_size;
  s.reason = std::move(first_error);
  if (s.options.shared()) s.shared = std::make_shared<DeferredSharedObject>();
  log::Backing().warn("rbd store {}: offline, retrying in the background: {}", s.name, s.reason);
}

std::shared_ptr<SharedObject> OfflineRbdStore::shared_object() const { return state_->shared; }

void OfflineRbdStore::Start(OnOnline on_online, std::chrono::milliseconds first_retry,
                            std::chrono::milliseconds max_retry) {
  thread_ = std::thread([state = state_, on_online = std::move(on_online), first_retry, max_retry] {
    State& s = *state;
    struct Ended {  // last to go, on every return
      State& s;
      ~Ended() { s.ended->store(true, std::memory_order_release); }
    } ended{s};
    auto delay = first_retry;
    auto last_log = std::chrono::steady_clock::now();
    std::string logged = s.reason;
    for (;;) {
      {
        std::unique_lock lock(s.mu);
        if (s.cv.wait_for(lock, delay, [&] { return s.stop; })) return;
      }
      delay = std::min(delay * 2, max_retry);
      auto r = RbdStore::Open(s.options, s.slots);
      std::string error;
      if (!r.ok()) {
        error = r.status().message();
      } else if (r.value()->size_bytes() % s.block_size != 0) {
        error = "rbd store " + s.name + ": size " + std::to_string(r.value()->size_bytes()) +
                " is not a multiple of block_size " + std::to_string(s.block_size);
      }
      if (error.empty()) {
        std::unique_lock lock(s.mu);
        if (s.stop) return;  // the LUN is gone; the store closes here, off every reactor
        const uint64_t size = r.value()->size_bytes();
        s.store = std::move(r).value();
        s.reason.clear();
        if (s.shared != nullptr) s.shared->Attach(s.store->shared_object());
        s.live.store(s.store.get(), std::memory_order_release);
        lock.unlock();
        log::Backing().info("rbd store {}: online, {} bytes", s.name, size);
        if (on_online) on_online(s.offline_size, size);
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      const bool changed = error != logged;
      {
        std::lock_guard lock(s.mu);
        s.reason = error;
      }
      if (changed || now - last_log >= std::chrono::minutes(1)) {
        log::Backing().warn("rbd store {}: still offline, retrying within {} ms: {}", s.name,
                            delay.count(), error);
        logged = error;
        last_log = now;
      }
    }
  });
}

OfflineRbdStore::~OfflineRbdStore() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (!thread_.joinable()) return;
  bool on_reactor = false;
  for (auto* ioc : slots_) on_reactor |= ioc->get_executor().running_in_this_thread();
  if (on_reactor) {
    // A reactor must not wait for a connect attempt: the thread (which holds the state, and the
    // store it may still open) finishes on its own and is joined later.
    RetireRetry(std::move(thread_), state_);
  } else {
    thread_.join();
  }
}

namespace {
struct RetiredRetry {
  std::thread thread;
  std::shared_ptr<const std::atomic<bool>> ended;
};
std::mutex retired_mu;
std::vector<RetiredRetry> retired;  // guarded by retired_mu
}  // namespace

void OfflineRbdStore::RetireRetry(std::thread thread, const std::shared_ptr<State>& state) {
  std::lock_guard lock(retired_mu);
  // Those that have returned since are joined now (at once), so that the list stays short.
  std::erase_if(retired, [](RetiredRetry& r) {
    if (!r.ended->load(std::memory_order_acquire)) return false;
    r.thread.join();
    return true;
  });
  if (state->ended->load(std::memory_order_acquire)) {
    thread.join();  // it has returned: nothing to wait for
    return;
  }
  retired.push_back({std::move(thread), state->ended});
}

size_t OfflineRbdStore::JoinRetiredRetries() {
  std::vector<RetiredRetry> all;
  {
    std::lock_guard lock(retired_mu);
    all.swap(retired);
  }
  for (auto& r : all) r.thread.join();
  return all.size();
}

RbdStore* OfflineRbdStore::Live() const { return state_->live.load(std::memory_order_acquire); }

bool OfflineRbdStore::preferred() const {
  RbdStore* s = Live();
  return s == nullptr || s->preferred();
}

int OfflineRbdStore::ready() const {
  RbdStore* s = Live();
  return s != nullptr ? s->ready() : ENOTCONN;
}

std::string OfflineRbdStore::offline_reason() const {
  if (RbdStore* s = Live(); s != nullptr) return s->offline_reason();
  std::lock_guard lock(state_->mu);
  return state_->reason;
}

uint64_t OfflineRbdStore::size_bytes() const {
  RbdStore* s = Live();
  return s != nullptr ? s->size_bytes() : state_->offline_size;
}

uint64_t OfflineRbdStore::unmap_granularity() const {
  RbdStore* s = Live();
  return s != nullptr ? s->unmap_granularity() : uint64_t{4} << 20;  // librbd's default object
}

void OfflineRbdStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf,
                           IoCompletion done) {
  if (RbdStore* s = Live()) return s->Read(slot, offset, buf, done);
  done(ENOTCONN);
}

void OfflineRbdStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                            IoCompletion done) {
  if (RbdStore* s = Live()) return s->Write(slot, offset, buf, fua, done);
  done(ENOTCONN);
}

BackingStore::AtomicLimits OfflineRbdStore::atomic_limits() const {
  RbdStore* s = Live();
  return s != nullptr ? s->atomic_limits() : AtomicLimits{};
}

void OfflineRbdStore::WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf,
                                  bool fua, IoCompletion done) {
  if (RbdStore* s = Live()) return s->WriteAtomic(slot, offset, buf, fua, done);
  done(ENOTCONN);
}

void OfflineRbdStore::Flush(unsigned slot, IoCompletion done) {
  if (RbdStore* s = Live()) return s->Flush(slot, done);
  done(ENOTCONN);
}

void OfflineRbdStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  if (RbdStore* s = Live()) return s->Unmap(slot, offset, len, done);
  done(ENOTCONN);
}

void OfflineRbdStore::GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                                      IoCompletion done) {
  if (RbdStore* s = Live()) return s->GetProvisioning(slot, offset, max_len, out, done);
  done(ENOTCONN);
}

void OfflineRbdStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch,
                                      bool fua, ModifyFn modify, IoCompletion done) {
  if (RbdStore* s = Live()) return s->ReadModifyWrite(slot, offset, scratch, fua, modify, done);
  done(ENOTCONN);
}

void OfflineRbdStore::CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                                      IoCompletion done) {
  if (RbdStore* s = Live()) return s->CompareAndWrite(slot, offset, op, done);
  done(ENOTCONN);
}

int OfflineRbdStore::Grow(uint64_t new_size_bytes) {
  if (RbdStore* s = Live()) return s->Grow(new_size_bytes);
  return ENOTCONN;
}

}  // namespace iscsigw::backing
