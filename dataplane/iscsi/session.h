// Session: one iSCSI session (RFC 7143 4.4): its identity (initiator name + ISID, TSIH), the target
// it is logged in to, the negotiated parameters, the I_T nexus the SCSI engine keys state by, the
// CmdSN window, and the fixed task array every command of the session takes its Task from.
// ErrorRecoveryLevel 0 and MaxConnections 1: the session ends when its connection does.
//
// Threading: created on the reactor that accepted its leading connection and used only there. The
// identity fields (including the target's name) are immutable after construction, so the control
// plane may read them through Info() from any thread while it holds a shared_ptr. The target's
// configuration is swapped on the session's reactor when a new snapshot is published.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/iscsi/gateway.h"
#include "dataplane/iscsi/negotiation.h"
#include "dataplane/iscsi/task.h"
#include "dataplane/scsi/engine.h"

namespace iscsigw::iscsi {

class Connection;

class Session : public std::enable_shared_from_this<Session> {
 public:
  // Commands the target accepts beyond ExpCmdSN (MaxCmdSN - ExpCmdSN + 1 when idle) and extra tasks
  // for immediate commands, which do not take a CmdSN slot.
  static constexpr uint32_t kCmdWindow = 128;
  static constexpr uint32_t kImmediateTasks = 8;
  // A windowed task gives its CmdSN slot back when its status goes to the writer, so that the
  // response itself advertises the slot (RFC 7143 4.2.2.1), but its Task stays taken until the
  // write completes: at most one write batch of tasks (Connection::kMaxBatchHeaders) is in that
  // state, so the windowed pool has that many tasks beyond the window.
  static constexpr uint32_t kStatusInFlight = 64;

  Session(Gateway& gw, unsigned reactor, std::string initiator_name, std::array<uint8_t, 6> isid,
          std::shared_ptr<const TargetConfig> target, SessionParams params, std::string peer);
  ~Session();

  uint16_t tsih() const { return tsih_; }
  void set_tsih(uint16_t t) { tsih_ = t; }
  unsigned reactor() const { return reactor_; }
  bool discovery() const { return params_.session_type == SessionType::kDiscovery; }
  const std::string& initiator_name() const { return initiator_name_; }
  const std::array<uint8_t, 6>& isid() const { return isid_; }
  // Reactor thread only.
  const std::shared_ptr<const TargetConfig>& target() const { return target_; }
  // Any thread: the name of the target (empty for discovery).
  const std::string& target_name() const { return target_name_; }
  // Reactor thread only: a new configuration of the same target (LUNs added, resized, removed).
  void set_target(std::shared_ptr<const TargetConfig> target);
  const SessionParams& params() const { return params_; }
  scsi::Nexus& nexus() { return nexus_; }
  SessionInfo Info() const;

  // Reactor thread only.
  Connection* connection() const { return conn_; }
  void set_connection(Connection* c) { conn_ = c; }
  // Closes the session's connection (reinstatement, control-plane drop, target cold reset); its
  // tasks whose store I/O is in flight hold `drain` (may be null) until that I/O ends.
  void Drop(const std::shared_ptr<TaskDrain>& drain = nullptr);
  // Aborts the tasks for lun_id (~0: all LUNs) without responses; those whose store I/O is in
  // flight hold `drain` (may be null). Works on a closed session too, whose tasks still drain.
  // True when there was a task to abort.
  bool AbortTasks(uint64_t lun_id, const std::shared_ptr<TaskDrain>& drain);
  // Makes every task for lun_id whose store I/O is in flight, and every EXTENDED COPY (which may
  // write lun_id from another LUN), hold `drain` until that I/O ends, aborting none: a live LUN's
  // store reopened waits for the calls made to the old one (docs/live-lun-changes.md).
  void DrainTasks(uint64_t lun_id, const std::shared_ptr<TaskDrain>& drain);
  // Set when the connection closed; the session stays registered (for reinstatement to find and
  // wait for) until its last task has ended. Any thread.
  bool closing() const { return closing_.load(std::memory_order_acquire); }
  void set_closing() { closing_.store(true, std::memory_order_release); }

  // CmdSN window (RFC 7143 4.2.2.1). MaxCmdSN never decreases: it grows as tasks are released.
  uint32_t exp_cmd_sn() const { return exp_cmd_sn_; }
  void set_exp_cmd_sn(uint32_t sn) { exp_cmd_sn_ = sn; }
  void AdvanceCmdSn() { ++exp_cmd_sn_; }
  uint32_t max_cmd_sn() const { return exp_cmd_sn_ - 1 + kCmdWindow - windowed_in_flight_; }

  // Task array. AllocTask returns nullptr when the pool for that kind is empty.
  Task* AllocTask(bool immediate);
  void FreeTask(Task* t);
  // The task's status is on its way: its CmdSN window slot counts as free from now on.
  void ReleaseWindowSlot(Task* t) {
    if (t->immediate || t->window_released) return;
    t->window_released = true;
    --windowed_in_flight_;
  }
  Task* TaskAt(uint32_t index) { return index < tasks_.size() ? &tasks_[index] : nullptr; }
  std::vector<Task>& tasks() { return tasks_; }

 private:
  void ReleaseRetiredTargets();

  Gateway& gw_;
  const unsigned reactor_;
  const std::string initiator_name_;
  const std::array<uint8_t, 6> isid_;
  std::shared_ptr<const TargetConfig> target_;
  const std::string target_name_;
  // Configurations replaced while commands were in flight: they keep the LUNs (and their stores)
  // those commands use alive. Let go once no task is taken (FreeTask), in a later reactor turn.
  std::vector<std::shared_ptr<const TargetConfig>> retired_targets_;
  uint32_t tasks_taken_ = 0;  // from the free lists and not given back
  const SessionParams params_;
  const std::string peer_;
  uint16_t tsih_ = 0;
  scsi::Nexus nexus_;

  Connection* conn_ = nullptr;
  std::atomic<bool> closing_{false};
  uint32_t exp_cmd_sn_ = 0;
  uint32_t windowed_in_flight_ = 0;
  std::vector<Task> tasks_;  // sized once: kCmdWindow + kStatusInFlight + kImmediateTasks
  // R2T transfer tags carry the task index in their low byte.
  static_assert(kCmdWindow + kStatusInFlight + kImmediateTasks <= 256);
  std::vector<uint16_t> free_windowed_;
  std::vector<uint16_t> free_immediate_;
};

// "<initiator>,i,0x<isid>" (SPC-4 7.6.4.6 iSCSI initiator port name).
std::string IsidHex(const std::array<uint8_t, 6>& isid);

}  // namespace iscsigw::iscsi
