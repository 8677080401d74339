// A login driven by a sequence of requests, through the pieces connection_login.cc uses and in
// its order: LoginStages (stage rules), Negotiator (keys), ChapAuthenticator (security stage of a
// CHAP login), then the transition. Each request is a header byte (CSG, NSG, T, C, and whether to
// append the right CHAP response) and a text data segment.
//
// Oracles, beyond the sanitizers:
//   - authentication: when the login requires CHAP, neither the operational stage nor full
//     feature phase is reached unless an earlier request carried CHAP_N and a CHAP_R that answers
//     the target's last challenge with the secret, as this file computes it (not as chap.cc
//     says); the stage-jump login (AuthMethod=CHAP agreed, then CSG=1 T=1 NSG=3) aborts here if
//     the stage rules let it through;
//   - stages: a request is taken only in the stage the target is in, and the target moves only to
//     the NSG of an answer that carried T=1;
//   - encoding: every answer encodes and parses back; every refusal says why; the outcome of
//     Finish is consistent (FirstBurstLength <= MaxBurstLength, declared lengths within limits).
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dataplane/iscsi/chap.h"
#include "dataplane/iscsi/login_stages.h"
#include "dataplane/iscsi/negotiation.h"
#include "dataplane/pdu/text.h"
#include "tests/fuzz/fuzz_input.h"

using namespace iscsigw;

namespace {

constexpr char kUser[] = "initiator-user";
constexpr char kSecret[] = "initiator-secret-1";

void MustEncode(const std::vector<pdu::KeyValue>& out) {
  std::vector<uint8_t> bytes;
  pdu::EncodeText(out, &bytes);
  auto back = pdu::ParseText(bytes);
  if (!back.ok() || back.value() != out) std::abort();  // an answer the initiator cannot parse
}

const std::string* Find(const std::vector<pdu::KeyValue>& kvs, const char* key) {
  for (const auto& kv : kvs) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

// The challenge the target sent last, as the initiator reads it.
struct Challenge {
  iscsi::ChapAlgorithm algorithm;
  uint8_t id;
  std::vector<uint8_t> bytes;
};

std::optional<Challenge> ReadChallenge(const std::vector<pdu::KeyValue>& out) {
  const auto* a = Find(out, "CHAP_A");
  const auto* i = Find(out, "CHAP_I");
  const auto* c = Find(out, "CHAP_C");
  if (!a || !i || !c) return std::nullopt;
  auto bytes = iscsi::DecodeChapBinary(*c);
  if (!bytes) std::abort();  // a challenge the initiator cannot read
  return Challenge{static_cast<iscsi::ChapAlgorithm>(std::stoi(*a)),
                   static_cast<uint8_t>(std::stoi(*i)), std::move(*bytes)};
}

// Whether the request proves the secret: CHAP_N is the user and CHAP_R answers the challenge.
bool ProvesSecret(const std::vector<pdu::KeyValue>& in, const Challenge& ch) {
  const auto* n = Find(in, "CHAP_N");
  const auto* r = Find(in, "CHAP_R");
  if (!n || !r || *n != kUser) return false;
  const auto got = iscsi::DecodeChapBinary(*r);
  return got && *got == iscsi::ChapResponse(ch.algorithm, ch.id, kSecret, ch.bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  iscsi::TargetLimits limits;
  limits.require_initial_r2t = (mode & 1) != 0;
  limits.allow_immediate_data = (mode & 2) == 0;
  iscsi::Negotiator neg(limits, (mode & 4) != 0 ? "alias" : "");
  neg.SetLeadingConnection((mode & 8) == 0);
  // As Connection::PrepareAuth: a CHAP login accepts AuthMethod=CHAP only.
  const bool chap = (mode & 16) != 0;
  if (chap) neg.SetAuthMethods({"CHAP"});
  iscsi::ChapAuthenticator auth({kUser, kSecret, (mode & 32) != 0 ? "target-user" : "",
                                 (mode & 32) != 0 ? "target-secret-22" : ""});
  auth.SetChallengeForTest(7, std::vector<uint8_t>(16, 0x5a));
  iscsi::LoginStages stages;
  stages.RequireAuthentication(chap);

  std::optional<Challenge> challenge;
  bool proven = false;           // the oracle's own record: the secret was proven to the target
  std::optional<uint8_t> stage;  // the oracle's own record of the stage the target is in
  for (int pdus = 0; pdus < 8 && !in.empty(); ++pdus) {
    const uint8_t s = in.Byte();
    const iscsi::LoginStageFields f{static_cast<uint8_t>(s & 3), static_cast<uint8_t>((s >> 2) & 3),
                                    (s & 0x10) != 0, (s & 0x20) != 0};
    const bool answer_challenge = (s & 0x40) != 0;
    std::string why;
    if (stages.Check(f, &why) != iscsi::LoginStatus::kSuccess) {
      if (why.empty()) std::abort();
      return 0;  // login reject
    }
    // Taken: it must be in the stage the target is in, and a transition must go forward.
    if (stage && f.csg != *stage) std::abort();
    if (f.csg > 1 || (f.transit && (f.cont || f.nsg <= f.csg || f.nsg == 2))) std::abort();
    if (f.cont) {
      stages.Answered(f, false);
      stage = f.csg;
      continue;
    }
    auto keys = pdu::ParseText(in.Piece());
    if (!keys.ok()) return 0;  // a malformed segment: the login is rejected before negotiation
    if (answer_challenge && challenge) {
      // Reach the success path too: the initiator answers the challenge as it should.
      keys.value().push_back({"CHAP_N", kUser});
      keys.value().push_back(
          {"CHAP_R", iscsi::EncodeChapHex(iscsi::ChapResponse(challenge->algorithm, challenge->id,
                                                              kSecret, challenge->bytes))});
    }
    if (stages.CheckAuthentication(f, &why) != iscsi::LoginStatus::kSuccess) {
      if (why.empty()) std::abort();
      return 0;
    }
    std::vector<pdu::KeyValue> out;
    const iscsi::LoginStatus st = neg.Process(keys.value(), static_cast<iscsi::Stage>(f.csg), &out);
    if (st != iscsi::LoginStatus::kSuccess) {
      if (neg.error().empty()) std::abort();  // every refusal says why
      return 0;
    }
    if (chap && f.csg == 0) {
      if (neg.auth_method() != "CHAP") return 0;  // 0x0201
      const bool proves = challenge && ProvesSecret(keys.value(), *challenge);
      const auto o = auth.Step(keys.value(), &out);
      if (o == iscsi::ChapAuthenticator::Outcome::kAuthFailed ||
          o == iscsi::ChapAuthenticator::Outcome::kProtocolError) {
        MustEncode(out);
        return 0;
      }
      proven = proven || proves;
      if (auth.done()) stages.Authenticated();
      if (auto c = ReadChallenge(out)) challenge = std::move(c);
    }
    const bool transit = stages.MayTransit(f);
    if (transit && !f.transit) std::abort();  // the target moved where it was not asked to
    // The authentication oracle: out of the security stage only with the secret proven.
    if (chap && transit && !proven) std::abort();
    neg.AppendTargetDeclarations(static_cast<iscsi::Stage>(f.csg), 1, &out);
    MustEncode(out);
    stages.Answered(f, transit);
    stage = transit ? f.nsg : f.csg;
    if (transit && f.nsg == 3) {
      if (neg.Finish() != iscsi::LoginStatus::kSuccess) return 0;
      const auto& p = neg.params();
      // RFC 7143 13.14: FirstBurstLength <= MaxBurstLength whenever unsolicited data is possible.
      const bool unsolicited = !p.initial_r2t || p.immediate_data;
      if (unsolicited && p.first_burst_length > p.max_burst_length) std::abort();
      if (p.target_max_recv_data_segment_length > limits.max_recv_data_segment_length) std::abort();
      auto text = pdu::ParseText(in.Rest());
      if (!text.ok()) return 0;
      std::vector<pdu::KeyValue> answers;
      if (neg.ProcessFullFeature(text.value(), &answers) == iscsi::LoginStatus::kSuccess) {
        MustEncode(answers);
      }
      return 0;
    }
  }
  return 0;
}
