// Connection (connection.h): the send path. PDUs are queued as TxItems; Flush gathers a batch of
// iovecs (Data-In headers generated into the connection's header area, data straight from the
// engine's segments) and SendBatch hands it to sendmsg, waiting for writability only when the
// socket's send buffer is full.
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include "base/log.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/session.h"
#include "dataplane/pdu/crc32c.h"

namespace iscsigw::iscsi {

namespace asio = boost::asio;
using pdu::Opcode;
using pdu::RejectReason;

namespace {

constexpr uint8_t kZeroPad[4] = {0, 0, 0, 0};

iovec Iov(const void* p, size_t len) { return iovec{const_cast<void*>(p), len}; }

// Pushes a finished 48-byte header at slot into the batch, with a header digest when asked.
void PushHeader(std::vector<iovec>& bufs, uint8_t* slot, bool digest) {
  if (digest) {
    pdu::StoreDigest(slot + pdu::kBhsLength, pdu::Crc32c(slot, pdu::kBhsLength));
    bufs.push_back(Iov(slot, pdu::kBhsLength + pdu::kDigestLength));
  } else {
    bufs.push_back(Iov(slot, pdu::kBhsLength));
  }
}

}  // namespace
// ---------------------------------------------------------------------------------------------
// Control PDUs and the send queue

ControlPdu* Connection::NewControl() {
  ControlPdu* c;
  if (!control_free_.empty()) {
    c = control_free_.back();
    control_free_.pop_back();
  } else {
    control_storage_.push_back(std::make_unique<ControlPdu>());
    c = control_storage_.back().get();
  }
  c->hdr.Clear();
  c->data.clear();
  c->no_digest = false;
  c->close_after = false;
  c->assign_stat_sn = false;
  c->current_sn = false;
  // Backpressure: stop reading while the send side holds too many control PDUs.
  if (control_free_.size() < 4 && control_storage_.size() >= kMaxControlPdus) paused_ = true;
  return c;
}

std::shared_ptr<TaskDrain> Connection::QueueWhenDrained(ControlPdu* c) {
  return TaskDrain::Create(gw_.pool().context(reactor_), [weak = weak_from_this(), c] {
    auto self = weak.lock();
    if (!self || self->closed_) return;
    const bool login = self->held_login_ == c;
    if (login) {  // a reinstating login: the reader parses what waited
      self->held_ = false;
      self->held_login_ = nullptr;
      self->wake_.cancel();
    }
    self->QueueControl(c);
    self->Flush();
    if (login && self->logout_after_login_) {  // asked for while the response was held
      const std::chrono::seconds within = *self->logout_after_login_;
      self->logout_after_login_.reset();
      self->RequestLogout(within);
    }
  });
}

void Connection::Dequeue(TxItem* item) {
  TxItem* prev = nullptr;
  for (TxItem* it = tx_head_; it != nullptr; prev = it, it = it->tx_next) {
    if (it != item) continue;
    (prev != nullptr ? prev->tx_next : tx_head_) = it->tx_next;
    if (tx_tail_ == it) tx_tail_ = prev;
    break;
  }
  item->tx_queued = false;
  item->tx_next = nullptr;
}

void Connection::SendReject(const uint8_t* bhs, RejectReason reason) {
  // An initiator can make every PDU a reject: rate-limited.
  ISCSIGW_LOG_LIMITED(iscsi_log_limiter_, log::Iscsi(), spdlog::level::debug,
                      "{}reject opcode {:#x} reason {:#x}", LogCtx(), bhs[0] & 0x3f,
                      static_cast<unsigned>(reason));
  ControlPdu* c = NewControl();
  c->hdr.SetOpcode(Opcode::kReject);
  c->hdr.SetFlags(0x80);
  c->hdr.Set8(2, static_cast<uint8_t>(reason));
  c->hdr.SetItt(pdu::kReservedTag);
  c->assign_stat_sn = true;
  // RFC 7143 11.17: the data segment is the rejected PDU's header.
  c->data.assign(bhs, bhs + pdu::kBhsLength);
  QueueControl(c);
}

void Connection::FillSn(pdu::Bhs& h, bool advance_stat_sn) {
  const uint32_t stat = advance_stat_sn ? stat_sn_++ : stat_sn_;
  if (session_) {
    h.SetSn(stat, session_->exp_cmd_sn(), session_->max_cmd_sn());
  } else {
    h.Set32(24, stat);
  }
}

// ---------------------------------------------------------------------------------------------
// Building a batch: headers, data, padding and digests

uint8_t* Connection::AddHeader(bool digest) {
  uint8_t* slot = hdrs_[n_hdrs_].b.data();
  ++n_hdrs_;
  (void)digest;
  return slot;
}

void Connection::AddData(const uint8_t* p, uint32_t len) {
  if (len > 0) bufs_.push_back(Iov(p, len));
}

void Connection::FinishData(uint32_t len, uint32_t crc, bool digest) {
  // Padding and the data digest (which covers the padding too) of the PDU whose header is the
  // last one added.
  const uint32_t pad = pdu::PadLength(len);
  if (pad) {
    bufs_.push_back(Iov(kZeroPad, pad));
    if (digest) crc = pdu::Crc32cUpdate(crc, kZeroPad, pad);
  }
  if (digest && len > 0) {
    uint8_t* d = digest_slots_[n_hdrs_ - 1].data();
    pdu::StoreDigest(d, pdu::Crc32cFinish(crc));
    bufs_.push_back(Iov(d, pdu::kDigestLength));
  }
}

bool Connection::EmitControl(ControlPdu* c) {
  // Header, data, padding and digest: keep bufs_ within its reserved size (no growth, no
  // allocation) and leave the PDU for the next write when the batch is full.
  if (n_hdrs_ >= kMaxBatchHeaders || bufs_.size() + 4 > kMaxBatchBuffers) return false;
  if (c->assign_stat_sn) {
    FillSn(c->hdr, true);
  } else if (c->current_sn) {
    FillSn(c->hdr, false);
  }
  const bool hd = tx_header_digest_ && !c->no_digest;
  const bool dd = tx_data_digest_ && !c->no_digest;
  uint8_t* slot = AddHeader(hd);
  c->hdr.SetDataSegmentLength(static_cast<uint32_t>(c->data.size()));
  std::memcpy(slot, c->hdr.data(), pdu::kBhsLength);
  PushHeader(bufs_, slot, hd);
  CountTx(slot);
  const uint32_t len = static_cast<uint32_t>(c->data.size());
  AddData(c->data.data(), len);
  FinishData(len, dd ? pdu::Crc32cUpdate(pdu::kCrc32cInit, c->data.data(), len) : 0, dd);
  return true;
}

bool Connection::EmitTask(Task* t) {
  if (t->state == Task::State::kFree) return true;  // released while queued: nothing to send
  const bool hd = tx_header_digest_;
  const bool dd = tx_data_digest_;
  auto room = [&](size_t buffers) {
    return n_hdrs_ < kMaxBatchHeaders && bufs_.size() + buffers <= kMaxBatchBuffers;
  };

  if (t->state == Task::State::kReceivingData) {
    // R2Ts (RFC 7143 11.8): StatSN is not advanced.
    for (auto& s : t->r2t) {
      if (!s.active || s.sent) continue;
      if (!room(1)) return false;
      uint8_t* slot = AddHeader(hd);
      pdu::Bhs h;
      h.SetOpcode(Opcode::kR2T);
      h.SetFlags(0x80);
      h.SetLunRaw(t->lun_raw);
      h.SetItt(t->itt);
      h.Set32(20, s.ttt);
      FillSn(h, false);
      h.Set32(36, s.r2t_sn);
      h.Set32(40, s.offset);
      h.Set32(44, s.length);
      std::memcpy(slot, h.data(), pdu::kBhsLength);
      PushHeader(bufs_, slot, hd);
      CountTx(slot);
      s.sent = true;
    }
    return true;
  }

  const scsi::Task& st = t->scsi;
  // Residuals (RFC 7143 11.4.5): what the command itself would move against EDTL.
  // READ and WRITE say how much the CDB moves (in_len may be capped by the buffer); other
  // commands (INQUIRY, MODE SENSE, ...) move the data they produced.
  const uint32_t wanted = st.transfer_bytes != 0 ? st.transfer_bytes : (t->read ? st.in_len : 0);
  uint8_t res_flags = 0;
  uint32_t residual = 0;
  if (t->read || t->write) {
    if (wanted > t->edtl) {
      res_flags = 0x04;  // O
      residual = wanted - t->edtl;
    } else if (wanted < t->edtl) {
      res_flags = 0x02;  // U
      residual = t->edtl - wanted;
    }
  }
  // Status may ride in the last Data-In only without sense data (RFC 7143 11.7.4).
  const bool status_in_data = t->tx_len > 0 && st.sense_len == 0;
  const uint32_t mbl = params_.max_burst_length;

  while (t->tx_offset < t->tx_len) {
    if (!room(4 + scsi::kMaxInSegments)) return false;
    uint32_t len = std::min(max_send_segment_, t->tx_len - t->tx_offset);
    const uint32_t burst_end = (t->tx_offset / mbl + 1) * mbl;
    len = std::min(len, burst_end - t->tx_offset);
    const bool last = t->tx_offset + len == t->tx_len;
    const bool fbit = last || (t->tx_offset + len) % mbl == 0;
    const bool sbit = last && status_in_data;

    uint8_t* slot = AddHeader(hd);
    pdu::Bhs h;
    h.SetOpcode(Opcode::kDataIn);
    h.SetFlags(static_cast<uint8_t>((fbit ? 0x80 : 0) | (sbit ? 0x01 | res_flags : 0)));
    if (sbit) h.Set8(3, static_cast<uint8_t>(st.status));
    h.SetDataSegmentLength(len);
    h.SetLunRaw(t->lun_raw);
    h.SetItt(t->itt);
    h.Set32(20, pdu::kReservedTag);
    if (sbit) {
      // The status is on its way: the CmdSN slot is free, and this PDU says so (MaxCmdSN).
      if (session_) session_->ReleaseWindowSlot(t);
      FillSn(h, true);
      h.Set32(44, residual);
      t->status_sent = true;
    } else if (session_) {
      h.Set32(28, session_->exp_cmd_sn());
      h.Set32(32, session_->max_cmd_sn());
    }
    h.Set32(36, t->data_sn++);
    h.Set32(40, t->tx_offset);
    std::memcpy(slot, h.data(), pdu::kBhsLength);
    PushHeader(bufs_, slot, hd);
    CountTx(slot);

    // Data straight from the engine's segments (store memory or the task buffer).
    uint32_t crc = pdu::kCrc32cInit;
    uint32_t left = len;
    while (left > 0 && t->tx_seg < st.in_seg_count) {
      const backing::Segment& seg = st.in_segs[t->tx_seg];
      const uint32_t take = std::min(left, seg.len - t->tx_seg_off);
      const uint8_t* p = seg.data + t->tx_seg_off;
      AddData(p, take);
      if (dd) crc = pdu::Crc32cUpdate(crc, p, take);
      left -= take;
      t->tx_seg_off += take;
      if (t->tx_seg_off == seg.len) {
        ++t->tx_seg;
        t->tx_seg_off = 0;
      }
    }
    FinishData(len, crc, dd);
    t->tx_offset += len;
  }

  if (!t->status_sent) {
    if (!room(3)) return false;
    uint8_t* slot = AddHeader(hd);
    pdu::Bhs h;
    h.SetOpcode(Opcode::kScsiResponse);
    h.SetFlags(static_cast<uint8_t>(0x80 | res_flags));
    h.Set8(2, static_cast<uint8_t>(pdu::ScsiResponseCode::kCommandCompleted));
    h.Set8(3, static_cast<uint8_t>(st.status));
    h.SetItt(t->itt);
    if (session_) session_->ReleaseWindowSlot(t);
    FillSn(h, true);
    h.Set32(36, t->data_sn + t->next_r2t_sn);  // ExpDataSN: Data-In and R2T PDUs sent
    h.Set32(44, residual);
    uint32_t dlen = 0;
    if (st.sense_len > 0) {
      // RFC 7143 11.4.7: SenseLength then the sense data.
      StoreBe16(t->sense_data.data(), st.sense_len);
      std::memcpy(t->sense_data.data() + 2, st.sense.data(), st.sense_len);
      dlen = 2u + st.sense_len;
    }
    h.SetDataSegmentLength(dlen);
    std::memcpy(slot, h.data(), pdu::kBhsLength);
    PushHeader(bufs_, slot, hd);
    CountTx(slot);
    AddData(t->sense_data.data(), dlen);
    FinishData(dlen, dd ? pdu::Crc32cUpdate(pdu::kCrc32cInit, t->sense_data.data(), dlen) : 0, dd);
    t->status_sent = true;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Writing a batch

// The writer: a batch of PDUs (up to kMaxBatchHeaders) goes to the kernel straight away, in as
// few sendmsg calls as it takes; the reactor waits for writability only when the socket's send
// buffer is full.
void Connection::Flush() {
  while (!writing_ && !closed_ && tx_head_ != nullptr) {
    GatherBatch();
    if (bufs_.empty()) {
      if (!FinishBatch(0)) return;
      continue;
    }
    writing_ = true;
    const int err = SendBatch();
    if (err == EAGAIN) return WaitWritable();
    writing_ = false;
    if (!FinishBatch(err)) return;
  }
}

void Connection::GatherBatch() {
  bufs_.clear();
  send_pos_ = 0;
  sent_.clear();
  n_hdrs_ = 0;
  while (tx_head_ != nullptr && n_hdrs_ < kMaxBatchHeaders) {
    TxItem* item = tx_head_;
    const bool done = item->kind == TxItem::Kind::kControl
                          ? EmitControl(static_cast<ControlPdu*>(item))
                          : EmitTask(static_cast<Task*>(item));
    if (!done) break;
    tx_head_ = item->tx_next;
    if (tx_head_ == nullptr) tx_tail_ = nullptr;
    item->tx_queued = false;
    item->tx_next = nullptr;
    sent_.push_back(item);
  }
}

std::span<const iovec> Connection::GatherBatchForTest() {
  GatherBatch();
  return bufs_;
}

void Connection::WaitWritable() {
  socket_.async_wait(
      asio::ip::tcp::socket::wait_write,
      [self = shared_from_this()](const boost::system::error_code& ec) { self->OnWritable(ec); });
}

void Connection::FlushSoon() {
  if (flush_posted_ || closed_) return;
  flush_posted_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->Flush();
  });
}

int Connection::SendBatch() {
  const int fd = socket_.native_handle();
  while (send_pos_ < bufs_.size()) {
    msghdr m{};
    m.msg_iov = bufs_.data() + send_pos_;
    m.msg_iovlen = std::min<size_t>(bufs_.size() - send_pos_, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EWOULDBLOCK ? EAGAIN : errno;
    }
    // Skip what went; a partly sent iovec keeps its rest.
    size_t left = static_cast<size_t>(n);
    while (left > 0 && send_pos_ < bufs_.size()) {
      iovec& v = bufs_[send_pos_];
      if (left < v.iov_len) {
        v.iov_base = static_cast<uint8_t*>(v.iov_base) + left;
        v.iov_len -= left;
        break;
      }
      left -= v.iov_len;
      ++send_pos_;
    }
  }
  return 0;
}

void Connection::OnWritable(const boost::system::error_code& ec) {
  if (closed_) return;
  const int err = ec ? (ec.value() > 0 ? ec.value() : EIO) : SendBatch();
  if (err == EAGAIN) return WaitWritable();
  writing_ = false;
  if (!FinishBatch(err)) return;
  if (paused_) wake_.cancel();
  Flush();
}

bool Connection::FinishBatch(int err) {
  bool close = close_after_write_;
  const uint64_t sent_ns = runtime::io_trace::kEnabled ? runtime::NowNs() : 0;
  for (TxItem* item : sent_) {
    if (item->kind == TxItem::Kind::kControl) {
      auto* c = static_cast<ControlPdu*>(item);
      close = close || c->close_after;
      control_free_.push_back(c);
    } else {
      auto* t = static_cast<Task*>(item);
      // A task whose R2Ts went out stays alive for its Data-Out; a finished one is released.
      if (t->state == Task::State::kResponding && t->status_sent && !t->tx_queued) {
        if constexpr (runtime::io_trace::kEnabled) {
          if (err == 0) runtime::io_trace::ForThisThread().Record(t->trace, sent_ns);
        }
        ReleaseTask(t);
      }
    }
  }
  sent_.clear();
  if (err != 0) {
    ISCSIGW_LOG_CONN(log::Iscsi(), spdlog::level::debug, LogCtx(), "write to {} failed: {}", peer_,
                     std::error_code(err, std::system_category()).message());
    Close();
    return false;
  }
  if (close) {
    Close();
    return false;
  }
  return true;
}

}  // namespace iscsigw::iscsi
