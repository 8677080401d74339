// KeyedWorkQueue: runs the node plugin's host work (iscsiadm, mkfs, mount: seconds each) on a
// few worker threads of its own, so that gRPC's threads only validate a request and queue it.
//
// Jobs that share a key (a volume id) run one at a time, in the order they were queued: kubelet
// retries a call whose deadline passed while the first attempt still runs, and the retry must
// find the first one's work done, not race it. Jobs with different keys run in parallel, up to
// the number of workers. An empty key means "no ordering" (NodeGetInfo).
//
// Bounded twice: at most `max_queued` jobs wait in all, and at most `max_per_key` wait behind a
// running job of the same key; Submit refuses more (the caller answers RESOURCE_EXHAUSTED or
// ABORTED, and the CO retries later) instead of piling up work nobody waits for any more.
//
// Submit may be called from any thread. A job runs on a worker thread and is never run twice.
// The destructor runs each job still waiting with cancelled=true (so that it can finish its
// gRPC call), then waits for the running ones to end and joins the workers.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace iscsigw::csi {

class KeyedWorkQueue {
 public:
  // cancelled: the queue is shutting down and the job did not start; it must only answer.
  using Job = std::function<void(bool cancelled)>;

  enum class Admit { kQueued, kQueueFull, kKeyBusy };

  KeyedWorkQueue(size_t workers, size_t max_queued, size_t max_per_key);
  ~KeyedWorkQueue();
  KeyedWorkQueue(const KeyedWorkQueue&) = delete;
  KeyedWorkQueue& operator=(const KeyedWorkQueue&) = delete;

  // kQueued: the job will run (or be cancelled) exactly once. Otherwise it was dropped unrun.
  [[nodiscard]] Admit Submit(const std::string& key, Job job);
  // Jobs queued and not started yet.
  size_t Waiting();

 private:
  struct KeyState {
    bool running = false;
    std::deque<Job> waiting;
  };
  void Work();

  const size_t max_queued_;
  const size_t max_per_key_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, KeyState> keys_;  // protected by mu_; erased when idle and empty
  std::deque<std::string> ready_;         // protected by mu_; keys with a job ready to run
  size_t queued_ = 0;                     // protected by mu_; jobs waiting, in all
  bool stopping_ = false;                 // protected by mu_
  std::vector<std::thread> workers_;      // set in the constructor, joined in the destructor
};

}  // namespace iscsigw::csi
