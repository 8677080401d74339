// Connection (connection.h): task management (RFC 7143 11.5, 11.6; SAM-5 5.6, 6.3) and the
// aborting of this connection's tasks, which logout, resets and other sessions use too.
#include <memory>
#include <string>

#include "base/log.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/session.h"

namespace iscsigw::iscsi {

using pdu::BhsView;
using pdu::Opcode;
using pdu::RejectReason;

bool Connection::HandleTaskMgmt(const pdu::Frame& f) {
  BhsView h(f.bhs);
  if (session_->discovery()) {
    SendReject(f.bhs, RejectReason::kProtocolError);
    return true;
  }
  if (!AcceptCmdSn(h)) return true;
  using pdu::TmfFunction;
  using pdu::TmfResponse;
  const auto fn = static_cast<TmfFunction>(h.tmf_function());
  const uint64_t lun_id = pdu::DecodeLun(h.lun_raw());
  const TargetConfig& target = *session_->target();
  scsi::Lun* lun = target.info.FindLun(lun_id);
  TmfResponse resp = TmfResponse::kFunctionComplete;
  bool close_after = false;
  const std::string& target_name = target.info.name;

  // SAM-5 5.6 / RFC 7143 11.6.1: the response goes only once every task the function aborted has
  // ended, here and on the other sessions it reached; the drain holds it until then.
  ControlPdu* c = NewControl();
  c->hdr.SetOpcode(Opcode::kTaskMgmtResponse);
  c->hdr.SetFlags(0x80);
  c->hdr.SetItt(h.itt());
  c->assign_stat_sn = true;
  std::shared_ptr<TaskDrain> drain = QueueWhenDrained(c);

  auto abort_everywhere = [&](uint64_t which) {
    AbortTasks(which, drain);
    Session* self = session_.get();
    // Sessions being closed are reached too: their writes still in flight are waited for.
    gw_.ForEachSession(target_name, [self, which, drain](Session& s) {
      if (&s != self) s.AbortTasks(which, drain);
    });
  };

  switch (fn) {
    case TmfFunction::kAbortTask: {
      // RFC 7143 11.5.1: find the task by its ITT; if it is gone, "Function complete" only when
      // RefCmdSN is inside the window and older than this request, else "Task does not exist".
      Task* t = FindTaskByItt(h.referenced_task_tag());
      if (t != nullptr && t->lun_raw == h.lun_raw() && t->state != Task::State::kResponding) {
        if (t->state == Task::State::kReceivingData) {
          ReleaseTask(t);
        } else {
          t->aborted = true;
          if (t->async_pending) AttachDrain(*t, drain);
        }
      } else {
        // Not found, or already completed with its response queued: no longer in the task set.
        const uint32_t ref = h.ref_cmd_sn();
        const bool in_window = pdu::SnLessEq(session_->exp_cmd_sn(), ref) &&
                               pdu::SnLessEq(ref, session_->max_cmd_sn());
        resp = (in_window && pdu::SnLess(ref, h.cmd_sn())) ? TmfResponse::kFunctionComplete
                                                           : TmfResponse::kTaskDoesNotExist;
      }
      break;
    }
    case TmfFunction::kAbortTaskSet:
      if (lun == nullptr) {
        resp = TmfResponse::kLunDoesNotExist;
      } else {
        AbortTasks(lun_id, drain);
      }
      break;
    case TmfFunction::kClearTaskSet:
      if (lun == nullptr) {
        resp = TmfResponse::kLunDoesNotExist;
      } else {
        AbortTasks(lun_id, drain);
        gw_.ClearTaskSet(target_name, lun->shared_from_this(), session_.get(), drain);
        scsi::Engine::ClearTaskSet(*lun, drain);
      }
      break;
    case TmfFunction::kClearAca:
      resp = TmfResponse::kNotSupported;  // NACA is not supported (standard INQUIRY NormACA=0)
      break;
    case TmfFunction::kLogicalUnitReset:
      if (lun == nullptr) {
        resp = TmfResponse::kLunDoesNotExist;
      } else {
        abort_everywhere(lun_id);
        // SAM-5 6.3 (LOGICAL UNIT RESET): a unit attention for every I_T nexus, the issuer's too.
        scsi::Engine::ResetLun(*lun, nullptr, drain);
        log::Iscsi().info("{}LOGICAL UNIT RESET of LUN {} on {} by {}", LogCtx(), lun_id,
                          target_name, session_->initiator_name());
      }
      break;
    case TmfFunction::kTargetWarmReset:
    case TmfFunction::kTargetColdReset:
      abort_everywhere(~uint64_t{0});
      for (const auto& l : target.info.luns) scsi::Engine::ResetLun(*l, nullptr, drain);
      log::Iscsi().info("{}TARGET {} RESET of {} by {}", LogCtx(),
                        fn == TmfFunction::kTargetColdReset ? "COLD" : "WARM", target_name,
                        session_->initiator_name());
      if (fn == TmfFunction::kTargetColdReset) {
        // RFC 7143 11.5.1: after a cold reset the target drops all its connections.
        Session* self = session_.get();
        gw_.ForEachSession(target_name, [self, drain](Session& s) {
          if (&s != self) s.Drop(drain);
        });
        close_after = true;
      }
      break;
    case TmfFunction::kTaskReassign:
      resp = TmfResponse::kTaskAllegianceReassignmentNotSupported;  // ErrorRecoveryLevel 0
      break;
    default:
      resp = TmfResponse::kNotSupported;
      break;
  }
  CountTmf(h.tmf_function(), static_cast<uint8_t>(resp));
  c->hdr.Set8(2, static_cast<uint8_t>(resp));
  c->close_after = close_after;
  if (close_after) phase_ = Phase::kLoggingOut;
  return true;  // `drain` goes out of scope: the response is queued once nothing else holds it
}

Task* Connection::FindTaskByItt(uint32_t itt) {
  for (Task& t : session_->tasks()) {
    if (t.state != Task::State::kFree && t.itt == itt) return &t;
  }
  return nullptr;
}

bool Connection::AbortTasks(uint64_t lun_id, const std::shared_ptr<TaskDrain>& drain) {
  if (!session_) return false;
  bool any = false;
  for (Task& t : session_->tasks()) {
    if (t.state == Task::State::kFree) continue;
    if (lun_id != ~uint64_t{0} && t.scsi.lun != lun_id) continue;
    switch (t.state) {
      case Task::State::kReceivingData:
        if (!closed_) ReleaseTask(&t);
        any = true;
        break;
      case Task::State::kExecuting:
        // Its store I/O cannot be recalled: the task ends, without a response, when it completes,
        // and whoever waits for the abort waits for that.
        t.aborted = true;
        if (t.async_pending) AttachDrain(t, drain);
        any = true;
        break;
      default:
        break;  // done with the medium; the response is already on its way
    }
  }
  return any;
}

void Connection::CountTmf(uint8_t function, uint8_t response) {
  if (!runtime::Stats::Global().enabled()) return;
  if (target_stats_ == nullptr) {
    // Once per connection: a session's target never changes.
    target_stats_ = runtime::Stats::Global().ForTarget(session_->target_name());
  }
  if (runtime::TargetShard* shard = target_stats_->shard(reactor_)) shard->Tmf(function, response);
}

}  // namespace iscsigw::iscsi
