// The login stage machine as RFC 7143 draws it (6.3, 11.12, 12), held to the spec from the wire:
// every (stage the target is in, CSG, T, NSG, C) against a target with and without CHAP, for
// Normal and Discovery sessions, each login a real connection to a real Dataplane. Each state is
// reached by an honest prefix of requests; the probe's answer is checked against a model of the
// RFC written here, independently of dataplane/iscsi/login_stages.cc. Above all the model holds
// the invariant: no session reaches full feature phase unless the authentication it requires
// has succeeded (the stage-jump login: AuthMethod=CHAP agreed, then CSG=1 T=1 NSG=3).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/api/dataplane.h"
#include "dataplane/iscsi/chap.h"
#include "tests/unit/dataplane/iscsi/test_initiator.h"

namespace iscsigw::iscsi {
namespace login_model_test {

using namespace std::chrono_literals;
using test::Pdu;
using test::TestInitiator;
using Keys = std::vector<std::pair<std::string, std::string>>;

constexpr char kOpenTarget[] = "iqn.2026-12.io.iscsigw:model-open";
constexpr char kChapTarget[] = "iqn.2026-12.io.iscsigw:model-chap";
constexpr char kInitiator[] = "iqn.2026-12.io.iscsigw:model-initiator";
constexpr char kUser[] = "model-user";
constexpr char kSecret[] = "model-secret-0123";

// How far an honest initiator has gone when the probe is sent.
enum class State {
  kFresh,          // nothing sent yet
  kAuthAgreed,     // security stage, AuthMethod answered (CHAP or None), T=0
  kChallenged,     // security stage, CHAP_A answered with a challenge (CHAP only)
  kAuthenticated,  // security stage, CHAP_N/CHAP_R accepted, answered T=0 (CHAP only)
  kOperational,    // the target answered T=1 to NSG=1
};

const char* Name(State s) {
  switch (s) {
    case State::kFresh:
      return "fresh";
    case State::kAuthAgreed:
      return "auth-agreed";
    case State::kChallenged:
      return "challenged";
    case State::kAuthenticated:
      return "authenticated";
    case State::kOperational:
      return "operational";
  }
  return "?";
}

struct Probe {
  uint8_t csg, nsg;
  bool transit, cont;
};

// What the RFC requires of the answer to the probe.
struct Expected {
  uint16_t status = 0;   // login status; a reject closes the connection
  bool transit = false;  // with status 0: the answer's T bit
  bool full_feature = false;
};

// The model, written from the RFC: what a target must answer to `p` in `s`.
Expected Model(bool chap, State s, const Probe& p) {
  constexpr uint16_t kInitiatorError = 0x0200, kAuthFailure = 0x0201;
  Expected e;
  // 11.12.3: CSG 2 is reserved, 3 is not a login stage.
  if (p.csg != 0 && p.csg != 1) return {kInitiatorError};
  // 11.12.2: C=1 forbids T=1.
  if (p.cont && p.transit) return {kInitiatorError};
  // 6.3: after the first request, a request is in the stage the target is in.
  if (s != State::kFresh) {
    const uint8_t stage = s == State::kOperational ? 1 : 0;
    if (p.csg != stage) return {kInitiatorError};
  }
  if (p.cont) return e;  // acknowledged, T=0, same stage
  // 11.12.3: a transition goes forward to a stage that exists.
  if (p.transit && (p.nsg <= p.csg || p.nsg == 2)) return {kInitiatorError};
  // 12: a CHAP login may not skip the security stage.
  if (chap && p.csg == 1 && s == State::kFresh) return {kAuthFailure};
  if (chap && p.csg == 0) {
    // 12.1.3: after the challenge the next request carries CHAP_N and CHAP_R (the probe has none).
    if (s == State::kChallenged) return {kAuthFailure};
    // Not yet authenticated: the target is not ready to leave the security stage, T=0.
    if (s != State::kAuthenticated) return e;
  }
  e.transit = p.transit;
  e.full_feature = p.transit && p.nsg == 3;
  return e;
}

class LoginModelTest : public ::testing::TestWithParam<bool /* discovery */> {
 protected:
  void SetUp() override {
    api::Options o;
    o.portals = {"127.0.0.1:0"};
    o.reactors = 1;
    // Probes that fail CHAP count towards the lockout; the model logs in thousands of times.
    o.gateway.auth_throttle.free_failures = 1u << 30;
    auto r = api::Dataplane::Start(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    dp_ = std::move(r.value());
    portal_ = dp_->portals().at(0);
  }
  void TearDown() override {
    if (dp_) dp_->Stop();
  }

  // Normal sessions: the open target and the CHAP target with an ACL naming the initiator.
  // Discovery sessions: discovery CHAP on or off.
  void Configure(bool chap) {
    api::Config c;
    api::LunSpec lun;
    lun.backing = api::BackingKind::kRam;
    lun.size_bytes = 1u << 20;
    lun.block_size = 512;
    api::TargetSpec open;
    open.name = kOpenTarget;
    open.allow_any_initiator = true;
    open.luns.push_back(lun);
    api::TargetSpec locked;
    locked.name = kChapTarget;
    locked.acl.push_back({kInitiator, {}});
    locked.chap = {kUser, kSecret, "", ""};
    locked.luns.push_back(lun);
    c.targets = {open, locked};
    if (chap && discovery()) c.discovery_chap = {kUser, kSecret, "", ""};
    const Status s = dp_->Apply(c);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  bool discovery() const { return GetParam(); }

  Keys FirstKeys(bool chap, uint8_t csg) const {
    Keys k = {{"InitiatorName", kInitiator}};
    if (discovery()) {
      k.emplace_back("SessionType", "Discovery");
    } else {
      k.emplace_back("SessionType", "Normal");
      k.emplace_back("TargetName", chap ? kChapTarget : kOpenTarget);
    }
    if (csg == 0) k.emplace_back("AuthMethod", chap ? "CHAP" : "None");
    return k;
  }

  std::optional<Pdu> Send(TestInitiator& ini, const Keys& keys, const Probe& p) {
    pdu::Bhs h = ini.LoginRequest(p.csg, p.nsg, p.transit, ini.NextItt());
    if (p.cont) h.b[1] |= 0x40;
    return ini.Login(keys, p.csg, p.nsg, p.transit, h);
  }

  // Brings a fresh connection to `s` honestly; false (with a failure) if the target misbehaved.
  bool Reach(TestInitiator& ini, bool chap, State s) {
    if (!ini.Connect(portal_)) return false;
    if (s == State::kFresh) return true;
    auto r = Send(ini, FirstKeys(chap, 0), {0, 1, false, false});
    if (!r || r->login_status() != 0 || (r->flags() & 0x80)) return Fail("AuthMethod");
    if (s == State::kAuthAgreed) return true;
    if (!chap) {  // the open login goes straight on to the operational stage
      r = Send(ini, {}, {0, 1, true, false});
      if (!r || r->login_status() != 0 || r->flags() != 0x81) return Fail("T=1 to NSG 1");
      return true;
    }
    r = Send(ini, {{"CHAP_A", "5"}}, {0, 1, false, false});
    if (!r || r->login_status() != 0) return Fail("CHAP_A");
    if (s == State::kChallenged) return true;
    auto k = r->Keys();
    const auto challenge = DecodeChapBinary(k["CHAP_C"]);
    if (!challenge) return Fail("CHAP_C");
    const auto id = static_cast<uint8_t>(std::stoi(k["CHAP_I"]));
    const auto response = ChapResponse(ChapAlgorithm::kMd5, id, kSecret, *challenge);
    r = Send(ini, {{"CHAP_N", kUser}, {"CHAP_R", EncodeChapHex(response)}}, {0, 1, false, false});
    if (!r || r->login_status() != 0 || (r->flags() & 0x80)) return Fail("CHAP_R");
    if (s == State::kAuthenticated) return true;
    r = Send(ini, {}, {0, 1, true, false});
    if (!r || r->login_status() != 0 || r->flags() != 0x81) return Fail("T=1 after CHAP");
    return true;
  }

  bool Fail(const char* step) {
    ADD_FAILURE() << "the honest prefix failed at " << step;
    return false;
  }

  std::unique_ptr<api::Dataplane> dp_;
  std::string portal_;
};

TEST_P(LoginModelTest, EveryTransitionIsAnsweredAsTheRfcRequires) {
  int probes = 0, full_feature = 0;
  for (const bool chap : {false, true}) {
    Configure(chap);
    std::vector<State> states = {State::kFresh, State::kAuthAgreed, State::kOperational};
    if (chap) {
      states = {State::kFresh, State::kAuthAgreed, State::kChallenged, State::kAuthenticated,
                State::kOperational};
    }
    for (const State s : states) {
      for (uint8_t csg = 0; csg < 4; ++csg) {
        for (uint8_t nsg = 0; nsg < 4; ++nsg) {
          for (const bool transit : {false, true}) {
            for (const bool cont : {false, true}) {
              const Probe p{csg, nsg, transit, cont};
              const Expected want = Model(chap, s, p);
              SCOPED_TRACE(::testing::Message()
                           << (discovery() ? "discovery" : "normal") << (chap ? " CHAP" : " open")
                           << " in " << Name(s) << ": CSG=" << int(csg) << " NSG=" << int(nsg)
                           << " T=" << transit << " C=" << cont);
              TestInitiator ini;
              if (!Reach(ini, chap, s)) return;
              // Keys a careless or hostile initiator sends in that stage: its names first
              // (and AuthMethod) if nothing came before, operational keys outside security.
              Keys keys = s == State::kFresh ? FirstKeys(chap, csg) : Keys{};
              if (csg != 0) keys.emplace_back("MaxRecvDataSegmentLength", "8192");
              const auto r = Send(ini, keys, p);
              ++probes;
              ASSERT_TRUE(r.has_value()) << "no answer";
              ASSERT_EQ(r->opcode(), pdu::Opcode::kLoginResponse);
              ASSERT_EQ(r->login_status(), want.status) << std::hex << r->login_status();
              if (want.status != 0) {
                EXPECT_EQ(r->flags() & 0x80, 0);
                EXPECT_TRUE(ini.WaitClosed(5s));
                continue;
              }
              const bool transit_answered = (r->flags() & 0x80) != 0;
              EXPECT_EQ(transit_answered, want.transit);
              EXPECT_EQ((r->flags() >> 2) & 3, csg) << "the answer's CSG";
              if (transit_answered) {
                EXPECT_EQ(r->flags() & 3, nsg) << "the answer's NSG";
              }
              const bool ffp = transit_answered && (r->flags() & 3) == 3;
              EXPECT_EQ(ffp, want.full_feature);
              EXPECT_EQ(r->tsih() != 0, ffp) << "TSIH only in the final answer";
              // The invariant, whatever the model says: full feature phase only after CHAP.
              if (ffp && chap) {
                EXPECT_TRUE(s == State::kAuthenticated || s == State::kOperational)
                    << "full feature phase without CHAP";
              }
              full_feature += ffp ? 1 : 0;
            }
          }
        }
      }
    }
  }
  // The honest paths were walked too: without them the model could be all rejects.
  EXPECT_GT(full_feature, 0);
  EXPECT_EQ(probes, (3 + 5) * 4 * 4 * 2 * 2);  // (open + CHAP states) x CSG x NSG x T x C
}

INSTANTIATE_TEST_SUITE_P(Rfc7143_6_3, LoginModelTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Discovery" : "Normal"; });

// The attack as reported, step by step: the stage jump is refused and no command is answered.
TEST_P(LoginModelTest, StageJumpPastChapIsRefused) {
  Configure(true);
  TestInitiator ini;
  ASSERT_TRUE(Reach(ini, true, State::kAuthAgreed));
  auto r = Send(
      ini, {{"HeaderDigest", "None"}, {"DataDigest", "None"}, {"MaxRecvDataSegmentLength", "8192"}},
      {1, 3, true, false});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->login_status(), 0x0200);
  EXPECT_EQ(r->tsih(), 0);
  std::vector<Pdu> after;
  EXPECT_TRUE(ini.WaitClosed(5s, &after));
  EXPECT_TRUE(after.empty());
}

}  // namespace login_model_test
}  // namespace iscsigw::iscsi
