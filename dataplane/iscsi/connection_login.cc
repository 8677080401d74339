// Connection (connection.h) while logging in: login requests and responses (RFC 7143 6.3, 11.12,
// 11.13), the stage rules (login_stages.h), CHAP (chap.h, throttled as auth_throttle.h says), and
// the session made when the login reaches full feature phase.
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/session.h"

namespace iscsigw::iscsi {

namespace asio = boost::asio;
using pdu::BhsView;
using pdu::Opcode;

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

  if (session_type_ == SessionType::kUnknown) {
    st = CheckFirstRequest();
    if (st != LoginStatus::kSuccess) return SendLoginReject(h, st);
  }
  if (chap_ && static_cast<Stage>(csg) == Stage::kSecurity) {
    st = StepChap(keys.value(), &out);
    if (st != LoginStatus::kSuccess) return SendLoginReject(h, st);
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
    CreateSession(h.cmd_sn(), &replaced);
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
    HoldLoginResponse(c, replaced);
  }

  if (to_ffp) EnterFullFeaturePhase();
  login_stages_.Answered(stage, transit);
  return true;
}

// The first request names the initiator, the session type and the target (RFC 7143 6.3.1).
LoginStatus Connection::CheckFirstRequest() {
  const SessionParams& p = negotiator_->params();
  if (p.initiator_name.empty()) return LoginStatus::kMissingParameter;
  session_type_ =
      p.session_type == SessionType::kDiscovery ? SessionType::kDiscovery : SessionType::kNormal;
  if (session_type_ == SessionType::kNormal) {
    if (!negotiator_->target_name_given()) return LoginStatus::kMissingParameter;
    if (!login_target_) login_target_ = gw_.snapshot()->Find(p.target_name);
    if (!login_target_) {
      log::Iscsi().info("{}login from {}: target {} not found", LogCtx(), peer_, p.target_name);
      return LoginStatus::kNotFound;
    }
    if (!login_target_->Allows(p.initiator_name, peer_)) {
      log::Iscsi().info("{}login from {}: initiator {} not in the ACL of {}", LogCtx(), peer_,
                        p.initiator_name, p.target_name);
      return LoginStatus::kAuthorizationFailure;
    }
  }
  if (login_tsih_ != 0) {
    // Adding a connection to an existing session: MaxConnections is 1 (RFC 7143 6.3.3).
    return gw_.FindSession(login_tsih_) ? LoginStatus::kTooManyConnections
                                        : LoginStatus::kSessionDoesNotExist;
  }
  return LoginStatus::kSuccess;
}

// RFC 7143 12.1.3: CHAP runs in the security stage once AuthMethod=CHAP is agreed; the login
// stays in that stage (T=0 in the response) until the initiator, and the target if asked, are
// authenticated. Failures are 0x0201 (11.13.5); the reason is logged, secrets never are.
LoginStatus Connection::StepChap(const std::vector<pdu::KeyValue>& keys,
                                 std::vector<pdu::KeyValue>* out) {
  if (negotiator_->auth_method() != "CHAP") {
    log::Iscsi().info("{}login from {}: CHAP required, AuthMethod not agreed", LogCtx(), peer_);
    return LoginStatus::kAuthenticationFailure;
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
        "{}login from {}: CHAP refused, {} is locked out for {} ms after failed attempts", LogCtx(),
        peer_, who, std::chrono::duration_cast<std::chrono::milliseconds>(locked).count());
    return LoginStatus::kAuthenticationFailure;
  }
  const auto outcome = chap_->Step(keys, out);
  if (outcome == ChapAuthenticator::Outcome::kAuthFailed ||
      outcome == ChapAuthenticator::Outcome::kProtocolError) {
    const auto failure = throttle.RecordFailure(who, peer_ip_, target, now);
    log::Iscsi().warn(
        "{}login from {}: CHAP failed for {} ({} in a row, {} from this source; locked out for "
        "{} ms): {}",
        LogCtx(), peer_, who, failure.in_a_row, failure.from_source,
        std::chrono::duration_cast<std::chrono::milliseconds>(failure.lockout).count(),
        chap_->error());
    return outcome == ChapAuthenticator::Outcome::kAuthFailed ? LoginStatus::kAuthenticationFailure
                                                              : LoginStatus::kInitiatorError;
  }
  if (chap_->done()) {
    throttle.RecordSuccess(who, peer_ip_);
    login_stages_.Authenticated();
  }
  return LoginStatus::kSuccess;
}

void Connection::CreateSession(uint32_t cmd_sn, std::vector<std::shared_ptr<Session>>* replaced) {
  params_ = negotiator_->params();
  params_.session_type = session_type_;
  session_ = std::make_shared<Session>(gw_, reactor_, params_.initiator_name, isid_, login_target_,
                                       params_, peer_);
  session_->set_exp_cmd_sn(cmd_sn);
  gw_.Register(session_, replaced);
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

void Connection::HoldLoginResponse(ControlPdu* c,
                                   const std::vector<std::shared_ptr<Session>>& replaced) {
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

void Connection::EnterFullFeaturePhase() {
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

void Connection::ApplyNegotiatedLimits() {
  rx_limits_.max_data_segment_length = params_.target_max_recv_data_segment_length;
  rx_limits_.header_digest = params_.header_digest;
  rx_limits_.data_digest = params_.data_digest;
  tx_header_digest_ = params_.header_digest;
  tx_data_digest_ = params_.data_digest;
  max_send_segment_ = params_.initiator_max_recv_data_segment_length;
}

void Connection::CountLogin(uint16_t status) {
  if (auto* s = Counters())
    runtime::Add(s->logins[static_cast<size_t>(runtime::LoginResultFor(status))], 1);
}

}  // namespace iscsigw::iscsi
