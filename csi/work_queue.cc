#include "csi/work_queue.h"

#include <algorithm>

namespace iscsigw::csi {

KeyedWorkQueue::KeyedWorkQueue(size_t workers, size_t max_queued, size_t max_per_key)
    : max_queued_(max_queued), max_per_key_(max_per_key) {
  for (size_t i = 0; i < std::max<size_t>(workers, 1); ++i)
    workers_.emplace_back([this] { Work(); });
}

KeyedWorkQueue::~KeyedWorkQueue() {
  std::vector<Job> cancelled;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [key, state] : keys_) {
      for (auto& job : state.waiting) cancelled.push_back(std::move(job));
      state.waiting.clear();
    }
    ready_.clear();
    queued_ = 0;
  }
  cv_.notify_all();
  for (auto& job : cancelled) job(true);
  for (auto& t : workers_) t.join();
}

KeyedWorkQueue::Admit KeyedWorkQueue::Submit(const std::string& key, Job job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queued_ >= max_queued_) return Admit::kQueueFull;
    if (key.empty()) {
      // Unordered: a key of its own that no volume id can take (ids are non-empty).
      static size_t next = 0;
      std::string own(1, '\0');
      own += std::to_string(next++);
      keys_[own].waiting.push_back(std::move(job));
      ready_.push_back(std::move(own));
    } else {
      KeyState& state = keys_[key];
      if (state.waiting.size() >= max_per_key_) return Admit::kKeyBusy;
      state.waiting.push_back(std::move(job));
      if (!state.running && state.waiting.size() == 1) ready_.push_back(key);
    }
    ++queued_;
  }
  cv_.notify_one();
  return Admit::kQueued;
}

size_t KeyedWorkQueue::Waiting() {
  std::lock_guard lock(mu_);
  return queued_;
}

void KeyedWorkQueue::Work() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    const std::string key = std::move(ready_.front());
    ready_.pop_front();
    KeyState& state = keys_[key];
    Job job = std::move(state.waiting.front());
    state.waiting.pop_front();
    state.running = true;
    --queued_;
    lock.unlock();
    job(false);
    lock.lock();
    // keys_ is a map: the reference stays valid while other keys come and go.
    KeyState& after = keys_[key];
    after.running = false;
    if (!after.waiting.empty() && !stopping_) {
      ready_.push_back(key);
      cv_.notify_one();
    } else if (after.waiting.empty()) {
      keys_.erase(key);
    }
  }
}

}  // namespace iscsigw::csi
