// TaskDrain: waits for aborted tasks to end before the answer that depends on it goes out.
//
// SAM-5 5.6 and RFC 7143 11.5/11.6: a task management function is answered only once every task
// it aborted has ended and can no longer change the medium, on every I_T nexus concerned; a
// reinstated session's login is answered only once the old session's tasks have (RFC 7143
// 6.3.5). A task that is aborted while its store I/O is in flight cannot be stopped, so the
// answer waits for that I/O.
//
// A drain is shared: the request that creates it holds one reference, so does every cross-reactor
// post that still has to mark tasks, and every aborted task whose store I/O is in flight. When the
// last reference goes (on whichever reactor), `done` is posted to the reactor the drain was
// created on. A task aborted a second time (an ABORT TASK, then a LUN RESET) keeps its first drain
// and makes it hold the second, so both wait for it. Allocated per task management request or
// reinstatement, never per command.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace iscsigw::iscsi {

class TaskDrain {
 public:
  static std::shared_ptr<TaskDrain> Create(boost::asio::io_context& reactor,
                                           std::function<void()> done) {
    return std::shared_ptr<TaskDrain>(new TaskDrain(reactor, std::move(done)));
  }
  ~TaskDrain() { boost::asio::post(reactor_, std::move(done_)); }
  TaskDrain(const TaskDrain&) = delete;
  TaskDrain& operator=(const TaskDrain&) = delete;

  // `later` fires no earlier than this drain. Any thread.
  void Hold(std::shared_ptr<TaskDrain> later) {
    if (later.get() == this) return;
    std::lock_guard lock(mu_);
    held_.push_back(std::move(later));
  }

 private:
  TaskDrain(boost::asio::io_context& reactor, std::function<void()> done)
      : reactor_(reactor), done_(std::move(done)) {}

  boost::asio::io_context& reactor_;
  std::function<void()> done_;
  std::mutex mu_;
  std::vector<std::shared_ptr<TaskDrain>> held_;  // guarded by mu_; released with this drain
};

// Makes the task's store I/O hold `drain` (null: nothing to wait for).
template <typename TaskT>
void AttachDrain(TaskT& t, const std::shared_ptr<TaskDrain>& drain) {
  if (!drain) return;
  if (t.drain) {
    t.drain->Hold(drain);
  } else {
    t.drain = drain;
  }
}

}  // namespace iscsigw::iscsi
