// Login and text-mode parameter negotiation (RFC 7143 6, 13): the target side of the key=value
// exchange. A Negotiator lives for one login (one connection's login phase) and then answers the
// text requests of that connection in full feature phase.
//
// Process() takes the keys of one complete login request (continuation PDUs already joined, see
// pdu::TextAccumulator), appends the target's answers, and records the outcome in params(). It does
// not authenticate, nor decide which stage may come next (login_stages.h does both gates): CHAP_*
// keys are validated for stage and order here (only in the security stage, only after
// AuthMethod=CHAP was agreed) but produce no answer; the CHAP code consumes them from the same key
// list. SendTargets is likewise left to the caller.
//
// Not thread-safe; owned by the connection and used on its reactor thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/iscsi/login_status.h"
#include "dataplane/pdu/text.h"

namespace iscsigw::iscsi {

enum class SessionType : uint8_t { kUnknown, kDiscovery, kNormal };

// Login stages as coded in CSG/NSG (RFC 7143 11.12.3).
enum class Stage : uint8_t { kSecurity = 0, kOperational = 1, kFullFeature = 3 };

// What the target is willing to do (configured limits).
struct TargetLimits {
  uint32_t max_recv_data_segment_length = 262144;  // what the target can receive (declared)
  uint32_t max_burst_length = 16 * 1024 * 1024;    // upper bound the target accepts
  uint32_t first_burst_length = 262144;
  uint32_t max_outstanding_r2t = 16;
  bool allow_immediate_data = true;
  bool require_initial_r2t = false;
  bool allow_header_digest = true;  // CRC32C offered
  bool allow_data_digest = true;
  uint32_t max_connections = 1;
  uint32_t default_time2wait = 2;
  uint32_t default_time2retain = 0;  // ERL 0: no connection recovery
};

// The negotiated/declared outcome, used by the session and connection.
struct SessionParams {
  SessionType session_type = SessionType::kUnknown;
  std::string initiator_name, initiator_alias, target_name;
  bool header_digest = false, data_digest = false;
  uint32_t max_connections = 1;
  bool initial_r2t = true, immediate_data = true;
  // Initiator's declaration: max Data-In/response segment we may send.
  uint32_t initiator_max_recv_data_segment_length = 8192;
  // Our declaration: max segment the initiator may send us.
  uint32_t target_max_recv_data_segment_length = 8192;
  uint32_t max_burst_length = 262144, first_burst_length = 65536;
  uint32_t default_time2wait = 2, default_time2retain = 20;
  uint32_t max_outstanding_r2t = 1;
  bool data_pdu_in_order = true, data_sequence_in_order = true;
  uint32_t error_recovery_level = 0;
};

class Negotiator {
 public:
  Negotiator(const TargetLimits& limits, std::string target_alias);

  // Authentication methods the target accepts, in the target's order (RFC 7143 12.1). The answer
  // to AuthMethod is the first value of the initiator's list that appears here, "Reject" if none.
  // Default: {"None"}.
  void SetAuthMethods(std::vector<std::string> methods);

  // Whether this login is for the leading connection of a session (TSIH 0). Keys with Use LO
  // (RFC 7143 13, e.g. MaxBurstLength) are a protocol error on other connections. Default: true.
  void SetLeadingConnection(bool leading) { leading_ = leading; }

  // Processes the keys of one complete login request received in `stage` (the request's CSG) and
  // appends the target's answers to *out, in order. Returns kSuccess or the login status to reject
  // the login with; error() then says why.
  LoginStatus Process(const std::vector<pdu::KeyValue>& in, Stage stage,
                      std::vector<pdu::KeyValue>* out);

  // Appends the declarations the target owes the initiator (RFC 7143 13.12
  // MaxRecvDataSegmentLength, 13.9 TargetPortalGroupTag for Normal sessions, 13.6 TargetAlias if
  // set). Each is emitted at most once per login; MaxRecvDataSegmentLength only from the
  // operational stage on, TargetPortalGroupTag in the first response (whatever the stage).
  void AppendTargetDeclarations(Stage stage, uint16_t tpgt, std::vector<pdu::KeyValue>* out);

  // Called on the final transition to full feature phase: fills defaults for keys never negotiated
  // and checks consistency (FirstBurstLength <= MaxBurstLength, session type and names present).
  LoginStatus Finish();

  const SessionParams& params() const { return params_; }

  // Text request negotiation in full feature phase (RFC 7143 6): only keys whose Use is ALL or
  // FFPO; SendTargets is not handled here (the caller answers it, this class skips it).
  LoginStatus ProcessFullFeature(const std::vector<pdu::KeyValue>& in,
                                 std::vector<pdu::KeyValue>* out);

  // Whether the initiator sent TargetName during this login (the caller resolves the target).
  bool target_name_given() const { return target_name_given_; }
  // The agreed authentication method ("None", "CHAP", ...); empty until AuthMethod was answered.
  const std::string& auth_method() const { return auth_method_; }
  // Negotiated iSCSIProtocolLevel (RFC 7143 13.24, RFC 7144); 1 unless the initiator offered less.
  uint32_t protocol_level() const { return protocol_level_; }
  // Human-readable reason of the last non-success status (for logs; names the key).
  const std::string& error() const { return error_; }

 private:
  struct Pending;
  LoginStatus ProcessOne(const pdu::KeyValue& kv, Stage stage, Pending* pending,
                         std::vector<pdu::KeyValue>* out);
  LoginStatus Fail(LoginStatus status, std::string reason);
  bool Seen(std::string_view key) const;

  TargetLimits limits_;
  std::string target_alias_;
  std::vector<std::string> auth_methods_{"None"};
  SessionParams params_;
  std::string auth_method_;
  std::string error_;
  // Keys received during this login (RFC 7143 6.2: each at most once).
  std::vector<std::string> seen_;
  uint32_t protocol_level_ = 1;
  bool leading_ = true;
  bool first_request_done_ = false;
  bool target_name_given_ = false;
  bool declared_mrdsl_ = false;
  bool declared_tpgt_ = false;
  bool declared_alias_ = false;
  bool first_burst_negotiated_ = false;
};

}  // namespace iscsigw::iscsi
