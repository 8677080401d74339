// Connection (connection.h): SCSI commands (RFC 7143 11.3), their immediate and unsolicited data,
// R2Ts (11.8) and solicited Data-Out (11.7), execution in the SCSI engine and the task's end once
// its response is queued.
#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/session.h"

namespace iscsigw::iscsi {

using pdu::BhsView;
using pdu::RejectReason;

namespace {

// AHS type 1: Extended CDB (RFC 7143 11.2.1.3).
constexpr uint8_t kAhsExtendedCdb = 1;

// ASCQs of ASC 4Bh for a write ended by a Data-Out out of sequence (SPC-4 annex D).
constexpr uint8_t kDataPhaseError = 0x00;    // 4Bh/00h DATA PHASE ERROR (DataSN, F bit)
constexpr uint8_t kTooMuchWriteData = 0x02;  // 4Bh/02h TOO MUCH WRITE DATA (beyond the burst)
constexpr uint8_t kDataOffsetError = 0x05;   // 4Bh/05h DATA OFFSET ERROR (BufferOffset)

uint8_t DataOutAscq(bool data_sn_ok, bool offset_ok) {
  if (!data_sn_ok) return kDataPhaseError;
  return offset_ok ? kTooMuchWriteData : kDataOffsetError;
}

void SetFixedSense(scsi::Task& t, uint8_t key, uint8_t asc, uint8_t ascq) {
  t.status = scsi::ScsiStatus::kCheckCondition;
  t.sense.fill(0);
  t.sense[0] = 0x70;
  t.sense[2] = key;
  t.sense[7] = 10;
  t.sense[12] = asc;
  t.sense[13] = ascq;
  t.sense_len = 18;
}

}  // namespace
bool Connection::HandleScsiCommand(const pdu::Frame& f) {
  BhsView h(f.bhs);
  if (session_->discovery()) {
    // RFC 7143 4.3: a discovery session carries only Text, NOP and Logout.
    SendReject(f.bhs, RejectReason::kProtocolError);
    return true;
  }
  const bool read = h.read_bit();
  const bool write = h.write_bit();
  const uint32_t edtl = h.expected_data_transfer_length();
  // RFC 7143 11.3.1: unsolicited data only with W; bidirectional commands need the
  // bidirectional AHS and are not supported by a block gateway.
  if ((read && write) || (!write && f.data_length > 0) || f.data_length > edtl ||
      (f.data_length > 0 && !params_.immediate_data) ||
      f.data_length > params_.first_burst_length) {
    if (AcceptCmdSn(h)) SendReject(f.bhs, RejectReason::kProtocolError);
    return true;
  }
  if (edtl > runtime::BufferPool::kMaxBuffer) {
    if (AcceptCmdSn(h)) SendReject(f.bhs, RejectReason::kInvalidPduField);
    return true;
  }
  if (!AcceptCmdSn(h)) return true;
  Task* t = session_->AllocTask(h.immediate());
  if (t == nullptr) {
    // Only immediate commands can run out: the window bounds the rest.
    SendReject(f.bhs, RejectReason::kImmediateCommandReject);
    return true;
  }
  t->ResetForCommand();
  t->conn = this;
  t->state = Task::State::kReceivingData;
  t->itt = h.itt();
  t->cmd_sn = h.cmd_sn();
  t->lun_raw = h.lun_raw();
  t->edtl = edtl;
  t->read = read;
  t->write = write;

  scsi::Task& st = t->scsi;
  std::memcpy(st.cdb.data(), h.cdb(), 16);
  st.cdb_len = 16;
  if (f.ahs_length >= 4 && f.ahs[2] == kAhsExtendedCdb) {
    const uint16_t ahs_len = LoadBe16(f.ahs);  // includes the reserved byte
    const uint32_t extra = ahs_len > 0 ? ahs_len - 1u : 0u;
    if (extra + 16 > scsi::kMaxCdbLength || 4u + ahs_len > f.ahs_length) {
      SendReject(f.bhs, RejectReason::kInvalidPduField);
      ReleaseTask(t);
      return true;
    }
    std::memcpy(st.cdb.data() + 16, f.ahs + 4, extra);
    st.cdb_len = static_cast<uint8_t>(16 + extra);
  }
  st.lun = pdu::DecodeLun(t->lun_raw);
  st.dir = write ? scsi::DataDirection::kWrite
                 : (read ? scsi::DataDirection::kRead : scsi::DataDirection::kNone);
  st.expected_length = edtl;
  st.data_out_len = 0;
  st.slot = reactor_;
  t->start_ns = Counters() ? runtime::NowNs() : 0;
  if constexpr (runtime::io_trace::kEnabled) t->trace = {.received = runtime::SteadyNs(last_rx_)};

  if (edtl > 0) {
    t->buf = gw_.pool().buffers(reactor_).Get(edtl, &t->buf_cap);
    if (t->buf == nullptr) {
      SetFixedSense(st, 0x0b, 0x55, 0x03);  // ABORTED COMMAND, INSUFFICIENT RESOURCES
      t->state = Task::State::kExecuting;
      QueueTaskResponse(t);
      return true;
    }
  }
  st.buf = t->buf;
  st.buf_cap = t->buf_cap;

  if (!write) {
    StartExecution(t);
    return true;
  }
  // Immediate data, then the unsolicited burst (InitialR2T=No, F=0), then R2Ts for the rest
  // (RFC 7143 4.2.5.2).
  if (f.data_digest_error) {
    t->data_digest_error = true;
  } else if (f.data_length > 0) {
    std::memcpy(t->buf, f.data, f.data_length);
  }
  t->received = f.data_length;
  t->unsolicited_received = f.data_length;
  t->unsolicited_end = (!h.final_bit() && !params_.initial_r2t)
                           ? std::min(edtl, params_.first_burst_length)
                           : f.data_length;
  if (t->unsolicited_end < f.data_length) t->unsolicited_end = f.data_length;
  t->unsolicited_done = t->unsolicited_received >= t->unsolicited_end;
  if (!t->unsolicited_done) {
    t->unsol_next = unsol_head_;
    unsol_head_ = t;
  }
  t->next_r2t_offset = t->unsolicited_end;
  if (t->unsolicited_done && t->next_r2t_offset >= edtl) {
    StartExecution(t);
  } else {
    IssueR2Ts(t);
  }
  return true;
}

void Connection::IssueR2Ts(Task* t) {
  bool added = false;
  const uint32_t limit = std::min<uint32_t>(params_.max_outstanding_r2t, kMaxOutstandingR2T);
  while (t->outstanding_r2t < limit && t->next_r2t_offset < t->edtl) {
    R2tSlot* slot = nullptr;
    for (auto& s : t->r2t) {
      if (!s.active) {
        slot = &s;
        break;
      }
    }
    if (slot == nullptr) break;
    uint32_t ttt;
    do {
      ttt = ((++ttt_serial_ & 0xffffff) << 8) | t->index;
    } while (ttt == pdu::kReservedTag);
    const uint32_t len = std::min(params_.max_burst_length, t->edtl - t->next_r2t_offset);
    *slot = R2tSlot{true, ttt, t->next_r2t_offset, len, 0, 0, t->next_r2t_sn++, false};
    t->next_r2t_offset += len;
    ++t->outstanding_r2t;
    added = true;
  }
  if (added) Queue(t);
}

bool Connection::HandleDataOut(const pdu::Frame& f) {
  BhsView h(f.bhs);
  const uint32_t ttt = h.ttt();
  const uint32_t off = h.buffer_offset();
  const uint32_t dsn = h.data_sn();
  const uint32_t len = f.data_length;
  Task* t = nullptr;
  if (ttt == pdu::kReservedTag) {
    Task** link = &unsol_head_;
    while (*link != nullptr && (*link)->itt != h.itt()) link = &(*link)->unsol_next;
    t = *link;
    if (t == nullptr) {
      // Data for a task that no longer exists (aborted or failed): discarded (RFC 7143 4.2.3).
      return true;
    }
    // RFC 7143 11.7.5 / 11.7.6: DataSN counts PDUs of the sequence from 0; with
    // DataPDUInOrder=Yes the offsets are contiguous.
    if (dsn != t->unsolicited_data_sn || off != t->unsolicited_received ||
        uint64_t{off} + len > t->unsolicited_end) {
      ISCSIGW_LOG_LIMITED(iscsi_log_limiter_, log::Iscsi(), spdlog::level::info,
                          "{}unsolicited Data-Out ITT {:#x}: DataSN {} offset {} length {} "
                          "(expected DataSN {} offset {} end {}): task aborted",
                          LogCtx(), h.itt(), dsn, off, len, t->unsolicited_data_sn,
                          t->unsolicited_received, t->unsolicited_end);
      return FailDataOut(
          t, DataOutAscq(dsn == t->unsolicited_data_sn, off == t->unsolicited_received));
    }
    if (f.data_digest_error) {
      t->data_digest_error = true;
    } else {
      std::memcpy(t->buf + off, f.data, len);
    }
    t->unsolicited_received += len;
    ++t->unsolicited_data_sn;
    t->received += len;
    if (h.final_bit() || t->unsolicited_received == t->unsolicited_end) {
      // F=1 before the end of the unsolicited burst: the rest will never come.
      if (t->unsolicited_received != t->unsolicited_end) return FailDataOut(t, kDataPhaseError);
      t->unsolicited_done = true;
      *link = t->unsol_next;
      t->unsol_next = nullptr;
    }
  } else {
    t = session_->TaskAt(ttt & 0xff);
    R2tSlot* slot = nullptr;
    if (t != nullptr && t->state == Task::State::kReceivingData && t->itt == h.itt()) {
      for (auto& s : t->r2t) {
        if (s.active && s.ttt == ttt) slot = &s;
      }
    }
    if (slot == nullptr) return true;  // stale transfer tag: discarded (RFC 7143 4.2.3)
    if (dsn != slot->next_data_sn || off != slot->offset + slot->received ||
        slot->received + uint64_t{len} > slot->length) {
      ISCSIGW_LOG_LIMITED(iscsi_log_limiter_, log::Iscsi(), spdlog::level::info,
                          "{}Data-Out ITT {:#x} TTT {:#x}: DataSN {} offset {} length {} "
                          "(expected DataSN {} offset {}): task aborted",
                          LogCtx(), h.itt(), ttt, dsn, off, len, slot->next_data_sn,
                          slot->offset + slot->received);
      return FailDataOut(
          t, DataOutAscq(dsn == slot->next_data_sn, off == slot->offset + slot->received));
    }
    if (f.data_digest_error) {
      t->data_digest_error = true;
    } else {
      std::memcpy(t->buf + off, f.data, len);
    }
    slot->received += len;
    ++slot->next_data_sn;
    t->received += len;
    if (slot->received == slot->length) {
      slot->active = false;
      --t->outstanding_r2t;
      IssueR2Ts(t);
    } else if (h.final_bit()) {
      return FailDataOut(t, kDataPhaseError);  // F=1 before the burst the R2T asked for is complete
    }
  }
  if (t->unsolicited_done && t->outstanding_r2t == 0 && t->next_r2t_offset >= t->edtl &&
      t->state == Task::State::kReceivingData) {
    StartExecution(t);
  }
  return true;
}

bool Connection::FailDataOut(Task* t, uint8_t ascq) {
  // A Data-Out out of sequence (DataSN, BufferOffset or length, RFC 7143 11.7.5) cannot be asked
  // for again at ErrorRecoveryLevel 0. A Reject would not end the command (RFC 7143 11.17: the
  // initiator would wait for its SCSI timeout), so the command ends here, unexecuted, with CHECK
  // CONDITION / ABORTED COMMAND and the data-phase ASC that names the fault (SPC-4 4Bh/xxh). Later
  // Data-Out for it finds no task or no R2T and is discarded; the connection goes on.
  UnlinkUnsolicited(t);
  t->unsolicited_done = true;
  for (auto& slot : t->r2t) {
    if (slot.active && !slot.sent) --t->next_r2t_sn;  // never sent: not counted in ExpDataSN
    slot.active = false;
  }
  t->outstanding_r2t = 0;
  t->next_r2t_offset = t->edtl;
  t->state = Task::State::kExecuting;
  SetFixedSense(t->scsi, 0x0b, 0x4b, ascq);
  QueueTaskResponse(t);
  return true;
}

void Connection::StartExecution(Task* t) {
  if (t->data_digest_error) {
    // RFC 7143 7.8 (b), 13.5.1: PROTOCOL SERVICE CRC ERROR once all the data has arrived.
    t->state = Task::State::kExecuting;
    SetFixedSense(t->scsi, 0x0b, 0x47, 0x05);
    QueueTaskResponse(t);
    return;
  }
  t->state = Task::State::kExecuting;
  scsi::Task& st = t->scsi;
  st.data_out_len = t->write ? t->received : 0;
  st.complete = &Connection::OnScsiComplete;
  st.complete_ctx = t;
  t->async_pending = false;
  scsi::Engine::Execute(session_->target()->info, st);
  if (t->state == Task::State::kExecuting) {
    t->async_pending = true;
    ++async_pending_;
  }
}

void Connection::OnScsiComplete(scsi::Task* st, void* ctx) {
  Task* t = static_cast<Task*>(ctx);
  Connection* c = t->conn;
  const bool was_async = t->async_pending;
  if (was_async) {
    t->async_pending = false;
    --c->async_pending_;
  }
  if (t->aborted || c->closed_) {
    // SAM-5 5.6: an aborted task sends no response. Releasing it drops its drain reference: the
    // task management response or reinstated login waiting for it may go (task_drain.h).
    c->ReleaseTask(t);
    if (c->closed_ && c->async_pending_ == 0) {
      // The closed session's last task has ended: a reinstatement need no longer wait for it.
      if (c->session_) c->gw_.Unregister(c->session_->tsih(), c->session_.get());
      auto last = std::move(c->keepalive_);  // may destroy the connection when this scope ends
      return;
    }
    return;
  }
  // Its store I/O has ended: a drain waiting for it (Session::DrainTasks) need not wait for the
  // response to go out too.
  t->drain.reset();
  if constexpr (runtime::io_trace::kEnabled) {
    t->trace.submitted = runtime::io_trace::current_ring.submitted;
    t->trace.reaped = runtime::io_trace::current_ring.reaped;
  }
  c->CountCommand(t);
  c->QueueTaskResponse(t);
  // Completions from the store arrive in batches (a ring's reap): one send for all of them.
  if (was_async) c->FlushSoon();
}

void Connection::CountCommand(const Task* t) {
  if (t->start_ns == 0 || t->scsi.lun >= lun_stats_.size()) return;
  runtime::LunStats*& ls = lun_stats_[t->scsi.lun];
  if (ls == nullptr) {
    // Once per LUN and connection: only configured LUNs get a series (bounded cardinality).
    const scsi::TargetInfo& info = session_->target()->info;
    if (info.FindLun(t->scsi.lun) == nullptr) return;
    ls = runtime::Stats::Global().ForLun(info.name, t->scsi.lun);
  }
  runtime::LunShard* shard = ls->shard(reactor_);
  if (shard == nullptr) return;
  const scsi::Task& st = t->scsi;
  const runtime::CmdClass cls = runtime::ClassifyCdb(st.cdb[0]);
  uint64_t bytes = 0;
  if (st.status == scsi::ScsiStatus::kGood) {
    if (cls == runtime::CmdClass::kRead) bytes = t->read ? std::min(st.in_len, t->edtl) : 0;
    if (cls == runtime::CmdClass::kWrite) bytes = t->received;
  }
  shard->Record(cls, bytes, runtime::NowNs() - t->start_ns);
  if (st.status == scsi::ScsiStatus::kCheckCondition && st.sense_len >= 3) {
    // SPC-4 4.5.2 / 4.5.3: descriptor format (72h/73h) keeps the key in byte 1, fixed in byte 2.
    const bool descriptor = (st.sense[0] & 0x7f) >= 0x72;
    const uint8_t key = (descriptor ? st.sense[1] : st.sense[2]) & 0x0f;
    runtime::Add(shard->check_conditions[key], 1);
    if (key == 0x06) runtime::Add(shard->unit_attentions, 1);  // SPC-4 4.5.6 UNIT ATTENTION
  } else if (st.status == scsi::ScsiStatus::kReservationConflict) {
    runtime::Add(shard->reservation_conflicts, 1);
  }
}

void Connection::QueueTaskResponse(Task* t) {
  t->state = Task::State::kResponding;
  const scsi::Task& st = t->scsi;
  // Data-In goes only where the initiator asked for it (R bit), truncated to EDTL.
  t->tx_len = t->read ? std::min(st.in_len, t->edtl) : 0;
  t->tx_offset = 0;
  t->tx_seg = 0;
  t->tx_seg_off = 0;
  if (tx_data_digest_ && t->tx_len > 0) CopyDataInForDigest(t);
  if constexpr (runtime::io_trace::kEnabled) t->trace.queued = runtime::NowNs();
  Queue(t);
}

void Connection::CopyDataInForDigest(Task* t) {
  scsi::Task& st = t->scsi;
  const uint8_t* lo = t->buf;
  const uint8_t* hi = t->buf + t->buf_cap;
  for (uint32_t i = 0; i < st.in_seg_count; ++i) {
    const backing::Segment& seg = st.in_segs[i];
    // Data the command produced in its own buffer is private to it already.
    if (seg.data >= lo && seg.data < hi) return;
  }
  if (t->buf == nullptr || t->buf_cap < t->tx_len) return;  // not reached: buf holds EDTL
  uint32_t copied = 0;
  for (uint32_t i = 0; i < st.in_seg_count && copied < t->tx_len; ++i) {
    const uint32_t n = std::min(st.in_segs[i].len, t->tx_len - copied);
    std::memcpy(t->buf + copied, st.in_segs[i].data, n);
    copied += n;
  }
  st.in_segs[0] = backing::Segment{t->buf, copied};
  st.in_seg_count = 1;
}

void Connection::UnlinkUnsolicited(Task* t) {
  for (Task** link = &unsol_head_; *link != nullptr; link = &(*link)->unsol_next) {
    if (*link == t) {
      *link = t->unsol_next;
      break;
    }
  }
  t->unsol_next = nullptr;
}

void Connection::ReleaseTask(Task* t) {
  if (t->state == Task::State::kFree) return;
  // A task released with R2Ts or a response still queued (aborted, failed, logged out) must not
  // be sent: a freed task would go out as a SCSI Response GOOD.
  if (t->tx_queued) Dequeue(t);
  if (t->buf != nullptr) {
    gw_.pool().buffers(reactor_).Put(t->buf, t->buf_cap);
    t->buf = nullptr;
    t->buf_cap = 0;
  }
  UnlinkUnsolicited(t);
  session_->FreeTask(t);
}

}  // namespace iscsigw::iscsi
