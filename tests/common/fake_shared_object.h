// An in-memory SharedObject (dataplane/backing/shared_object.h) for unit tests: a FakeCluster is
// the object in the cluster (data, a version every write moves on, its watchers) and each
// FakeObject one gateway's view of it. Notify runs the other watchers' listeners at once and
// waits (up to its timeout) for the acks they keep, Post runs its job at once (or when the test
// says), and a reread after a lost watch happens when the test calls Resync.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/on_release.h"
#include "dataplane/backing/shared_object.h"

namespace iscsigw::test {

// The object in the cluster: data, a version that every write moves on, and its watchers.
struct FakeCluster {
  std::string data;
  uint64_t version = 1;
  std::vector<class FakeObject*> watchers;
  // Runs once, just before the next compare-and-swap: another gateway's change in between.
  std::function<void()> race;
  int writes = 0;
  int read_err = 0;  // what Read answers (0: the data)
  // What the next WriteIfVersion answers (0: as it should), once; with write_lands the write
  // happens all the same (a reply lost).
  int write_err = 0;
  bool write_lands = false;
  // The next notify_failures notifies answer -notify_err and reach no gateway.
  int notify_err = 0;
  int notify_failures = 0;
};

// One gateway's view of the object. Post runs the job at once (the engine's completion then runs
// before Execute returns, which the Task contract allows).
class FakeObject final : public backing::SharedObject {
 public:
  explicit FakeObject(FakeCluster& c) : c_(c) { c_.watchers.push_back(this); }
  ~FakeObject() override { std::erase(c_.watchers, this); }

  int Read(std::string* data, uint64_t* version) override {
    if (c_.read_err != 0) return -c_.read_err;
    *data = c_.data;
    *version = c_.version;
    return 0;
  }
  int WriteIfVersion(uint64_t version, const std::string& data, uint64_t* out) override {
    if (c_.race) {
      auto race = std::move(c_.race);
      c_.race = nullptr;
      race();
    }
    if (version != c_.version) return -ECANCELED;
    if (const int err = std::exchange(c_.write_err, 0); err != 0) {
      if (c_.write_lands) {
        c_.data = data;
        ++c_.version;
        ++c_.writes;
      }
      return -err;
    }
    c_.data = data;
    *out = ++c_.version;
    ++c_.writes;
    return 0;
  }
  int Notify(uint64_t version, const std::string& data, const std::string& events,
             std::chrono::milliseconds timeout, Silent when_silent) override {
    ++notifies;
    if (c_.notify_failures > 0) {
      --c_.notify_failures;
      return -c_.notify_err;
    }
    // A silent gateway's listener does not run; with kFence it is fenced (when it can be).
    bool unanswered = false;
    for (FakeObject* w : c_.watchers) {
      if (w == this || !w->silent) continue;
      if (when_silent == Silent::kFence && w->fence_err == 0) {
        w->fenced = true;
      } else {
        unanswered = true;
      }
    }
    struct Acks {
      std::mutex mu;
      std::condition_variable cv;
      int outstanding = 0;
    };
    auto acks = std::make_shared<Acks>();
    for (FakeObject* w : c_.watchers) {
      if (w == this || !w->listener_ || w->silent) continue;
      {
        std::lock_guard lock(acks->mu);
        ++acks->outstanding;
      }
      w->listener_(version, data, events, OnRelease([acks] {
                     std::lock_guard lock(acks->mu);
                     --acks->outstanding;
                     acks->cv.notify_all();
                   }));
    }
    std::unique_lock lock(acks->mu);
    const bool acked = acks->cv.wait_for(lock, timeout, [&] { return acks->outstanding == 0; });
    return acked && !unanswered ? 0 : -ETIMEDOUT;
  }
  // A gateway stopped or cut off: it answers no notify. Fencing it fails with fence_err (0:
  // succeeds, and sets fenced).
  bool silent = false;
  int fence_err = 0;
  bool fenced = false;
  // Runs the job at once, or with queue_posts keeps it for RunPosted (a job that takes a lock its
  // poster holds, as the object's own thread would run it later).
  void Post(std::function<void()> fn) override {
    if (queue_posts) {
      posted.push_back(std::move(fn));
    } else {
      fn();
    }
  }
  void RunPosted() {
    auto jobs = std::move(posted);
    posted.clear();
    for (auto& fn : jobs) fn();
  }
  bool queue_posts = false;
  std::vector<std::function<void()>> posted;
  // The reread happens when the test says (Resync), as the object's thread would retry it.
  void Reload() override { ++reloads; }
  void Resync() {
    std::string data;
    uint64_t version = 0;
    if (Read(&data, &version) == 0 && listener_) listener_(version, data, "", nullptr);
  }
  int reloads = 0;
  uint64_t SetListener(Listener l, std::function<void()> lost) override {
    listener_ = std::move(l);
    lost_ = std::move(lost);
    return ++token_;
  }
  // The watch lost: changes may be missed until Resync.
  void LoseWatch() {
    if (lost_) lost_();
  }
  // A notify from another gateway reaches this one's listener (without a change made).
  void Notified() {
    if (listener_) listener_(c_.version, c_.data, "", nullptr);
  }
  // What WatchCheck answers: ms since the cluster confirmed the watch, or -errno.
  int watch_check = 0;
  int WatchCheck() override { return watch_check; }
  void ClearListener(uint64_t token) override {
    if (token == token_) listener_ = nullptr;
  }
  int notifies = 0;

 private:
  FakeCluster& c_;
  Listener listener_;
  std::function<void()> lost_;
  uint64_t token_ = 0;
};

}  // namespace iscsigw::test
