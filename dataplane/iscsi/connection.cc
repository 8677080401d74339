// Connection (connection.h): its lifetime, the reader and the dispatch of each PDU by opcode,
// the timers (login deadline, NOP-In keep-alive, the deadline of a requested logout) and logout.
// The phases have files of their own: connection_login.cc, connection_text.cc,
// connection_command.cc (SCSI commands, Data-Out and R2T), connection_tmf.cc and
// connection_send.cc (the send path).
#include "dataplane/iscsi/connection.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>

#include "base/log.h"
#include "dataplane/iscsi/session.h"

namespace iscsigw::iscsi {

namespace asio = boost::asio;
using pdu::BhsView;
using pdu::Opcode;
using pdu::RejectReason;

namespace {

constexpr auto kTimerTick = std::chrono::milliseconds(500);

std::string EndpointString(const asio::ip::tcp::endpoint& ep) {
  const auto addr = ep.address();
  if (addr.is_v6()) return "[" + addr.to_string() + "]:" + std::to_string(ep.port());
  return addr.to_string() + ":" + std::to_string(ep.port());
}

}  // namespace

Connection::Connection(Gateway& gw, unsigned reactor, asio::ip::tcp::socket socket, uint64_t id)
    : gw_(gw),
      reactor_(reactor),
      stats_(runtime::Stats::Global().reactor(reactor)),
      socket_(std::move(socket)),
      id_(id),
      rx_(new uint8_t[kRxBufferSize]),
      wake_(socket_.get_executor()),
      timer_(socket_.get_executor()) {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("?") : EndpointString(ep);
  peer_ip_ = ec ? std::string("?") : ep.address().to_string();
  source_ = AuthThrottle::SourcePrefix(peer_ip_);
  gw_.AddSourceConnection(source_);
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  // Until login has declared ours, the initiator may send no more than the default
  // MaxRecvDataSegmentLength (RFC 7143 13.12): a connection that has not authenticated touches at
  // most that much of rx_. ApplyNegotiatedLimits raises it.
  rx_limits_.max_data_segment_length = kLoginMaxDataSegmentLength;
  bufs_.reserve(kMaxBatchBuffers);
  sent_.reserve(kMaxBatchHeaders + kMaxControlPdus);
  control_storage_.reserve(kMaxControlPdus);
  control_free_.reserve(kMaxControlPdus);
}

Connection::~Connection() {
  // An evicted connection's slot went to the connection that evicted it.
  if (admission_.load(std::memory_order_acquire) != Admission::kEvicted) gw_.RemoveConnection();
  gw_.RemoveSourceConnection(source_);
  if (discovery_ffp_.exchange(false)) gw_.RemoveDiscoverySession();
}

bool Connection::EvictIfLoggingIn() {
  Admission expected = Admission::kLoggingIn;
  return admission_.compare_exchange_strong(expected, Admission::kEvicted,
                                            std::memory_order_acq_rel);
}

bool Connection::EvictIfDiscovery() {
  if (!discovery_ffp_.load(std::memory_order_acquire)) return false;
  Admission expected = Admission::kAdmitted;
  return admission_.compare_exchange_strong(expected, Admission::kEvicted,
                                            std::memory_order_acq_rel);
}

void Connection::Start() {
  started_ = last_rx_ = std::chrono::steady_clock::now();  // counted by the acceptor
  // The writer calls sendmsg itself (SendBatch): it must never block the reactor.
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  if (ec) {
    Close();
    return;
  }
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->ReadLoop(); }, asio::detached);
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->TimerLoop(); }, asio::detached);
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  phase_ = Phase::kClosed;
  gw_.pool().AddConnection(reactor_, -1);
  boost::system::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  timer_.cancel();
  wake_.cancel();

  // Drop everything queued or in flight on the wire; tasks go back to the session.
  tx_head_ = tx_tail_ = nullptr;
  sent_.clear();
  if (session_) {
    for (Task& t : session_->tasks()) {
      t.tx_queued = false;
      if (t.state == Task::State::kFree) continue;
      if (t.state == Task::State::kExecuting && t.async_pending) {
        t.aborted = true;  // released when the store completes
      } else {
        ReleaseTask(&t);
      }
    }
    // A session whose writes are still in flight stays registered, closing, until they end: a
    // reinstatement of it must wait for them (RFC 7143 6.3.5). OnScsiComplete unregisters it.
    session_->set_closing();
    if (async_pending_ == 0) gw_.Unregister(session_->tsih(), session_.get());
    session_->set_connection(nullptr);
    if (session_->tsih() != 0) {
      log::Iscsi().info("{}session closed: {} session of {} from {}", LogCtx(),
                        session_->target() ? "normal" : "discovery", session_->initiator_name(),
                        peer_);
    }
  }
  if (async_pending_ > 0) keepalive_ = shared_from_this();
}

log::ConnContext Connection::LogCtx() const {
  log::ConnContext c{id_, 0, {}, {}};
  if (session_) {
    c.tsih = session_->tsih();
    c.initiator = session_->initiator_name();
    c.target = session_->target_name();
  } else if (negotiator_) {
    // During login: the names the initiator has given so far (RFC 7143 6.3.1).
    c.initiator = negotiator_->params().initiator_name;
    c.target = negotiator_->params().target_name;
  }
  return c;
}

std::string Connection::PortalAddress() const {
  boost::system::error_code ec;
  auto ep = socket_.local_endpoint(ec);
  return ec ? std::string() : EndpointString(ep);
}

// ---------------------------------------------------------------------------------------------
// Receive side

asio::awaitable<void> Connection::ReadLoop() {
  auto self = shared_from_this();
  while (!closed_) {
    // Keep room for the largest PDU we accept after the bytes already buffered.
    const size_t max_pdu = pdu::kBhsLength + 1024 + 8 + rx_limits_.max_data_segment_length + 8;
    if (kRxBufferSize - rx_end_ < max_pdu && rx_begin_ > 0) {
      std::memmove(rx_.get(), rx_.get() + rx_begin_, rx_end_ - rx_begin_);
      rx_end_ -= rx_begin_;
      rx_begin_ = 0;
    }
    if (rx_end_ == kRxBufferSize) break;  // cannot happen within the negotiated limits
    auto [ec, n] =
        co_await socket_.async_read_some(asio::buffer(rx_.get() + rx_end_, kRxBufferSize - rx_end_),
                                         asio::as_tuple(asio::use_awaitable));
    if (ec || closed_) break;
    rx_end_ += n;
    last_rx_ = std::chrono::steady_clock::now();

    bool ok = ParseBuffered();
    Flush();
    // Backpressure: while the send side is full of control PDUs, wait for it to drain before
    // parsing (and reading) more.
    // (Flush may have drained it already: a batch the socket takes at once is finished inline.)
    auto drained = [this] {
      return control_free_.size() >= 4 || control_storage_.size() < kMaxControlPdus;
    };
    while (ok && (paused_ || held_) && !closed_) {
      if (paused_ && drained()) paused_ = false;
      if (paused_ || held_) {
        wake_.expires_after(std::chrono::seconds(1));
        co_await wake_.async_wait(asio::as_tuple(asio::use_awaitable));
        if (paused_ && drained()) paused_ = false;
      }
      if (!paused_ && !held_ && !closed_) {
        ok = ParseBuffered();
        Flush();
      }
    }
    if (!ok) break;
  }
  Close();
}

bool Connection::ParseBuffered() {
  bool ok = true;
  while (ok && !closed_ && !paused_ && !held_) {
    if (phase_ == Phase::kLoggingOut) {
      rx_begin_ = rx_end_;  // nothing more is processed after a logout or a final reject
      break;
    }
    pdu::Frame f;
    const auto r = pdu::ParseFrame({rx_.get() + rx_begin_, rx_end_ - rx_begin_}, rx_limits_, &f);
    if (r.status == pdu::FrameStatus::kNeedMore) break;
    if (r.status == pdu::FrameStatus::kHeaderDigestError) {
      // RFC 7143 7.8: with a bad header digest no length can be trusted; ERL 0 closes.
      log::Pdu().warn("{}header digest error from {}: closing the connection", LogCtx(), peer_);
      if (auto* s = Counters()) runtime::Add(s->digest_errors, 1);
      return false;
    }
    if (r.status == pdu::FrameStatus::kDataSegmentTooLong) {
      log::Pdu().warn("{}DataSegmentLength {} from {} exceeds MaxRecvDataSegmentLength {}",
                      LogCtx(), BhsView(rx_.get() + rx_begin_).data_segment_length(), peer_,
                      rx_limits_.max_data_segment_length);
      SendReject(rx_.get() + rx_begin_, RejectReason::kProtocolError);
      phase_ = Phase::kLoggingOut;
      close_after_write_ = true;
      break;
    }
    if (r.status == pdu::FrameStatus::kDataDigestError) {
      // RFC 7143 7.8 / 11.17.1: discard the PDU and reject it with "data digest error". For
      // immediate data "the non-data part of the command PDU is considered", and a Data-Out still
      // belongs to its task: both are handled without their data, and the task ends with CHECK
      // CONDITION once all its data is in instead of running on corrupt data.
      // Per PDU and caused by the initiator's side (or the network): rate-limited.
      ISCSIGW_LOG_LIMITED(pdu_log_limiter_, log::Pdu(), spdlog::level::warn,
                          "{}data digest error from {}", LogCtx(), peer_);
      if (auto* s = Counters()) runtime::Add(s->digest_errors, 1);
      SendReject(f.bhs, RejectReason::kDataDigestError);
      const Opcode op = BhsView(f.bhs).opcode();
      if (phase_ == Phase::kFullFeature && (op == Opcode::kScsiCommand || op == Opcode::kDataOut)) {
        ok = HandleFrame(f);
      }
    } else {
      ok = HandleFrame(f);
    }
    rx_begin_ += f.total_length;
  }
  if (rx_begin_ == rx_end_) rx_begin_ = rx_end_ = 0;
  return ok;
}

bool Connection::HandleFrame(const pdu::Frame& f) {
  BhsView h(f.bhs);
  if (auto* s = Counters()) s->Pdu(0, f.bhs[0]);
  const Opcode op = h.opcode();
  if (phase_ == Phase::kLogin) {
    if (op != Opcode::kLoginRequest) {
      // RFC 7143 6.3: only Login Requests before full feature phase; anything else ends the login.
      log::Iscsi().warn("{}opcode {:#x} during login from {}", LogCtx(), h.raw_opcode(), peer_);
      return false;
    }
    return HandleLogin(f);
  }
  switch (op) {
    case Opcode::kScsiCommand:
      return HandleScsiCommand(f);
    case Opcode::kDataOut:
      return HandleDataOut(f);
    case Opcode::kNopOut:
      return HandleNopOut(f);
    case Opcode::kTaskMgmtRequest:
      return HandleTaskMgmt(f);
    case Opcode::kTextRequest:
      return HandleText(f);
    case Opcode::kLogoutRequest:
      return HandleLogout(f);
    case Opcode::kLoginRequest:
      // RFC 7143 11.12: a Login Request in full feature phase is a protocol error.
      SendReject(f.bhs, RejectReason::kProtocolError);
      return true;
    case Opcode::kSnackRequest:
      // ErrorRecoveryLevel 0 has no SNACK support (RFC 7143 11.16, 7.1.5).
      SendReject(f.bhs, RejectReason::kCommandNotSupported);
      return true;
    default:
      SendReject(f.bhs, RejectReason::kProtocolError);
      return true;
  }
}

bool Connection::AcceptCmdSn(const BhsView& h) {
  if (h.immediate()) return true;  // immediate delivery: CmdSN is not advanced (RFC 7143 4.2.2.1)
  const uint32_t sn = h.cmd_sn();
  // With every slot taken MaxCmdSN is ExpCmdSN - 1: then even CmdSN == ExpCmdSN is outside.
  if (sn == session_->exp_cmd_sn() && pdu::SnLessEq(sn, session_->max_cmd_sn())) {
    session_->AdvanceCmdSn();
    return true;
  }
  // RFC 7143 4.2.2.1: a non-immediate command outside [ExpCmdSN, MaxCmdSN] is silently ignored.
  // With one connection per session TCP keeps commands in order, so a CmdSN ahead of ExpCmdSN
  // can only come from a broken initiator; it is dropped as well rather than held forever.
  ISCSIGW_LOG_LIMITED(iscsi_log_limiter_, log::Iscsi(), spdlog::level::debug,
                      "{}dropping CmdSN {} (ExpCmdSN {}, MaxCmdSN {})", LogCtx(), sn,
                      session_->exp_cmd_sn(), session_->max_cmd_sn());
  return false;
}

// ---------------------------------------------------------------------------------------------
// NOP (RFC 7143 11.18, 11.19) and the timers: login deadline, NOP-In keep-alive, logout deadline

bool Connection::HandleNopOut(const pdu::Frame& f) {
  BhsView h(f.bhs);
  if (h.itt() == pdu::kReservedTag) {
    // RFC 7143 11.18: an answer to our ping (TTT echoes ours), or a one-way ping with I=1.
    if (ping_outstanding_ && h.ttt() == ping_ttt_) ping_outstanding_ = false;
    return true;
  }
  if (!AcceptCmdSn(h)) return true;
  ControlPdu* c = NewControl();
  c->hdr.SetOpcode(Opcode::kNopIn);
  c->hdr.SetFlags(0x80);
  c->hdr.SetLunRaw(h.lun_raw());
  c->hdr.SetItt(h.itt());
  c->hdr.Set32(20, pdu::kReservedTag);
  c->assign_stat_sn = true;
  // RFC 7143 11.19.3: the ping data comes back, up to the initiator's MaxRecvDataSegmentLength.
  const uint32_t n = std::min(f.data_length, max_send_segment_);
  c->data.assign(f.data, f.data + n);
  QueueControl(c);
  return true;
}

asio::awaitable<void> Connection::TimerLoop() {
  auto self = shared_from_this();
  const auto& opts = gw_.options();
  while (!closed_) {
    timer_.expires_after(kTimerTick);
    co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (closed_) break;
    const auto now = std::chrono::steady_clock::now();
    if (phase_ == Phase::kLogin) {
      if (now - started_ > std::chrono::milliseconds(opts.login_timeout_ms)) {
        log::Iscsi().info("{}login from {} timed out", LogCtx(), peer_);
        Close();
        break;
      }
      continue;
    }
    if (phase_ != Phase::kFullFeature || held_) continue;
    if (discovery_ffp_.load(std::memory_order_relaxed) &&
        now - last_request_ > std::chrono::milliseconds(opts.discovery_idle_timeout_ms)) {
      log::Iscsi().info("{}discovery session from {} idle for {} ms: closing", LogCtx(), peer_,
                        opts.discovery_idle_timeout_ms);
      Close();
      break;
    }
    if (logout_deadline_ && now >= *logout_deadline_) {
      log::Iscsi().info("{}{} did not log out when asked: dropping connection", LogCtx(), peer_);
      Close();
      break;
    }
    if (ping_outstanding_) {
      if (now - ping_sent_ > std::chrono::milliseconds(opts.nop_timeout_ms)) {
        log::Iscsi().warn("{}NOP-In ping to {} unanswered for {} ms: dropping connection", LogCtx(),
                          peer_, opts.nop_timeout_ms);
        if (auto* s = Counters()) runtime::Add(s->nop_timeouts, 1);
        Close();
        break;
      }
    } else if (now - last_rx_ > std::chrono::milliseconds(opts.nop_interval_ms)) {
      ControlPdu* c = NewControl();
      c->hdr.SetOpcode(Opcode::kNopIn);
      c->hdr.SetFlags(0x80);
      c->hdr.SetItt(pdu::kReservedTag);
      ping_ttt_ = (ping_ttt_ + 1) & 0x7fffffff;
      c->hdr.Set32(20, ping_ttt_);
      // A target-initiated ping does not advance StatSN; its StatSN, ExpCmdSN and MaxCmdSN are
      // those current when it is sent, not when it was queued behind other PDUs.
      c->current_sn = true;
      ping_outstanding_ = true;
      ping_sent_ = now;
      QueueControl(c);
      Flush();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Logout (RFC 7143 11.14, 11.15) and the target's request for it (11.9.1)

bool Connection::HandleLogout(const pdu::Frame& f) {
  BhsView h(f.bhs);
  if (!AcceptCmdSn(h)) return true;
  if (auto* s = Counters()) runtime::Add(s->logouts, 1);
  const auto reason = static_cast<pdu::LogoutReason>(h.logout_reason());
  auto resp = pdu::LogoutResponse::kSuccess;
  if (reason == pdu::LogoutReason::kRemoveConnectionForRecovery) {
    resp = pdu::LogoutResponse::kRecoveryNotSupported;  // ErrorRecoveryLevel 0
  } else if (reason == pdu::LogoutReason::kCloseConnection && h.cid() != cid_) {
    resp = pdu::LogoutResponse::kCidNotFound;
  } else if (static_cast<uint8_t>(reason) > 2) {
    SendReject(f.bhs, RejectReason::kInvalidPduField);
    return true;
  }
  ControlPdu* c = NewControl();
  c->hdr.SetOpcode(Opcode::kLogoutResponse);
  c->hdr.SetFlags(0x80);
  c->hdr.Set8(2, static_cast<uint8_t>(resp));
  c->hdr.SetItt(h.itt());
  c->hdr.Set16(40, 0);  // Time2Wait
  c->hdr.Set16(42, 0);  // Time2Retain: no connection recovery at ERL 0
  c->assign_stat_sn = true;
  if (resp == pdu::LogoutResponse::kSuccess) {
    // Tasks still waiting for data cannot finish on a closing connection; those whose writes are
    // in flight end first, so that after the response none of the session's writes can land.
    AbortTasks(~uint64_t{0}, QueueWhenDrained(c));
    c->close_after = true;
    phase_ = Phase::kLoggingOut;
    log::Iscsi().info("{}logout: initiator {} from {} reason {}", LogCtx(),
                      session_->initiator_name(), peer_, static_cast<unsigned>(reason));
    return true;
  }
  QueueControl(c);
  return true;
}

void Connection::RequestLogout(std::chrono::seconds within) {
  if (closed_ || phase_ != Phase::kFullFeature || logout_deadline_) return;
  if (held_) {
    logout_after_login_ = within;
    return;
  }
  ControlPdu* c = NewControl();
  c->hdr.SetOpcode(Opcode::kAsyncMessage);
  c->hdr.SetFlags(0x80);
  c->hdr.SetItt(pdu::kReservedTag);
  c->hdr.Set8(36, static_cast<uint8_t>(pdu::AsyncEvent::kLogoutRequest));
  // Parameter3: seconds the initiator has to log out before the target drops the connection.
  c->hdr.Set16(42, static_cast<uint16_t>(within.count()));
  c->assign_stat_sn = true;
  logout_deadline_ = std::chrono::steady_clock::now() + within;
  QueueControl(c);
  Flush();
}

}  // namespace iscsigw::iscsi
