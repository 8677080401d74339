#include "dataplane/iscsi/session.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>

#include "dataplane/iscsi/connection.h"
#include "dataplane/scsi/opcodes.h"

namespace iscsigw::iscsi {

std::string IsidHex(const std::array<uint8_t, 6>& isid) {
  char buf[13];
  std::snprintf(buf, sizeof(buf), "%02x%02x%02x%02x%02x%02x", isid[0], isid[1], isid[2], isid[3],
                isid[4], isid[5]);
  return buf;
}

Session::Session(Gateway& gw, unsigned reactor, std::string initiator_name,
                 std::array<uint8_t, 6> isid, std::shared_ptr<const TargetConfig> target,
                 SessionParams params, std::string peer)
    : gw_(gw),
      reactor_(reactor),
      initiator_name_(std::move(initiator_name)),
      isid_(isid),
      target_(std::move(target)),
      target_name_(target_ ? target_->info.name : std::string()),
      params_(std::move(params)),
      peer_(std::move(peer)),
      nexus_(initiator_name_ + ",i,0x" + IsidHex(isid_),
             target_ ? target_->info.relative_port_id : 1),
      tasks_(kCmdWindow + kStatusInFlight + kImmediateTasks) {
  constexpr uint32_t kWindowed = kCmdWindow + kStatusInFlight;
  free_windowed_.reserve(kWindowed);
  free_immediate_.reserve(kImmediateTasks);
  for (uint32_t i = 0; i < tasks_.size(); ++i) {
    tasks_[i].index = static_cast<uint16_t>(i);
    tasks_[i].scsi.nexus = &nexus_;
    tasks_[i].scsi.slot = reactor_;
  }
  for (uint32_t i = kWindowed; i-- > 0;) free_windowed_.push_back(static_cast<uint16_t>(i));
  for (uint32_t i = kWindowed + kImmediateTasks; i-- > kWindowed;) {
    free_immediate_.push_back(static_cast<uint16_t>(i));
  }
}

Session::~Session() = default;

SessionInfo Session::Info() const {
  SessionInfo info;
  info.tsih = tsih_;
  info.initiator_name = initiator_name_;
  info.isid = IsidHex(isid_);
  info.target_name = target_name_;
  info.discovery = discovery();
  info.reactor = reactor_;
  info.peer = peer_;
  info.params = params_;
  return info;
}

void Session::set_target(std::shared_ptr<const TargetConfig> target) {
  if (tasks_taken_ > 0) {
    retired_targets_.push_back(std::move(target_));
  } else {
    retired_targets_.clear();
  }
  target_ = std::move(target);
}

void Session::ReleaseRetiredTargets() {
  // The last reference to a removed LUN, and so its store, may go with these: not inside the
  // store completion that freed the last task, but in a later turn of this reactor.
  boost::asio::post(gw_.pool().context(reactor_),
                    [retired = std::move(retired_targets_)]() mutable { retired.clear(); });
  retired_targets_.clear();
}

void Session::Drop(const std::shared_ptr<TaskDrain>& drain) {
  AbortTasks(~uint64_t{0}, drain);
  if (conn_ != nullptr) conn_->Close();
}

bool Session::AbortTasks(uint64_t lun_id, const std::shared_ptr<TaskDrain>& drain) {
  if (conn_ != nullptr) return conn_->AbortTasks(lun_id, drain);
  // Closed: the only tasks left are those whose store I/O is still in flight.
  bool any = false;
  for (Task& t : tasks_) {
    if (t.state != Task::State::kExecuting || !t.async_pending) continue;
    if (lun_id != ~uint64_t{0} && t.scsi.lun != lun_id) continue;
    t.aborted = true;
    AttachDrain(t, drain);
    any = true;
  }
  return any;
}

void Session::DrainTasks(uint64_t lun_id, const std::shared_ptr<TaskDrain>& drain) {
  for (Task& t : tasks_) {
    if (t.state != Task::State::kExecuting || !t.async_pending) continue;
    if (t.scsi.lun == lun_id || t.scsi.cdb[0] == scsi::kThirdPartyCopyOut) AttachDrain(t, drain);
  }
}

Task* Session::AllocTask(bool immediate) {
  auto& list = immediate ? free_immediate_ : free_windowed_;
  if (list.empty()) return nullptr;
  Task* t = &tasks_[list.back()];
  list.pop_back();
  ++tasks_taken_;
  t->immediate = immediate;
  if (!immediate) ++windowed_in_flight_;
  return t;
}

void Session::FreeTask(Task* t) {
  t->state = Task::State::kFree;
  if (t->immediate) {
    free_immediate_.push_back(t->index);
  } else {
    if (!t->window_released) --windowed_in_flight_;
    free_windowed_.push_back(t->index);
  }
  t->window_released = false;
  t->drain.reset();  // the last reference may run the waiting answer (task_drain.h)
  if (--tasks_taken_ == 0 && !retired_targets_.empty()) ReleaseRetiredTargets();
}

}  // namespace iscsigw::iscsi
