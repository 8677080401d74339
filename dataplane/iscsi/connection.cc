#include "dataplane/iscsi/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include "base/log.h"
#include "dataplane/iscsi/session.h"
#include "dataplane/pdu/crc32c.h"

namespace iscsigw::iscsi {

namespace asio = boost::asio;
using pdu::BhsView;
using pdu::Opcode;
using pdu::RejectReason;

namespace {

constexpr uint8_t kZeroPad[4] = {0, 0, 0, 0};
constexpr auto kTimerTick = std::chrono::milliseconds(500);

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
// Login (RFC 7143 6.3, 11.12, 11.13)

bool Connection::SendLoginReject(const BhsView& req, LoginStatus status) {
  CountLogin(static_cast<uint16_t>(status));
  log::Iscsi().info("{}login from {} rejected: status {:#06x}{}{}", LogCtx(), peer_,
                    static_cast<unsigned>(status),
                    negotiator_ && !negotiator_->error().empty() ? ": " : "",
                    negotiator_ ? negotiator_->error() : "");
  ControlPdu* c = NewControl();
  pdu::Bhs& r = c->hdr;
  r.SetOpcode(Opcode::kLoginResponse);
  r.SetFlags(0);
  r.Set8(2, 0);
  r.Set8(3, 0);
  std::memcpy(&r.b[8], req.isid(), 6);
  r.SetItt(req.itt());
  r.SetSn(stat_sn_++, session_ ? session_->exp_cmd_sn() : req.cmd_sn(),
          session_ ? session_->max_cmd_sn() : req.cmd_sn());
  r.Set8(36, static_cast<uint8_t>(static_cast<uint16_t>(status) >> 8));
  r.Set8(37, static_cast<uint8_t>(static_cast<uint16_t>(status)));
  c->no_digest = true;
  c->close_after = true;
  QueueControl(c);
  phase_ = Phase::kLoggingOut;
  return true;
}

bool Connection::HandleLogin(const pdu::Frame& f) {
  BhsView h(f.bhs);
  if (!login_started_) {
    login_started_ = true;
    std::memcpy(isid_.data(), h.isid(), 6);
    login_tsih_ = h.tsih();
    cid_ = h.cid();
    stat_sn_ = h.exp_stat_sn();
    negotiator_ = std::make_unique<Negotiator>(gw_.options().limits, std::string());
  } else if (std::memcmp(isid_.data(), h.isid(), 6) != 0 || h.tsih() != login_tsih_) {
    // RFC 7143 11.12.5: ISID and TSIH stay the same throughout a login.
    return SendLoginReject(h, LoginStatus::kInitiatorError);
  }
  login_itt_ = h.itt();
  // RFC 7143 11.12.4: this target speaks version 0x00 only.
  if (h.version_min() > 0) return SendLoginReject(h, LoginStatus::kUnsupportedVersion);
  if (f.data_length > 0 && !login_text_.Append({f.data, f.data_length}).ok()) {
    return SendLoginReject(h, LoginStatus::kInitiatorError);
  }
  const LoginStageFields stage{h.csg(), h.nsg(), h.transit(), h.cont()};
  const uint8_t csg = stage.csg;
  const uint8_t nsg = stage.nsg;
  // RFC 7143 6.3, 11.12.2-3: the request must be in the stage the target is in (login_stages.h).
  std::string why;
  if (const LoginStatus st = login_stages_.Check(stage, &why); st != LoginStatus::kSuccess) {
    return RefuseLoginStage(h, st, why);
  }
  if (stage.cont) {
    // RFC 7143 11.12.2: acknowledge a continued request with an empty response in the same stage.
    ControlPdu* c = NewControl();
    c->hdr.SetOpcode(Opcode::kLoginResponse);
    c->hdr.SetFlags(static_cast<uint8_t>(csg << 2));
    std::memcpy(&c->hdr.b[8], h.isid(), 6);
    c->hdr.SetItt(h.itt());
    c->hdr.SetSn(stat_sn_++, h.cmd_sn(), h.cmd_sn());
    c->no_digest = true;
    QueueControl(c);
    login_stages_.Answered(stage, false);
    return true;
  }
  auto keys = login_text_.Take();
  if (!keys.ok()) {
    log::Iscsi().info("{}login from {}: {}", LogCtx(), peer_, keys.status().message());
    return SendLoginReject(h, LoginStatus::kInitiatorError);
  }
  if (!auth_prepared_) {
    auth_prepared_ = true;
    PrepareAuth(keys.value());
    login_stages_.RequireAuthentication(chap_ != nullptr);
  }
  // RFC 7143 12: nothing past the security stage before the required authentication succeeded.
  if (const LoginStatus st = login_stages_.CheckAuthentication(stage, &why);
      st != LoginStatus::kSuccess) {
    return RefuseLoginStage(h, st, why);
  }

  std::vector<pdu::KeyValue> out;
  LoginStatus st = negotiator_->Process(keys.value(), static_cast<Stage>(csg), &out);
  if (st != LoginStatus::kSuccess) return SendLoginReject(h, st);

  // The first request names the initiator, the session type and the target (RFC 7143 6.3.1).
  if (session_type_ == SessionType::kUnknown) {
    const SessionParams& p = negotiator_->params();
    if (p.initiator_name.empty()) return SendLoginReject(h, LoginStatus::kMissingParameter);
    session_type_ =
        p.session_type == SessionType::kDiscovery ? SessionType::kDiscovery : SessionType::kNormal;
    if (session_type_ == SessionType::kNormal) {
      if (!negotiator_->target_name_given()) {
        return SendLoginReject(h, LoginStatus::kMissingParameter);
      }
      if (!login_target_) login_target_ = gw_.snapshot()->Find(p.target_name);
      if (!login_target_) {
        log::Iscsi().info("{}login from {}: target {} not found", LogCtx(), peer_, p.target_name);
        return SendLoginReject(h, LoginStatus::kNotFound);
      }
      if (!login_target_->Allows(p.initiator_name, peer_)) {
        log::Iscsi().info("{}login from {}: initiator {} not in the ACL of {}", LogCtx(), peer_,
                          p.initiator_name, p.target_name);
        return SendLoginReject(h, LoginStatus::kAuthorizationFailure);
      }
    }
    if (login_tsih_ != 0) {
      // Adding a connection to an existing session: MaxConnections is 1 (RFC 7143 6.3.3).
      return SendLoginReject(h, gw_.FindSession(login_tsih_) ? LoginStatus::kTooManyConnections
                                                             : LoginStatus::kSessionDoesNotExist);
    }
  }

  // RFC 7143 12.1.3: CHAP runs in the security stage once AuthMethod=CHAP is agreed; the login
  // stays in that stage (T=0 in the response) until the initiator, and the target if asked, are
  // authenticated. Failures are 0x0201 (11.13.5); the reason is logged, secrets never are.
  if (chap_ && static_cast<Stage>(csg) == Stage::kSecurity) {
    if (negotiator_->auth_method() != "CHAP") {
      log::Iscsi().info("{}login from {}: CHAP required, AuthMethod not agreed", LogCtx(), peer_);
      return SendLoginReject(h, LoginStatus::kAuthenticationFailure);
    }
    // Guessing is throttled per initiator name and source, and per source and target
    // (auth_throttle.h; discovery is the empty target name): a locked-out login is refused
    // before its response is looked at.
    AuthThrottle& throttle = gw_.auth_throttle();
    const std::string& who = negotiator_->params().initiator_name;
    const std::string_view target = login_target_ ? login_target_->info.name : std::string_view();
    const auto now = std::chrono::steady_clock::now();
    if (const auto locked = throttle.LockedFor(who, peer_ip_, target, now); locked.count() > 0) {
      ISCSIGW_LOG_LIMITED(
          iscsi_log_limiter_, log::Iscsi(), spdlog::level::warn,
          "{}login from {}: CHAP refused, {} is locked out for {} ms after failed attempts",
          LogCtx(), peer_, who,
          std::chrono::duration_cast<std::chrono::milliseconds>(locked).count());
      return SendLoginReject(h, LoginStatus::kAuthenticationFailure);
    }
    const auto outcome = chap_->Step(keys.value(), &out);
    if (outcome == ChapAuthenticator::Outcome::kAuthFailed ||
        outcome == ChapAuthenticator::Outcome::kProtocolError) {
      const auto failure = throttle.RecordFailure(who, peer_ip_, target, now);
      log::Iscsi().warn(
          "{}login from {}: CHAP failed for {} ({} in a row, {} from this source; locked out for "
          "{} ms): {}",
          LogCtx(), peer_, who, failure.in_a_row, failure.from_source,
          std::chrono::duration_cast<std::chrono::milliseconds>(failure.lockout).count(),
          chap_->error());
      return SendLoginReject(h, outcome == ChapAuthenticator::Outcome::kAuthFailed
                                    ? LoginStatus::kAuthenticationFailure
                                    : LoginStatus::kInitiatorError);
    }
    if (chap_->done()) {
      throttle.RecordSuccess(who, peer_ip_);
      login_stages_.Authenticated();
    }
  }
  const bool transit = login_stages_.MayTransit(stage);

  const uint16_t tpgt = login_target_ ? login_target_->info.tpgt : 1;
  negotiator_->AppendTargetDeclarations(static_cast<Stage>(csg), tpgt, &out);

  const bool to_ffp = transit && nsg == 3;
  std::vector<std::shared_ptr<Session>> replaced;
  if (to_ffp) {
    // The invariant the stage rules exist for: no session without the authentication it requires.
    if (!login_stages_.authentication_satisfied()) {
      return RefuseLoginStage(h, LoginStatus::kAuthenticationFailure,
                              "full feature phase before the required authentication succeeded");
    }
    st = negotiator_->Finish();
    if (st != LoginStatus::kSuccess) return SendLoginReject(h, st);
    const bool discovery = session_type_ == SessionType::kDiscovery;
    if (discovery && !gw_.TryAddDiscoverySession()) {
      ISCSIGW_LOG_LIMITED(iscsi_log_limiter_, log::Iscsi(), spdlog::level::warn,
                          "{}discovery from {} refused: {} discovery sessions already", LogCtx(),
                          peer_, gw_.options().max_discovery_sessions);
      return SendLoginReject(h, LoginStatus::kOutOfResources);
    }
    Admission expected = Admission::kLoggingIn;
    if (!admission_.compare_exchange_strong(expected, Admission::kAdmitted,
                                            std::memory_order_acq_rel)) {
      // Evicted by the acceptor a moment ago to make room (EvictIfLoggingIn); its Close() is on
      // the way.
      if (discovery) gw_.RemoveDiscoverySession();
      return false;
    }
    if (discovery) {
      discovery_ffp_.store(true, std::memory_order_release);
      last_request_ = std::chrono::steady_clock::now();
    }
    params_ = negotiator_->params();
    params_.session_type = session_type_;
    session_ = std::make_shared<Session>(gw_, reactor_, params_.initiator_name, isid_,
                                         login_target_, params_, peer_);
    session_->set_exp_cmd_sn(h.cmd_sn());
    gw_.Register(session_, &replaced);
    session_->set_connection(this);
    if (login_target_) {
      // A configuration published after this login looked its target up and before Register
      // made the session visible to Publish did not reach it: take the current one (a later
      // Publish sees the session), or go as Publish drops a session whose target is gone.
      auto now = gw_.snapshot()->Find(login_target_->info.name);
      if (now == nullptr) {
        asio::post(gw_.pool().context(reactor_), [s = session_] { s->Drop(); });
      } else if (now != login_target_) {
        session_->set_target(std::move(now));
      }
    }
  }

  ControlPdu* c = NewControl();
  pdu::Bhs& r = c->hdr;
  r.SetOpcode(Opcode::kLoginResponse);
  r.SetFlags(transit ? static_cast<uint8_t>(0x80 | (csg << 2) | nsg)
                     : static_cast<uint8_t>(csg << 2));
  r.Set8(2, 0);  // Version-max
  r.Set8(3, 0);  // Version-active
  std::memcpy(&r.b[8], isid_.data(), 6);
  r.Set16(14, session_ ? session_->tsih() : 0);
  r.SetItt(h.itt());
  const uint32_t exp = session_ ? session_->exp_cmd_sn() : h.cmd_sn();
  const uint32_t max = session_ ? session_->max_cmd_sn() : h.cmd_sn();
  r.SetSn(stat_sn_++, exp, max);
  pdu::EncodeText(out, &c->data);
  c->no_digest = true;
  if (replaced.empty()) {
    QueueControl(c);
  } else {
    // RFC 7143 6.3.5 session reinstatement: the old session's connection is closed, and the new
    // session starts only once the old one's tasks have ended, so that none of its writes can land
    // after the initiator's retries of them. The login response waits for that.
    held_ = true;
    held_login_ = c;
    auto drain = QueueWhenDrained(c);
    for (auto& old : replaced) {
      log::Iscsi().info("{}reinstating session {} of {}: waiting for its tasks", LogCtx(),
                        old->tsih(), old->initiator_name());
      asio::post(gw_.pool().context(old->reactor()), [old, drain] { old->Drop(drain); });
    }
  }

  if (to_ffp) {
    phase_ = Phase::kFullFeature;
    CountLogin(0);
    ApplyNegotiatedLimits();
    log::Iscsi().info(
        "{}login: initiator {} isid {} -> {} from {} on reactor {} (digests {}/{}, "
        "MaxRecvDataSegmentLength {}/{}, MaxBurstLength {}, FirstBurstLength {}, ImmediateData {}, "
        "InitialR2T {})",
        LogCtx(), params_.initiator_name, IsidHex(isid_),
        login_target_ ? login_target_->info.name : "discovery", peer_, reactor_,
        params_.header_digest ? "CRC32C" : "None", params_.data_digest ? "CRC32C" : "None",
        params_.target_max_recv_data_segment_length, params_.initiator_max_recv_data_segment_length,
        params_.max_burst_length, params_.first_burst_length, params_.immediate_data,
        params_.initial_r2t);
    // From here the session follows its target's configuration (Gateway::Publish). The login's
    // copy would keep the LUNs of that time alive for the life of the connection: a deleted
    // LUN's store open, its file's blocks not freed, its rbd image watched and not removable.
    login_target_.reset();
    chap_.reset();
  }
  login_stages_.Answered(stage, transit);
  return true;
}

bool Connection::RefuseLoginStage(const BhsView& req, LoginStatus status, std::string_view why) {
  // Logged at warning level like a failed CHAP, and counted by status in SendLoginReject. It does
  // not feed the CHAP lockout: a request that carries no response guesses nothing, and an
  // initiator without credentials configured would only lock itself out.
  const std::string& who = negotiator_ ? negotiator_->params().initiator_name : std::string();
  ISCSIGW_LOG_LIMITED(iscsi_log_limiter_, log::Iscsi(), spdlog::level::warn,
                      "{}login from {}{}{}: refused, {}", LogCtx(), peer_,
                      who.empty() ? "" : " as ", who, why);
  return SendLoginReject(req, status);
}

void Connection::PrepareAuth(const std::vector<pdu::KeyValue>& first_request) {
  bool discovery = false;
  const std::string* target_name = nullptr;
  for (const auto& kv : first_request) {
    if (kv.key == "SessionType") discovery = kv.value == "Discovery";
    if (kv.key == "TargetName") target_name = &kv.value;
  }
  auto snap = gw_.snapshot();
  const ChapCredentials* creds = nullptr;
  if (discovery) {
    creds = &snap->discovery_chap;
  } else if (target_name != nullptr) {
    login_target_ = snap->Find(*target_name);
    if (login_target_) creds = &login_target_->chap;
  }
  if (creds != nullptr && creds->enabled()) {
    chap_ = std::make_unique<ChapAuthenticator>(*creds, gw_.options().chap_digests);
    negotiator_->SetAuthMethods({"CHAP"});
  }
}

void Connection::RequestLogout(std::chrono::seconds within) {
  if (closed_ || phase_ != Phase::kFullFeature || logout_deadline_) return;
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

void Connection::ApplyNegotiatedLimits() {
  rx_limits_.max_data_segment_length = params_.target_max_recv_data_segment_length;
  rx_limits_.header_digest = params_.header_digest;
  rx_limits_.data_digest = params_.data_digest;
  tx_header_digest_ = params_.header_digest;
  tx_data_digest_ = params_.data_digest;
  max_send_segment_ = params_.initiator_max_recv_data_segment_length;
}

// ---------------------------------------------------------------------------------------------
// SCSI commands and Data-Out (RFC 7143 11.3, 11.7, 11.8)

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

Task* Connection::FindTaskByItt(uint32_t itt) {
  for (Task& t : session_->tasks()) {
    if (t.state != Task::State::kFree && t.itt == itt) return &t;
  }
  return nullptr;
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

void Connection::CountTmf(uint8_t function, uint8_t response) {
  if (!runtime::Stats::Global().enabled()) return;
  if (target_stats_ == nullptr) {
    // Once per connection: a session's target never changes.
    target_stats_ = runtime::Stats::Global().ForTarget(session_->target_name());
  }
  if (runtime::TargetShard* shard = target_stats_->shard(reactor_)) shard->Tmf(function, response);
}

void Connection::CountLogin(uint16_t status) {
  if (auto* s = Counters())
    runtime::Add(s->logins[static_cast<size_t>(runtime::LoginResultFor(status))], 1);
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

// ---------------------------------------------------------------------------------------------
// NOP, task management, text, logout

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

std::shared_ptr<TaskDrain> Connection::QueueWhenDrained(ControlPdu* c) {
  return TaskDrain::Create(gw_.pool().context(reactor_), [weak = weak_from_this(), c] {
    auto self = weak.lock();
    if (!self || self->closed_) return;
    if (self->held_login_ == c) {  // a reinstating login: the reader parses what waited
      self->held_ = false;
      self->held_login_ = nullptr;
      self->wake_.cancel();
    }
    self->QueueControl(c);
    self->Flush();
  });
}

std::string Connection::PortalAddress() const {
  boost::system::error_code ec;
  auto ep = socket_.local_endpoint(ec);
  return ec ? std::string() : EndpointString(ep);
}

bool Connection::HandleText(const pdu::Frame& f) {
  last_request_ = std::chrono::steady_clock::now();  // a discovery session's idle clock
  BhsView h(f.bhs);
  if (!AcceptCmdSn(h)) return true;
  const uint32_t ttt = h.ttt();
  // A new request (reserved TTT), or the next piece of one continued with C=1: the initiator
  // sends it with the TTT our empty answer carried (RFC 7143 11.10.2, 11.10.4).
  const bool request_piece = ttt == pdu::kReservedTag || (text_in_continued_ && ttt == text_ttt_);
  if (request_piece) {
    text_out_.clear();
    text_out_offset_ = 0;
    if (f.data_length > 0 && !text_in_.Append({f.data, f.data_length}).ok()) {
      // Bounded (pdu::TextAccumulator, 64 KiB): the request is dropped whole.
      SendReject(f.bhs, RejectReason::kProtocolError);
      text_in_.Clear();
      text_in_continued_ = false;
      return true;
    }
    text_in_continued_ = h.cont();
    if (h.cont()) {
      // RFC 7143 11.10.2: more of the request follows; answer with an empty response.
      text_ttt_ = next_text_ttt_++;
      if (text_ttt_ == pdu::kReservedTag) text_ttt_ = next_text_ttt_++;
    } else {
      auto keys = text_in_.Take();
      if (!keys.ok()) {
        SendReject(f.bhs, RejectReason::kProtocolError);
        return true;
      }
      std::vector<pdu::KeyValue> rest;
      for (const auto& kv : keys.value()) {
        if (kv.key != "SendTargets") {
          rest.push_back(kv);
          continue;
        }
        // RFC 7143 13.3 and Appendix C: All (discovery), the session's own target (empty), or one
        // named target; only targets this initiator may log in to are listed.
        auto snap = gw_.snapshot();
        const auto& advertised = gw_.options().advertise;
        const std::string local = advertised.empty() ? PortalAddress() : std::string();
        for (const auto& tc : snap->targets) {
          const bool wanted = kv.value == "All"  ? true
                              : kv.value.empty() ? (session_->target() &&
                                                    session_->target()->info.name == tc->info.name)
                                                 : kv.value == tc->info.name;
          if (!wanted || !tc->Allows(session_->initiator_name(), peer_)) continue;
          pdu::AppendKey("TargetName", tc->info.name, &text_out_);
          const std::string tag = "," + std::to_string(tc->info.tpgt);
          for (const auto& a : advertised) pdu::AppendKey("TargetAddress", a + tag, &text_out_);
          if (!local.empty()) pdu::AppendKey("TargetAddress", local + tag, &text_out_);
        }
      }
      if (!rest.empty()) {
        std::vector<pdu::KeyValue> answers;
        if (negotiator_->ProcessFullFeature(rest, &answers) != LoginStatus::kSuccess) {
          SendReject(f.bhs, RejectReason::kProtocolError);
          return true;
        }
        pdu::EncodeText(answers, &text_out_);
      }
      text_ttt_ = pdu::kReservedTag;
    }
  } else if (ttt != text_ttt_) {
    SendReject(f.bhs, RejectReason::kInvalidPduField);
    return true;
  }
  // Send the next piece of the response; C=1 with a transfer tag while more remains.
  ControlPdu* c = NewControl();
  const size_t remain = text_out_.size() - text_out_offset_;
  const size_t n = std::min<size_t>(remain, max_send_segment_);
  c->data.assign(text_out_.begin() + text_out_offset_, text_out_.begin() + text_out_offset_ + n);
  text_out_offset_ += n;
  const bool more = text_out_offset_ < text_out_.size();
  const bool request_more = h.cont() && request_piece;
  if (more) {
    text_ttt_ = next_text_ttt_++;
    if (text_ttt_ == pdu::kReservedTag) text_ttt_ = next_text_ttt_++;
  }
  c->hdr.SetOpcode(Opcode::kTextResponse);
  c->hdr.SetFlags(more ? 0x40 : (request_more ? 0x00 : 0x80));
  c->hdr.SetLunRaw(h.lun_raw());
  c->hdr.SetItt(h.itt());
  c->hdr.Set32(20, (more || request_more) ? text_ttt_ : pdu::kReservedTag);
  c->assign_stat_sn = true;
  QueueControl(c);
  if (!more && !request_more) {
    text_out_.clear();
    text_out_offset_ = 0;
  }
  return true;
}

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

// ---------------------------------------------------------------------------------------------
// Send side

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

void Connection::QueueControl(ControlPdu* c) { Queue(c); }

void Connection::Queue(TxItem* item) {
  if (item->tx_queued || closed_) return;
  item->tx_queued = true;
  item->tx_next = nullptr;
  if (tx_tail_ != nullptr) {
    tx_tail_->tx_next = item;
  } else {
    tx_head_ = item;
  }
  tx_tail_ = item;
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

uint8_t* Connection::AddHeader(bool digest) {
  uint8_t* slot = hdrs_[n_hdrs_].b.data();
  ++n_hdrs_;
  (void)digest;
  return slot;
}

namespace {
iovec Iov(const void* p, size_t len) { return iovec{const_cast<void*>(p), len}; }
}  // namespace

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

namespace {
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
  for (TxItem* item : sent_) {
    if (item->kind == TxItem::Kind::kControl) {
      auto* c = static_cast<ControlPdu*>(item);
      close = close || c->close_after;
      control_free_.push_back(c);
    } else {
      auto* t = static_cast<Task*>(item);
      // A task whose R2Ts went out stays alive for its Data-Out; a finished one is released.
      if (t->state == Task::State::kResponding && t->status_sent && !t->tx_queued) {
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

// ---------------------------------------------------------------------------------------------
// Timers: login deadline and NOP-In keep-alive (RFC 7143 11.19)

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

}  // namespace iscsigw::iscsi
