// iscsi::Task: one SCSI command in flight on a connection. It embeds the scsi::Task the engine
// sees, and adds the transport state: ITT, CmdSN, the Data-Out reassembly (unsolicited burst and
// the outstanding R2Ts), and the Data-In / response cursor the writer advances.
//
// Tasks live in a fixed per-session array sized from the CmdSN window; nothing is allocated per
// command. Threading: the owning connection's reactor thread only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "dataplane/iscsi/task_drain.h"
#include "dataplane/iscsi/tx_item.h"
#include "dataplane/runtime/io_trace.h"
#include "dataplane/scsi/task.h"

namespace iscsigw::iscsi {

class Connection;

inline constexpr uint32_t kMaxOutstandingR2T = 16;

struct R2tSlot {
  bool active = false;
  uint32_t ttt = 0;
  uint32_t offset = 0;    // BufferOffset of the R2T
  uint32_t length = 0;    // DesiredDataTransferLength
  uint32_t received = 0;  // bytes of this burst received so far
  uint32_t next_data_sn = 0;
  uint32_t r2t_sn = 0;
  bool sent = false;  // R2T PDU handed to the writer
};

struct Task : TxItem {
  enum class State : uint8_t { kFree, kReceivingData, kExecuting, kResponding };

  scsi::Task scsi;
  Connection* conn = nullptr;
  uint16_t index = 0;  // position in the session's task array
  State state = State::kFree;
  bool immediate = false;
  bool aborted = false;
  bool async_pending = false;  // Execute returned before completing (file store)
  // Aborted (or drained, Session::DrainTasks) while its store I/O was in flight: the answers that
  // wait for it (task_drain.h).
  std::shared_ptr<TaskDrain> drain;
  // Its status went to the writer: its CmdSN window slot is free again (Session::FreeTask).
  bool window_released = false;
  // Some of its Data-Out or immediate data failed the data digest: it is not executed but ends
  // with CHECK CONDITION once all data is in (RFC 7143 7.8).
  bool data_digest_error = false;

  uint32_t itt = 0;
  uint32_t cmd_sn = 0;
  uint64_t lun_raw = 0;
  uint32_t edtl = 0;
  uint64_t start_ns = 0;            // runtime::NowNs() at arrival; 0 when not counted
  runtime::io_trace::Stamps trace;  // a tracing build's stamps (runtime/io_trace.h)
  bool read = false;
  bool write = false;

  // Data buffer from the reactor's BufferPool (data-out, or data-in scratch).
  uint8_t* buf = nullptr;
  uint32_t buf_cap = 0;

  // Data-Out reassembly (RFC 7143 10.7, 11.7, 11.8).
  uint32_t received = 0;         // bytes received in all
  uint32_t unsolicited_end = 0;  // unsolicited data covers [0, unsolicited_end)
  uint32_t unsolicited_received = 0;
  uint32_t unsolicited_data_sn = 0;
  uint32_t next_r2t_offset = 0;  // first byte not yet solicited
  uint32_t next_r2t_sn = 0;
  uint32_t outstanding_r2t = 0;
  std::array<R2tSlot, kMaxOutstandingR2T> r2t{};
  bool unsolicited_done = true;
  Task* unsol_next = nullptr;  // list of tasks still receiving unsolicited data

  // Response cursor (writer side).
  uint32_t tx_len = 0;     // bytes of Data-In to send (min(in_len, edtl))
  uint32_t tx_offset = 0;  // bytes of Data-In already emitted
  uint32_t tx_seg = 0;     // segment cursor into scsi.in_segs
  uint32_t tx_seg_off = 0;
  uint32_t data_sn = 0;  // next DataSN for Data-In / R2T (shared numbering, RFC 7143 11.7.5)
  bool status_sent = false;
  std::array<uint8_t, 2 + scsi::kMaxSenseLength> sense_data{};  // SCSI Response data segment

  void ResetForCommand() {
    scsi.ResetResult();
    aborted = false;
    async_pending = false;
    window_released = false;
    data_digest_error = false;
    received = 0;
    unsolicited_end = 0;
    unsolicited_received = 0;
    unsolicited_data_sn = 0;
    next_r2t_offset = 0;
    next_r2t_sn = 0;
    outstanding_r2t = 0;
    for (auto& s : r2t) s.active = false;
    unsolicited_done = true;
    unsol_next = nullptr;
    tx_len = 0;
    tx_offset = 0;
    tx_seg = 0;
    tx_seg_off = 0;
    data_sn = 0;
    status_sent = false;
  }
};

}  // namespace iscsigw::iscsi
