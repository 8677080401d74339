#include "dataplane/iscsi/negotiation.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <utility>

namespace iscsigw::iscsi {
namespace {

using pdu::KeyValue;

// RFC 7143 6.2: constants reserved for answers.
constexpr std::string_view kNotUnderstood = "NotUnderstood";
constexpr std::string_view kIrrelevant = "Irrelevant";
constexpr std::string_view kReject = "Reject";

// RFC 7143 4.2.7.1: iSCSI names are at most 223 bytes.
constexpr size_t kMaxIscsiNameBytes = 223;
// RFC 7143 13.12, 13.13, 13.14: 512 to 2**24 - 1.
constexpr uint32_t kMinSegment = 512;
constexpr uint32_t kMaxSegment = (1u << 24) - 1;

// RFC 7143 5.1: a numerical value is a decimal constant or a hex constant ("0x"/"0X" followed by
// hex digits). Signs, spaces, empty strings and values beyond 32 bits are malformed.
std::optional<uint32_t> ParseNumber(std::string_view s) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty() || s[0] == '-' || s[0] == '+') return std::nullopt;
  uint32_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// RFC 7143 5.1: boolean-value is exactly "Yes" or "No".
std::optional<bool> ParseBool(std::string_view s) {
  if (s == "Yes") return true;
  if (s == "No") return false;
  return std::nullopt;
}

const char* YesNo(bool b) { return b ? "Yes" : "No"; }

// RFC 7143 5.1 list-of-values: comma-separated, no empty elements. nullopt if malformed.
std::optional<std::vector<std::string_view>> ParseList(std::string_view s) {
  std::vector<std::string_view> items;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string_view::npos ? s.size() : comma;
    if (end == start) return std::nullopt;
    items.push_back(s.substr(start, end - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

bool IsReservedAnswer(std::string_view v) {
  return v == kNotUnderstood || v == kIrrelevant || v == kReject;
}

// How a key of RFC 7143 section 13 (and 12 for AuthMethod/CHAP) is negotiated.
enum class Kind : uint8_t {
  kAuthMethod,       // 12.1: list, security stage only
  kChap,             // 12.1.3: consumed by the CHAP code, security stage only
  kInitiatorName,    // 13.5: declarative, IO
  kInitiatorAlias,   // 13.7: declarative, ALL
  kTargetName,       // 13.4: declarative, IO from the initiator
  kSessionType,      // 13.21: declarative, LO, first request only
  kTargetOnly,       // 13.6 TargetAlias, 13.8 TargetAddress, 13.9 TargetPortalGroupTag
  kSendTargets,      // 13.3: FFPO, the caller answers it
  kDigest,           // 13.1: list
  kNumMin,           // numerical, result function Minimum
  kNumMax,           // numerical, result function Maximum
  kBoolOr,           // boolean, result function OR
  kBoolAnd,          // boolean, result function AND
  kMaxRecvDsl,       // 13.12: declarative, ALL
  kTaskReporting,    // 13.23: list
  kDeclaredIgnored,  // understood declaration the target has no use for
};

struct Rule {
  std::string_view name;
  Kind kind;
  bool operational = false;           // operational stage only (security keys are Kind-specific)
  bool leading_only = false;          // Use: LO
  bool discovery_irrelevant = false;  // "Irrelevant when: SessionType=Discovery"
  uint32_t min = 0, max = 0;          // numerical range
  uint32_t SessionParams::*num = nullptr;
  bool SessionParams::*flag = nullptr;
  uint32_t (*our_num)(const TargetLimits&) = nullptr;
  bool (*our_flag)(const TargetLimits&) = nullptr;
};

}  // namespace

struct Negotiator::Pending {
  // RFC 7143 13.14: FirstBurstLength is Irrelevant when InitialR2T=Yes and ImmediateData=No, which
  // may be negotiated later in the same request; its answer is filled in once the request is done.
  std::optional<size_t> first_burst_slot;
  uint32_t first_burst_offer = 0;
};

namespace {

const std::vector<Rule>& Rules() {
  static const std::vector<Rule> kRules = [] {
    using P = SessionParams;
    std::vector<Rule> r;
    auto add = [&](Rule rule) { r.push_back(rule); };
    add({.name = "AuthMethod", .kind = Kind::kAuthMethod});
    add({.name = "CHAP_A", .kind = Kind::kChap});
    add({.name = "CHAP_I", .kind = Kind::kChap});
    add({.name = "CHAP_C", .kind = Kind::kChap});
    add({.name = "CHAP_N", .kind = Kind::kChap});
    add({.name = "CHAP_R", .kind = Kind::kChap});
    add({.name = "InitiatorName", .kind = Kind::kInitiatorName});
    add({.name = "InitiatorAlias", .kind = Kind::kInitiatorAlias});
    add({.name = "TargetName", .kind = Kind::kTargetName});
    // 13.21 says Use LO, but initiators send SessionType=Normal on every connection; a connection
    // joining a session is checked against that session by the caller, so it is not refused here.
    add({.name = "SessionType", .kind = Kind::kSessionType});
    add({.name = "TargetAlias", .kind = Kind::kTargetOnly});
    add({.name = "TargetAddress", .kind = Kind::kTargetOnly});
    add({.name = "TargetPortalGroupTag", .kind = Kind::kTargetOnly});
    add({.name = "SendTargets", .kind = Kind::kSendTargets});
    // 13.1: HeaderDigest/DataDigest, Use IO.
    add({.name = "HeaderDigest", .kind = Kind::kDigest, .operational = true});
    add({.name = "DataDigest", .kind = Kind::kDigest, .operational = true});
    // 13.2: MaxConnections, LO, Minimum, 1..65535, irrelevant for discovery.
    add({.name = "MaxConnections",
         .kind = Kind::kNumMin,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .min = 1,
         .max = 65535,
         .num = &P::max_connections,
         .our_num = [](const TargetLimits& l) {
           return std::max<uint32_t>(l.max_connections, 1);
         }});
    // 13.10: InitialR2T, LO, OR.
    add({.name = "InitialR2T",
         .kind = Kind::kBoolOr,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .flag = &P::initial_r2t,
         .our_flag = [](const TargetLimits& l) { return l.require_initial_r2t; }});
    // 13.11: ImmediateData, LO, AND.
    add({.name = "ImmediateData",
         .kind = Kind::kBoolAnd,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .flag = &P::immediate_data,
         .our_flag = [](const TargetLimits& l) { return l.allow_immediate_data; }});
    // 13.12: MaxRecvDataSegmentLength, ALL, declarative.
    add({.name = "MaxRecvDataSegmentLength",
         .kind = Kind::kMaxRecvDsl,
         .operational = true,
         .min = kMinSegment,
         .max = kMaxSegment});
    // 13.13: MaxBurstLength, LO, Minimum.
    add({.name = "MaxBurstLength",
         .kind = Kind::kNumMin,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .min = kMinSegment,
         .max = kMaxSegment,
         .num = &P::max_burst_length,
         .our_num = [](const TargetLimits& l) { return l.max_burst_length; }});
    // 13.14: FirstBurstLength, LO, Minimum (answer deferred, see Pending).
    add({.name = "FirstBurstLength",
         .kind = Kind::kNumMin,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .min = kMinSegment,
         .max = kMaxSegment,
         .num = &P::first_burst_length,
         .our_num = [](const TargetLimits& l) { return l.first_burst_length; }});
    // 13.15: DefaultTime2Wait, LO, Maximum, 0..3600.
    add({.name = "DefaultTime2Wait",
         .kind = Kind::kNumMax,
         .operational = true,
         .leading_only = true,
         .min = 0,
         .max = 3600,
         .num = &P::default_time2wait,
         .our_num = [](const TargetLimits& l) { return l.default_time2wait; }});
    // 13.16: DefaultTime2Retain, LO, Minimum, 0..3600.
    add({.name = "DefaultTime2Retain",
         .kind = Kind::kNumMin,
         .operational = true,
         .leading_only = true,
         .min = 0,
         .max = 3600,
         .num = &P::default_time2retain,
         .our_num = [](const TargetLimits& l) { return l.default_time2retain; }});
    // 13.17: MaxOutstandingR2T, LO, Minimum, 1..65535.
    add({.name = "MaxOutstandingR2T",
         .kind = Kind::kNumMin,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .min = 1,
         .max = 65535,
         .num = &P::max_outstanding_r2t,
         .our_num = [](const TargetLimits& l) {
           return std::max<uint32_t>(l.max_outstanding_r2t, 1);
         }});
    // 13.18, 13.19: DataPDUInOrder and DataSequenceInOrder, LO, OR. The target sends Data-In and
    // R2Ts in order and wants Data-Out in order, so its own value is Yes and the result is Yes.
    add({.name = "DataPDUInOrder",
         .kind = Kind::kBoolOr,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .flag = &P::data_pdu_in_order,
         .our_flag = [](const TargetLimits&) { return true; }});
    add({.name = "DataSequenceInOrder",
         .kind = Kind::kBoolOr,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .flag = &P::data_sequence_in_order,
         .our_flag = [](const TargetLimits&) { return true; }});
    // 13.20: ErrorRecoveryLevel, LO, Minimum, 0..2. Only level 0 is implemented.
    add({.name = "ErrorRecoveryLevel",
         .kind = Kind::kNumMin,
         .operational = true,
         .leading_only = true,
         .min = 0,
         .max = 2,
         .num = &P::error_recovery_level,
         .our_num = [](const TargetLimits&) { return uint32_t{0}; }});
    // 13.23: TaskReporting, LO, list; only the RFC3720 semantics are implemented.
    add({.name = "TaskReporting",
         .kind = Kind::kTaskReporting,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true});
    // 13.24 (RFC 7144 2.1): iSCSIProtocolLevel, LO, Minimum, 0..31; this target is level 1.
    add({.name = "iSCSIProtocolLevel",
         .kind = Kind::kNumMin,
         .operational = true,
         .leading_only = true,
         .discovery_irrelevant = true,
         .min = 0,
         .max = 31});
    // 13.26: X#NodeArchitecture is declarative (no answer expected); recognised, not used.
    add({.name = "X#NodeArchitecture", .kind = Kind::kDeclaredIgnored});
    return r;
  }();
  return kRules;
}

const Rule* FindRule(std::string_view key) {
  for (const Rule& r : Rules()) {
    if (r.name == key) return &r;
  }
  return nullptr;
}

// 13.25 obsolete marker keys (RFC 3720 12.17/12.18), handled apart from the table.
bool IsMarkerKey(std::string_view k) { return k == "OFMarker" || k == "IFMarker"; }
bool IsMarkIntKey(std::string_view k) { return k == "OFMarkInt" || k == "IFMarkInt"; }

}  // namespace

Negotiator::Negotiator(const TargetLimits& limits, std::string target_alias)
    : limits_(limits), target_alias_(std::move(target_alias)) {}

void Negotiator::SetAuthMethods(std::vector<std::string> methods) {
  auth_methods_ = std::move(methods);
}

LoginStatus Negotiator::Fail(LoginStatus status, std::string reason) {
  error_ = std::move(reason);
  return status;
}

bool Negotiator::Seen(std::string_view key) const {
  return std::find(seen_.begin(), seen_.end(), key) != seen_.end();
}

LoginStatus Negotiator::Process(const std::vector<KeyValue>& in, Stage stage,
                                std::vector<KeyValue>* out) {
  error_.clear();
  if (stage != Stage::kSecurity && stage != Stage::kOperational) {
    return Fail(LoginStatus::kInitiatorError, "login request with invalid CSG");
  }
  const bool first = !first_request_done_;
  if (first) {
    // RFC 7143 13.21: SessionType defaults to Normal. It decides which keys are Irrelevant
    // (13: "Irrelevant when: SessionType=Discovery"), so read it before judging other keys.
    params_.session_type = SessionType::kNormal;
    for (const KeyValue& kv : in) {
      if (kv.key != "SessionType") continue;
      if (kv.value == "Discovery") {
        params_.session_type = SessionType::kDiscovery;
      } else if (kv.value == "Normal") {
        params_.session_type = SessionType::kNormal;
      } else {
        return Fail(LoginStatus::kSessionTypeNotSupported,
                    "SessionType=" + kv.value + " is not supported");
      }
    }
  }
  Pending pending;
  for (const KeyValue& kv : in) {
    const LoginStatus st = ProcessOne(kv, stage, &pending, out);
    if (st != LoginStatus::kSuccess) return st;
  }

  if (pending.first_burst_slot) {
    // RFC 7143 13.14: Irrelevant when InitialR2T=Yes and ImmediateData=No. The answer also never
    // exceeds MaxBurstLength, which FirstBurstLength must not exceed (13.14).
    KeyValue& slot = (*out)[*pending.first_burst_slot];
    if (params_.initial_r2t && !params_.immediate_data) {
      slot.value = kIrrelevant;
    } else {
      const uint32_t v = std::min(
          {pending.first_burst_offer, limits_.first_burst_length, params_.max_burst_length});
      params_.first_burst_length = std::max(v, kMinSegment);
      first_burst_negotiated_ = true;
      slot.value = std::to_string(params_.first_burst_length);
    }
  }

  if (first) {
    first_request_done_ = true;
    // RFC 7143 13.5: InitiatorName MUST be in the first Login Request; 13.4: TargetName MUST be
    // in the first Login Request of a Normal session.
    if (params_.initiator_name.empty()) {
      return Fail(LoginStatus::kMissingParameter, "InitiatorName missing in first login request");
    }
    if (params_.session_type == SessionType::kNormal && !target_name_given_) {
      return Fail(LoginStatus::kMissingParameter,
                  "TargetName missing in first login request of a Normal session");
    }
  }
  return LoginStatus::kSuccess;
}

LoginStatus Negotiator::ProcessOne(const KeyValue& kv, Stage stage, Pending* pending,
                                   std::vector<KeyValue>* out) {
  const std::string& key = kv.key;
  const std::string& value = kv.value;

  // RFC 7143 6.2: a key is negotiated or declared once per login; an attempt to renegotiate or
  // redeclare it gets Login reject (initiator error).
  if (Seen(key)) {
    return Fail(LoginStatus::kInitiatorError, key + " negotiated more than once during login");
  }
  seen_.push_back(key);

  // 13.25: OFMarker/IFMarker SHOULD be answered Reject and MAY be answered No; No is the RFC 3720
  // AND result for the No that initiators send and what every initiator accepts. OFMarkInt and
  // IFMarkInt MUST be answered Reject. NotUnderstood is forbidden for all four.
  if (IsMarkerKey(key) || IsMarkIntKey(key)) {
    if (stage != Stage::kOperational) {
      return Fail(LoginStatus::kInitiatorError, key + " outside the operational stage");
    }
    const bool no = IsMarkerKey(key) && ParseBool(value).has_value();
    out->push_back({key, std::string(no ? "No" : kReject)});
    return LoginStatus::kSuccess;
  }

  const Rule* rule = FindRule(key);
  if (rule == nullptr) {
    // RFC 7143 6.2: unknown keys, including private X- keys (13.22) and public X# keys this
    // target does not implement, are answered NotUnderstood.
    if (!IsReservedAnswer(value)) out->push_back({key, std::string(kNotUnderstood)});
    return LoginStatus::kSuccess;
  }

  // A reserved constant as the value is an answer, not an offer; the target offers no
  // negotiable keys, so there is nothing to record and nothing to answer.
  if (IsReservedAnswer(value)) return LoginStatus::kSuccess;

  if (rule->operational && stage != Stage::kOperational) {
    return Fail(LoginStatus::kInitiatorError,
                key + " is an operational key, sent in security stage");
  }
  if (rule->leading_only && !leading_) {
    return Fail(LoginStatus::kInitiatorError, key + " (leading only) on a non-leading connection");
  }
  const bool discovery = params_.session_type == SessionType::kDiscovery;

  switch (rule->kind) {
    case Kind::kAuthMethod: {
      // RFC 7143 12: AuthMethod only in the security stage; answer the first of the initiator's
      // list that the target accepts (6.2.1), Reject if none.
      if (stage != Stage::kSecurity) {
        return Fail(LoginStatus::kInitiatorError, "AuthMethod outside the security stage");
      }
      const auto list = ParseList(value);
      std::string answer(kReject);
      if (list) {
        for (std::string_view m : *list) {
          if (std::find(auth_methods_.begin(), auth_methods_.end(), m) != auth_methods_.end()) {
            answer = std::string(m);
            break;
          }
        }
      }
      if (answer != kReject) auth_method_ = answer;
      out->push_back({key, answer});
      return LoginStatus::kSuccess;
    }
    case Kind::kChap:
      // RFC 7143 12.1.3: CHAP keys follow an agreed AuthMethod=CHAP in the security stage.
      if (stage != Stage::kSecurity || auth_method_ != "CHAP") {
        return Fail(LoginStatus::kInitiatorError,
                    key + " without AuthMethod=CHAP in security stage");
      }
      return LoginStatus::kSuccess;
    case Kind::kInitiatorName:
      if (value.empty() || value.size() > kMaxIscsiNameBytes) {
        return Fail(LoginStatus::kInitiatorError, "malformed InitiatorName");
      }
      params_.initiator_name = value;
      return LoginStatus::kSuccess;
    case Kind::kInitiatorAlias:
      params_.initiator_alias = value;
      return LoginStatus::kSuccess;
    case Kind::kTargetName:
      if (value.empty() || value.size() > kMaxIscsiNameBytes) {
        return Fail(LoginStatus::kInitiatorError, "malformed TargetName");
      }
      params_.target_name = value;
      target_name_given_ = true;
      return LoginStatus::kSuccess;
    case Kind::kSessionType:
      // Read before the loop of the first request; later it would change an established type.
      if (first_request_done_) {
        return Fail(LoginStatus::kInitiatorError, "SessionType after the first login request");
      }
      return LoginStatus::kSuccess;
    case Kind::kDeclaredIgnored:
      return LoginStatus::kSuccess;
    case Kind::kTargetOnly:
      return Fail(LoginStatus::kInitiatorError, key + " may only be sent by a target");
    case Kind::kSendTargets:
      // RFC 7143 13.3: SendTargets is FFPO (Text requests only).
      return Fail(LoginStatus::kInitiatorError, "SendTargets during login");
    case Kind::kDigest: {
      // RFC 7143 13.1 and 6.2.1: first value of the initiator's list that the target supports.
      const bool allow =
          key == "HeaderDigest" ? limits_.allow_header_digest : limits_.allow_data_digest;
      const auto list = ParseList(value);
      std::string_view answer = kReject;
      if (list) {
        for (std::string_view d : *list) {
          if (d == "None" || (d == "CRC32C" && allow)) {
            answer = d;
            break;
          }
        }
      }
      if (answer != kReject) {
        (key == "HeaderDigest" ? params_.header_digest : params_.data_digest) = answer == "CRC32C";
      }
      out->push_back({key, std::string(answer)});
      return LoginStatus::kSuccess;
    }
    case Kind::kMaxRecvDsl: {
      // RFC 7143 13.12: the initiator declares what it can receive; the target does not echo it
      // but declares its own (AppendTargetDeclarations). A declaration cannot be answered with
      // Reject, so a malformed one fails the login.
      const auto v = ParseNumber(value);
      if (!v || *v < kMinSegment || *v > kMaxSegment) {
        return Fail(LoginStatus::kInitiatorError, "MaxRecvDataSegmentLength=" + value);
      }
      params_.initiator_max_recv_data_segment_length = *v;
      return LoginStatus::kSuccess;
    }
    case Kind::kTaskReporting: {
      if (discovery) {
        out->push_back({key, std::string(kIrrelevant)});
        return LoginStatus::kSuccess;
      }
      // RFC 7143 13.23: RFC3720 MUST be offered; it is the only semantics implemented here.
      const auto list = ParseList(value);
      const bool has = list && std::find(list->begin(), list->end(), "RFC3720") != list->end();
      out->push_back({key, std::string(has ? "RFC3720" : kReject)});
      return LoginStatus::kSuccess;
    }
    case Kind::kBoolOr:
    case Kind::kBoolAnd: {
      if (discovery && rule->discovery_irrelevant) {
        out->push_back({key, std::string(kIrrelevant)});
        return LoginStatus::kSuccess;
      }
      // RFC 7143 6.2.2 (6.2.4 Boolean): the answer is the result function applied to the offer
      // and the target's own value. It is optional when the offer alone fixes the result; the
      // target answers anyway so that every offer gets exactly one answer.
      const auto offer = ParseBool(value);
      if (!offer) {
        out->push_back({key, std::string(kReject)});
        return LoginStatus::kSuccess;
      }
      const bool ours = rule->our_flag(limits_);
      const bool result = rule->kind == Kind::kBoolOr ? (*offer || ours) : (*offer && ours);
      params_.*(rule->flag) = result;
      out->push_back({key, YesNo(result)});
      return LoginStatus::kSuccess;
    }
    case Kind::kNumMin:
    case Kind::kNumMax: {
      if (discovery && rule->discovery_irrelevant) {
        out->push_back({key, std::string(kIrrelevant)});
        return LoginStatus::kSuccess;
      }
      // RFC 7143 6.2.2: a value outside the key's range (or not a number, 5.1) is answered Reject
      // and the key keeps its current value.
      const auto offer = ParseNumber(value);
      if (!offer || *offer < rule->min || *offer > rule->max) {
        out->push_back({key, std::string(kReject)});
        return LoginStatus::kSuccess;
      }
      if (key == "FirstBurstLength") {
        pending->first_burst_slot = out->size();
        pending->first_burst_offer = *offer;
        out->push_back({key, std::string()});
        return LoginStatus::kSuccess;
      }
      if (key == "iSCSIProtocolLevel") {
        protocol_level_ = std::min<uint32_t>(*offer, 1);
        out->push_back({key, std::to_string(protocol_level_)});
        return LoginStatus::kSuccess;
      }
      // The target's own value is clamped into the key's range so a misconfigured limit never
      // yields an inadmissible answer (6.2.2 calls that a protocol error).
      const uint32_t ours = std::clamp(rule->our_num(limits_), rule->min, rule->max);
      const uint32_t result =
          rule->kind == Kind::kNumMin ? std::min(*offer, ours) : std::max(*offer, ours);
      params_.*(rule->num) = result;
      out->push_back({key, std::to_string(result)});
      return LoginStatus::kSuccess;
    }
  }
  return Fail(LoginStatus::kTargetError, "unhandled key " + key);
}

void Negotiator::AppendTargetDeclarations(Stage stage, uint16_t tpgt, std::vector<KeyValue>* out) {
  const bool discovery = params_.session_type == SessionType::kDiscovery;
  // RFC 7143 13.9: TargetPortalGroupTag in the first Login Response of a Normal session.
  if (!declared_tpgt_ && !discovery) {
    out->push_back({"TargetPortalGroupTag", std::to_string(tpgt)});
    declared_tpgt_ = true;
  }
  // RFC 7143 13.6: TargetAlias is declarative; it names the target, so not in discovery.
  if (!declared_alias_ && !discovery && !target_alias_.empty()) {
    out->push_back({"TargetAlias", target_alias_});
    declared_alias_ = true;
  }
  // RFC 7143 13.12: the target declares what it can receive. It is an operational key: sending it
  // in the security stage makes open-iscsi fail the login.
  if (!declared_mrdsl_ && stage == Stage::kOperational) {
    const uint32_t v = std::clamp(limits_.max_recv_data_segment_length, kMinSegment, kMaxSegment);
    params_.target_max_recv_data_segment_length = v;
    out->push_back({"MaxRecvDataSegmentLength", std::to_string(v)});
    declared_mrdsl_ = true;
  }
}

LoginStatus Negotiator::Finish() {
  error_.clear();
  if (!first_request_done_) {
    return Fail(LoginStatus::kMissingParameter, "login finished without a login request");
  }
  if (params_.initiator_name.empty()) {
    return Fail(LoginStatus::kMissingParameter, "InitiatorName missing");
  }
  if (params_.session_type == SessionType::kNormal && !target_name_given_) {
    return Fail(LoginStatus::kMissingParameter, "TargetName missing");
  }
  if (params_.session_type == SessionType::kNormal) {
    // RFC 7143 13.14: FirstBurstLength MUST NOT exceed MaxBurstLength. It only matters when
    // unsolicited data is possible (not InitialR2T=Yes with ImmediateData=No).
    const bool unsolicited = !params_.initial_r2t || params_.immediate_data;
    if (unsolicited && params_.first_burst_length > params_.max_burst_length) {
      if (first_burst_negotiated_) {
        return Fail(LoginStatus::kInitiatorError,
                    "FirstBurstLength " + std::to_string(params_.first_burst_length) +
                        " exceeds MaxBurstLength " + std::to_string(params_.max_burst_length));
      }
      // Only the default (65536, 13.14) exceeds a smaller negotiated MaxBurstLength; the
      // initiator is bound by MaxBurstLength for any burst, so the effective limit is that.
      params_.first_burst_length = params_.max_burst_length;
    }
  }
  return LoginStatus::kSuccess;
}

LoginStatus Negotiator::ProcessFullFeature(const std::vector<KeyValue>& in,
                                           std::vector<KeyValue>* out) {
  error_.clear();
  std::vector<std::string_view> seen;
  for (const KeyValue& kv : in) {
    // RFC 7143 6.2: within one negotiation a key appears once.
    if (std::find(seen.begin(), seen.end(), kv.key) != seen.end()) {
      return Fail(LoginStatus::kInitiatorError, kv.key + " repeated in a text request");
    }
    seen.push_back(kv.key);
    if (kv.key == "SendTargets") continue;  // answered by the caller (RFC 7143 13.3)
    if (IsReservedAnswer(kv.value)) continue;
    if (kv.key == "MaxRecvDataSegmentLength") {
      // RFC 7143 13.12: Use ALL; a new declaration takes effect for this connection.
      const auto v = ParseNumber(kv.value);
      if (!v || *v < kMinSegment || *v > kMaxSegment) {
        return Fail(LoginStatus::kInitiatorError, "MaxRecvDataSegmentLength=" + kv.value);
      }
      params_.initiator_max_recv_data_segment_length = *v;
      continue;
    }
    if (kv.key == "InitiatorAlias") {  // 13.7: Use ALL
      params_.initiator_alias = kv.value;
      continue;
    }
    const bool known = FindRule(kv.key) != nullptr || IsMarkerKey(kv.key) || IsMarkIntKey(kv.key);
    // Keys restricted to the login phase (Use LO/IO) cannot be negotiated now: Reject (6.2).
    out->push_back({kv.key, std::string(known ? kReject : kNotUnderstood)});
  }
  return LoginStatus::kSuccess;
}

}  // namespace iscsigw::iscsi
