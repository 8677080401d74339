// Login negotiation (dataplane/iscsi/negotiation.h) and CHAP (chap.h) driven by a sequence of
// login requests: each piece is a stage and a text data segment. Security-stage keys go through a
// CHAP authenticator with (mutual) credentials when the fuzzer asks for CHAP, and through the
// negotiator, in the order the connection uses them; the final transition runs Finish, and the
// rest of the input is a full feature phase Text request. Whatever they answer must encode.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "dataplane/iscsi/chap.h"
#include "dataplane/iscsi/negotiation.h"
#include "dataplane/pdu/text.h"
#include "tests/fuzz/fuzz_input.h"

using namespace iscsigw;

namespace {

void MustEncode(const std::vector<pdu::KeyValue>& out) {
  std::vector<uint8_t> bytes;
  pdu::EncodeText(out, &bytes);
  auto back = pdu::ParseText(bytes);
  if (!back.ok() || back.value() != out) std::abort();  // an answer the initiator cannot parse
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
  const bool chap = (mode & 16) != 0;
  if (chap) neg.SetAuthMethods({"CHAP", "None"});
  iscsi::ChapAuthenticator auth({"initiator-user", "initiator-secret-1",
                                 (mode & 32) != 0 ? "target-user" : "",
                                 (mode & 32) != 0 ? "target-secret-22" : ""});
  auth.SetChallengeForTest(7, std::vector<uint8_t>(16, 0x5a));

  for (int pdus = 0; pdus < 8 && !in.empty(); ++pdus) {
    const uint8_t s = in.Byte();
    const iscsi::Stage stage = (s & 3) == 0 ? iscsi::Stage::kSecurity : iscsi::Stage::kOperational;
    const bool transit = (s & 4) != 0;
    auto keys = pdu::ParseText(in.Piece());
    if (!keys.ok()) return 0;  // a malformed segment: the login is rejected before negotiation
    std::vector<pdu::KeyValue> out;
    if (stage == iscsi::Stage::kSecurity && chap && neg.auth_method() == "CHAP") {
      std::vector<pdu::KeyValue> chap_keys, rest;
      for (const auto& kv : keys.value()) {
        (kv.key.rfind("CHAP_", 0) == 0 ? chap_keys : rest).push_back(kv);
      }
      const auto o = auth.Step(chap_keys, &out);
      if (o == iscsi::ChapAuthenticator::Outcome::kAuthFailed ||
          o == iscsi::ChapAuthenticator::Outcome::kProtocolError) {
        MustEncode(out);
        return 0;
      }
      keys.value() = std::move(rest);
    }
    const iscsi::LoginStatus st = neg.Process(keys.value(), stage, &out);
    if (st != iscsi::LoginStatus::kSuccess) {
      if (neg.error().empty()) std::abort();  // every refusal says why
      return 0;
    }
    neg.AppendTargetDeclarations(stage, 1, &out);
    MustEncode(out);
    if (transit && stage == iscsi::Stage::kOperational) {
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
