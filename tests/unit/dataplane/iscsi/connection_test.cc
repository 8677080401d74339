// Protocol behaviour of one iSCSI connection, end to end over loopback: a real Dataplane with one
// reactor and a RAM LUN, driven by a hand-built initiator (test_initiator.h) so that every field
// on the wire can be set, and every field of the answers checked.
#include "dataplane/iscsi/connection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/api/dataplane.h"
#include "dataplane/iscsi/session.h"
#include "tests/unit/dataplane/iscsi/test_initiator.h"

namespace iscsigw::iscsi {
namespace connection_test {

using namespace std::chrono_literals;
using pdu::Opcode;
using test::Pdu;
using test::Read10Cdb;
using test::RecvStatus;
using test::Sense;
using test::TestInitiator;
using test::TestUnitReadyCdb;
using test::Write10Cdb;

constexpr char kTarget[] = "iqn.2026-11.io.iscsigw:conn";
constexpr char kAclTarget[] = "iqn.2026-11.io.iscsigw:acl";
constexpr char kInitiator[] = "iqn.2026-11.io.iscsigw:initiator";
constexpr char kInitiator2[] = "iqn.2026-11.io.iscsigw:initiator2";
constexpr char kAllowed[] = "iqn.2026-11.io.iscsigw:allowed";
constexpr uint64_t kLunBytes = 4u << 20;
constexpr uint32_t kBlock = 512;
constexpr char kOmit[] = "<omit>";

using Keys = std::vector<std::pair<std::string, std::string>>;

// The keys of a one-PDU login straight into the operational stage; `changes` replaces values
// (kOmit drops the key) and appends keys not in the default list.
Keys SessionKeys(const std::map<std::string, std::string>& changes = {}) {
  Keys keys = {{"InitiatorName", kInitiator}, {"TargetName", kTarget},
               {"SessionType", "Normal"},     {"HeaderDigest", "None"},
               {"DataDigest", "None"},        {"ImmediateData", "Yes"},
               {"InitialR2T", "No"},          {"MaxBurstLength", "262144"},
               {"FirstBurstLength", "65536"}, {"MaxRecvDataSegmentLength", "8192"},
               {"MaxOutstandingR2T", "1"},    {"ErrorRecoveryLevel", "0"}};
  auto remaining = changes;
  Keys out;
  for (auto& [k, v] : keys) {
    auto it = remaining.find(k);
    if (it != remaining.end()) {
      if (it->second != kOmit) out.emplace_back(k, it->second);
      remaining.erase(it);
    } else {
      out.emplace_back(k, v);
    }
  }
  for (auto& [k, v] : remaining) {
    if (v != kOmit) out.emplace_back(k, v);
  }
  return out;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 9));
  return v;
}

std::vector<uint8_t> Header(pdu::Bhs h, size_t dsl) {
  h.SetDataSegmentLength(static_cast<uint32_t>(dsl));
  return std::vector<uint8_t>(h.b.begin(), h.b.end());
}

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override { StartDataplane(GatewayOptions{}); }
  void TearDown() override {
    if (dp_) dp_->Stop();
  }

  // The LUN of kTarget carries `fault` (test builds, ISCSIGW_FAULT_INJECTION), on `reactors`.
  void StartDataplane(const GatewayOptions& gateway, unsigned reactors = 1,
                      backing::FaultSpec fault = {}) {
    if (dp_) dp_->Stop();
    api::Options o;
    o.portals = {"127.0.0.1:0"};
    o.reactors = reactors;
    o.gateway = gateway;
    auto r = api::Dataplane::Start(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    dp_ = std::move(r.value());
    api::Config c;
    api::LunSpec lun;
    lun.id = 0;
    lun.backing = api::BackingKind::kRam;
    lun.size_bytes = kLunBytes;
    lun.block_size = kBlock;
    lun.fault = fault;
    api::TargetSpec open;
    open.name = kTarget;
    open.allow_any_initiator = true;
    open.luns.push_back(lun);
    api::TargetSpec acl;
    acl.name = kAclTarget;
    acl.allow_any_initiator = false;
    api::AclEntrySpec entry;
    entry.initiator = kAllowed;
    acl.acl.push_back(entry);
    lun.size_bytes = 1u << 20;
    lun.fault = {};
    acl.luns.push_back(lun);
    c.targets = {open, acl};
    const Status s = dp_->Apply(c);
    if (!s.ok() && fault.active() && s.message().find("no fault injection") != std::string::npos) {
      GTEST_FAIL() << "needs a build with -DISCSIGW_FAULT_INJECTION=ON (scripts/test.sh)";
    }
    ASSERT_TRUE(s.ok()) << s.message();
    portal_ = dp_->portals().at(0);
  }

  // Receives the next PDU and checks its opcode; a failed expectation leaves an all-0xff PDU.
  Pdu Expect(TestInitiator& ini, Opcode op, std::chrono::milliseconds timeout = 5s) {
    Pdu p;
    const RecvStatus s = ini.Recv(&p, timeout);
    if (s != RecvStatus::kOk) {
      ADD_FAILURE() << "no PDU (opcode " << std::hex << static_cast<int>(op) << " expected): "
                    << (s == RecvStatus::kClosed ? "connection closed" : "timeout");
      p.bhs.fill(0xff);
      return p;
    }
    EXPECT_EQ(p.opcode(), op) << "opcode " << std::hex << static_cast<int>(p.bhs[0] & 0x3f);
    EXPECT_TRUE(p.header_digest_ok);
    EXPECT_TRUE(p.data_digest_ok);
    return p;
  }

  // Connects and logs in a Normal session (digests as negotiated), then takes the POWER ON
  // unit attention every new I_T nexus reports first (SAM-5 5.14).
  void LoginDiscovery(TestInitiator& ini) {
    ASSERT_TRUE(ini.Connect(portal_));
    auto r = ini.Login({{"InitiatorName", kInitiator},
                        {"SessionType", "Discovery"},
                        {"HeaderDigest", "None"},
                        {"DataDigest", "None"}});
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->login_status(), 0);
  }

  void LoginNormal(TestInitiator& ini, const Keys& keys = SessionKeys()) {
    ASSERT_TRUE(ini.Connect(portal_));
    auto r = ini.Login(keys);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->opcode(), Opcode::kLoginResponse);
    ASSERT_EQ(r->login_status(), 0) << std::hex << r->login_status();
    auto answers = r->Keys();
    ini.SetDigests(answers["HeaderDigest"] == "CRC32C", answers["DataDigest"] == "CRC32C");
    const Pdu ua = Command(ini, TestUnitReadyCdb(), 0, false, false);
    ASSERT_EQ(ua.scsi_status(), 0x02);
    ASSERT_EQ(test::ParseSense(ua), (Sense{0x6, 0x29, 0x00}));
  }  // a as kInitiator and b as kInitiator2: two I_T nexuses.
  void LoginTwo(TestInitiator& a, TestInitiator& b) {
    LoginNormal(a);
    b.isid[5] = 2;
    LoginNormal(b, SessionKeys({{"InitiatorName", kInitiator2}}));
  }

  // Sends a command without data and returns its SCSI Response.
  Pdu Command(TestInitiator& ini, const std::array<uint8_t, 16>& cdb, uint32_t edtl, bool read,
              bool write, bool immediate = false) {
    const uint32_t itt = ini.NextItt();
    EXPECT_TRUE(ini.Send(ini.ScsiCommand(cdb, edtl, read, write, itt, true, immediate)));
    Pdu p = Expect(ini, Opcode::kScsiResponse);
    EXPECT_EQ(p.itt(), itt);
    return p;
  }

  // WRITE(10) with all data as immediate data (needs ImmediateData=Yes and FirstBurstLength).
  void WriteImmediate(TestInitiator& ini, uint32_t lba, const std::vector<uint8_t>& data) {
    const uint32_t itt = ini.NextItt();
    const uint32_t len = static_cast<uint32_t>(data.size());
    ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(lba, static_cast<uint16_t>(len / kBlock)), len,
                                         false, true, itt),
                         data));
    const Pdu r = Expect(ini, Opcode::kScsiResponse);
    EXPECT_EQ(r.itt(), itt);
    EXPECT_EQ(r.scsi_status(), 0);
  }

  // READ(10): collects every Data-In PDU up to the status (S bit or SCSI Response).
  std::vector<Pdu> Read(TestInitiator& ini, uint32_t lba, uint16_t blocks, uint32_t edtl,
                        std::vector<uint8_t>* data) {
    const uint32_t itt = ini.NextItt();
    EXPECT_TRUE(ini.Send(ini.ScsiCommand(Read10Cdb(lba, blocks), edtl, true, false, itt)));
    std::vector<Pdu> pdus;
    data->clear();
    for (int i = 0; i < 10000; ++i) {
      Pdu p;
      if (ini.Recv(&p) != RecvStatus::kOk) {
        ADD_FAILURE() << "READ ended without status";
        break;
      }
      EXPECT_EQ(p.itt(), itt);
      pdus.push_back(p);
      if (p.opcode() == Opcode::kDataIn) {
        if (data->size() < p.buffer_offset() + p.data.size()) {
          data->resize(p.buffer_offset() + p.data.size());
        }
        std::copy(p.data.begin(), p.data.end(), data->begin() + p.buffer_offset());
        if (p.flags() & 0x01) break;
      } else {
        EXPECT_EQ(p.opcode(), Opcode::kScsiResponse);
        break;
      }
    }
    return pdus;
  }

  std::vector<uint8_t> ReadBack(TestInitiator& ini, uint32_t lba, uint32_t len) {
    std::vector<uint8_t> data;
    Read(ini, lba, static_cast<uint16_t>(len / kBlock), len, &data);
    return data;
  }

  // A TUR with an explicit (non-immediate) CmdSN, leaving the initiator's own counter alone.
  pdu::Bhs TurWithCmdSn(TestInitiator& ini, uint32_t cmd_sn, uint32_t itt) {
    pdu::Bhs h = ini.ScsiCommand(TestUnitReadyCdb(), 0, false, false, itt, true, true);
    h.b[0] &= ~0x40;
    h.Set32(24, cmd_sn);
    return h;
  }

  std::unique_ptr<api::Dataplane> dp_;
  std::string portal_;
};

// ---------------------------------------------------------------------------------------------
// Login (RFC 7143 6.3, 11.12, 11.13)

TEST_F(ConnectionTest, LoginNormalSessionAnswersKeys) {
  TestInitiator ini;
  ASSERT_TRUE(ini.Connect(portal_));
  ini.exp_stat_sn = 0;
  const pdu::Bhs req = ini.LoginRequest(1, 3, true, 0x4242);
  auto r = ini.Login(SessionKeys({{"MaxBurstLength", "131072"}, {"FirstBurstLength", "32768"}}), 1,
                     3, true, req);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->opcode(), Opcode::kLoginResponse);
  EXPECT_EQ(r->login_status(), 0);
  EXPECT_EQ(r->flags(), 0x87);  // T, CSG=1, NSG=3
  EXPECT_EQ(r->bhs[2], 0);      // Version-max
  EXPECT_EQ(r->bhs[3], 0);      // Version-active
  EXPECT_EQ(r->itt(), 0x4242u);
  EXPECT_NE(r->tsih(), 0);
  EXPECT_EQ(std::vector<uint8_t>(r->bhs.begin() + 8, r->bhs.begin() + 14),
            std::vector<uint8_t>(ini.isid.begin(), ini.isid.end()));
  EXPECT_EQ(r->exp_cmd_sn(), 1u);    // the login's CmdSN is the first command's
  EXPECT_EQ(r->max_cmd_sn(), 128u);  // ExpCmdSN - 1 + window of 128
  auto k = r->Keys();
  EXPECT_EQ(k["HeaderDigest"], "None");
  EXPECT_EQ(k["DataDigest"], "None");
  EXPECT_EQ(k["ImmediateData"], "Yes");
  EXPECT_EQ(k["InitialR2T"], "No");
  EXPECT_EQ(k["MaxBurstLength"], "131072");
  EXPECT_EQ(k["FirstBurstLength"], "32768");
  EXPECT_EQ(k["MaxOutstandingR2T"], "1");
  EXPECT_EQ(k["ErrorRecoveryLevel"], "0");
  EXPECT_EQ(k["MaxRecvDataSegmentLength"], "262144");  // the target's own declaration
  EXPECT_EQ(k["TargetPortalGroupTag"], "1");
  EXPECT_EQ(k.count("InitiatorName"), 0u);  // declarations are not answered
}

TEST_F(ConnectionTest, LoginThroughSecurityAndOperationalStages) {
  TestInitiator ini;
  ASSERT_TRUE(ini.Connect(portal_));
  auto r = ini.Login({{"InitiatorName", kInitiator},
                      {"SessionType", "Normal"},
                      {"TargetName", kTarget},
                      {"AuthMethod", "None"}},
                     0, 1, true);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->login_status(), 0);
  EXPECT_EQ(r->flags(), 0x81);  // T, CSG=0, NSG=1
  EXPECT_EQ(r->tsih(), 0);      // TSIH only in the final response
  EXPECT_EQ(r->Keys()["AuthMethod"], "None");
  const uint32_t first_stat_sn = r->stat_sn();
  r = ini.Login({{"HeaderDigest", "None"}, {"MaxRecvDataSegmentLength", "8192"}}, 1, 3, true);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->login_status(), 0);
  EXPECT_EQ(r->flags(), 0x87);
  EXPECT_NE(r->tsih(), 0);
  EXPECT_EQ(r->stat_sn(), first_stat_sn + 1);
  EXPECT_EQ(r->Keys()["MaxRecvDataSegmentLength"], "262144");
}

struct LoginRejectRow {
  const char* name;
  std::map<std::string, std::string> changes;
  uint16_t tsih;
  uint8_t version_min;
  uint16_t status;
};

class LoginRejectTest : public ConnectionTest,
                        public ::testing::WithParamInterface<LoginRejectRow> {};

TEST_P(LoginRejectTest, RejectsWithStatusAndCloses) {
  const LoginRejectRow& row = GetParam();
  TestInitiator ini;
  ASSERT_TRUE(ini.Connect(portal_));
  ini.tsih = row.tsih;
  pdu::Bhs req = ini.LoginRequest(1, 3, true, 7);
  req.b[2] = row.version_min;  // Version-max
  req.b[3] = row.version_min;  // Version-min
  auto r = ini.Login(SessionKeys(row.changes), 1, 3, true, req);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->opcode(), Opcode::kLoginResponse);
  EXPECT_EQ(r->login_status(), row.status) << std::hex << r->login_status();
  EXPECT_EQ(r->itt(), 7u);
  EXPECT_EQ(r->tsih(), 0);
  EXPECT_EQ(r->flags() & 0x80, 0);  // no transit on a reject
  std::vector<Pdu> more;
  EXPECT_TRUE(ini.WaitClosed(5s, &more));
  EXPECT_TRUE(more.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Rfc7143_11_13_5, LoginRejectTest,
    ::testing::Values(
        LoginRejectRow{
            "UnknownTarget", {{"TargetName", "iqn.2026-11.io.iscsigw:nosuch"}}, 0, 0, 0x0203},
        LoginRejectRow{"MissingInitiatorName", {{"InitiatorName", kOmit}}, 0, 0, 0x0207},
        LoginRejectRow{"MissingTargetName", {{"TargetName", kOmit}}, 0, 0, 0x0207},
        LoginRejectRow{"TsihOfNoSession", {}, 0x7777, 0, 0x020a},
        LoginRejectRow{"VersionMinAboveZero", {}, 0, 1, 0x0205},
        LoginRejectRow{"UnlistedInitiator", {{"TargetName", kAclTarget}}, 0, 0, 0x0202}),
    [](const auto& p) { return std::string(p.param.name); });

TEST_F(ConnectionTest, ListedInitiatorPassesTheAcl) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"TargetName", kAclTarget}, {"InitiatorName", kAllowed}}));
}

TEST_F(ConnectionTest, NonLoginPduFirstClosesTheConnection) {
  TestInitiator ini;
  ASSERT_TRUE(ini.Connect(portal_));
  ASSERT_TRUE(ini.Send(ini.NopOut(1, pdu::kReservedTag, true)));
  Pdu p;
  EXPECT_EQ(ini.Recv(&p), RecvStatus::kClosed);  // no response of any kind
}

TEST_F(ConnectionTest, DiscoverySendTargetsListsOnlyAllowedTargetsWithThePortal) {
  for (const char* who : {kInitiator, kAllowed}) {
    SCOPED_TRACE(who);
    TestInitiator ini;
    ASSERT_TRUE(ini.Connect(portal_));
    auto r = ini.Login({{"InitiatorName", who},
                        {"SessionType", "Discovery"},
                        {"HeaderDigest", "None"},
                        {"DataDigest", "None"}});
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->login_status(), 0);
    EXPECT_NE(r->tsih(), 0);
    EXPECT_EQ(r->Keys().count("TargetPortalGroupTag"), 0u);

    std::vector<uint8_t> text;
    pdu::AppendKey("SendTargets", "All", &text);
    const uint32_t itt = ini.NextItt();
    ASSERT_TRUE(ini.Send(ini.TextRequest(itt), text));
    const Pdu t = Expect(ini, Opcode::kTextResponse);
    EXPECT_EQ(t.itt(), itt);
    EXPECT_EQ(t.flags(), 0x80);
    EXPECT_EQ(t.ttt(), pdu::kReservedTag);
    std::vector<std::pair<std::string, std::string>> want = {{"TargetName", kTarget},
                                                             {"TargetAddress", portal_ + ",1"}};
    if (std::string(who) == kAllowed) {
      want.insert(want.end(), {{"TargetName", kAclTarget}, {"TargetAddress", portal_ + ",1"}});
    }
    EXPECT_EQ(t.KeyList(), want);
  }
}

// At the connection limit the oldest connection still logging in makes room for a new one, so that
// idle connections cannot lock initiators out; a logged-in connection is never dropped for that.
TEST_F(ConnectionTest, FullConnectionTableDropsTheOldestConnectionStillLoggingIn) {
  GatewayOptions g;
  g.max_connections = 3;
  StartDataplane(g);
  // Three sessions of one initiator: distinct ISIDs, or each login would reinstate the last.
  TestInitiator session1, session2, session3;
  session2.isid[5] = 2;
  session3.isid[5] = 3;
  LoginNormal(session1);
  TestInitiator idle1, idle2;
  ASSERT_TRUE(idle1.Connect(portal_));
  ASSERT_TRUE(idle2.Connect(portal_));
  // The table is full (one session, two idle). A newcomer logs in; idle1, the oldest still
  // logging in, is closed for it.
  LoginNormal(session2);
  Pdu p;
  EXPECT_EQ(idle1.Recv(&p), RecvStatus::kClosed);
  // Now idle2 goes for the next one, and then nothing is left to drop: a fourth is refused.
  LoginNormal(session3);
  EXPECT_EQ(idle2.Recv(&p), RecvStatus::kClosed);
  TestInitiator refused;
  ASSERT_TRUE(refused.Connect(portal_));
  EXPECT_EQ(refused.Recv(&p), RecvStatus::kClosed);
  // The logged-in sessions are untouched.
  for (TestInitiator* s : {&session1, &session2, &session3}) {
    EXPECT_EQ(Command(*s, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0x00);
  }
}

// RFC 7143 11.10.2 / 11.10.4: a request continued with C=1 is answered with an empty response
// carrying a TTT, and the initiator sends the next piece with that TTT; the pieces form one
// request.
TEST_F(ConnectionTest, TextRequestContinuedWithTheTargetsTransferTagIsOneRequest) {
  TestInitiator ini;
  LoginDiscovery(ini);
  std::vector<uint8_t> text;
  pdu::AppendKey("SendTargets", "All", &text);
  const std::vector<uint8_t> first(text.begin(), text.begin() + 5);
  const std::vector<uint8_t> rest(text.begin() + 5, text.end());
  const uint32_t itt = ini.NextItt();
  pdu::Bhs h = ini.TextRequest(itt);
  h.SetFlags(0x40);  // C=1, F=0
  ASSERT_TRUE(ini.Send(h, first));
  const Pdu ack = Expect(ini, Opcode::kTextResponse);
  EXPECT_EQ(ack.flags(), 0x00);
  EXPECT_TRUE(ack.KeyList().empty());
  ASSERT_NE(ack.ttt(), pdu::kReservedTag);
  h = ini.TextRequest(itt);
  h.Set32(20, ack.ttt());
  ASSERT_TRUE(ini.Send(h, rest));
  const Pdu t = Expect(ini, Opcode::kTextResponse);
  EXPECT_EQ(t.flags(), 0x80);
  const std::vector<std::pair<std::string, std::string>> want = {{"TargetName", kTarget},
                                                                 {"TargetAddress", portal_ + ",1"}};
  EXPECT_EQ(t.KeyList(), want);
}

// Behind NAT or a Service the accepting socket's address is not the initiator's way in: the
// advertised addresses replace it, each with the target's portal group tag, in the order given.
TEST_F(ConnectionTest, SendTargetsReturnsTheAdvertisedAddressesInsteadOfThePortal) {
  GatewayOptions g;
  g.advertise = {"10.0.2.2:3260", "gw.example.net:13260", "[fd00::7]:3260"};
  StartDataplane(g);
  TestInitiator ini;
  LoginDiscovery(ini);
  std::vector<uint8_t> text;
  pdu::AppendKey("SendTargets", "All", &text);
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.TextRequest(itt), text));
  const Pdu t = Expect(ini, Opcode::kTextResponse);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"TargetName", kTarget},
      {"TargetAddress", "10.0.2.2:3260,1"},
      {"TargetAddress", "gw.example.net:13260,1"},
      {"TargetAddress", "[fd00::7]:3260,1"}};
  EXPECT_EQ(t.KeyList(), want);
}

TEST(AdvertiseTest, UnreachableOrMalformedAddressesStopTheStart) {
  for (const char* bad : {"10.0.2.2", "10.0.2.2:0", "10.0.2.2:65536", "10.0.2.2:32a", ":3260",
                          "0.0.0.0:3260", "[::]:3260", "fd00::7:3260", "[fd00::7:3260",
                          "bad_name:3260", "-gw.example:3260", "gw..example:3260"}) {
    SCOPED_TRACE(bad);
    api::Options o;
    o.portals = {"127.0.0.1:0"};
    o.reactors = 1;
    o.gateway.advertise = {"10.0.2.2:3260", bad};
    auto r = api::Dataplane::Start(o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("advertise ") + bad), std::string::npos)
        << r.status().message();
  }
  api::Options o;
  o.portals = {"127.0.0.1:0"};
  o.reactors = 1;
  o.gateway.advertise = {"10.0.2.2:3260", "gw-1.example.net:1", "[fd00::7]:65535"};
  auto r = api::Dataplane::Start(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value()->advertised(), o.gateway.advertise);
  r.value()->Stop();
}

// ---------------------------------------------------------------------------------------------
// CmdSN window (RFC 7143 4.2.2.1)

TEST_F(ConnectionTest, CommandsOutsideTheCmdSnWindowAreSilentlyIgnored) {
  TestInitiator ini;
  LoginNormal(ini);
  const uint32_t exp = ini.cmd_sn;
  const uint32_t max = exp - 1 + 128;
  ASSERT_TRUE(ini.Send(TurWithCmdSn(ini, exp - 1, 0x900)));  // already received
  ASSERT_TRUE(ini.Send(TurWithCmdSn(ini, max + 1, 0x901)));  // beyond MaxCmdSN
  ASSERT_TRUE(ini.Send(TurWithCmdSn(ini, exp + 0x80000000u, 0x902)));
  EXPECT_TRUE(ini.Quiet(300ms));
  const Pdu r = Command(ini, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(r.scsi_status(), 0);
  EXPECT_EQ(r.exp_cmd_sn(), exp + 1);
  // The ignored commands took no slot of the window.
  ASSERT_TRUE(ini.Send(ini.NopOut(ini.NextItt(), pdu::kReservedTag, true)));
  const Pdu nop = Expect(ini, Opcode::kNopIn);
  EXPECT_EQ(nop.exp_cmd_sn(), exp + 1);
  EXPECT_EQ(nop.max_cmd_sn(), exp + 128);
}

// With every slot of the window taken MaxCmdSN is ExpCmdSN - 1, so even a command carrying
// CmdSN == ExpCmdSN is outside the window: ignored, its CmdSN not consumed (RFC 7143 4.2.2.1).
TEST_F(ConnectionTest, CommandBeyondAClosedWindowIsIgnoredUntilASlotFrees) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  const uint32_t e = ini.cmd_sn;
  std::vector<std::pair<uint32_t, uint32_t>> writes;  // ITT, TTT
  for (uint32_t i = 0; i < 128; ++i) {
    const uint32_t itt = ini.NextItt();
    ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(i, 1), 512, false, true, itt)));
  }
  for (uint32_t i = 0; i < 128; ++i) {
    const Pdu r2t = Expect(ini, Opcode::kR2T);
    ASSERT_FALSE(HasFailure()) << i;
    writes.emplace_back(r2t.itt(), r2t.ttt());
    if (i == 127) {
      EXPECT_EQ(r2t.exp_cmd_sn(), e + 128);
      EXPECT_EQ(r2t.max_cmd_sn(), e + 127);  // window closed
    }
  }
  const uint32_t tur_sn = ini.cmd_sn;
  ASSERT_EQ(tur_sn, e + 128);
  ASSERT_TRUE(ini.Send(TurWithCmdSn(ini, tur_sn, 0x7000)));
  EXPECT_TRUE(ini.Quiet(300ms));

  // Finish one write; once its slot is back the same CmdSN is accepted.
  ASSERT_TRUE(
      ini.Send(ini.DataOut(writes[0].first, writes[0].second, 0, 0, true), Pattern(512, 1)));
  const Pdu resp = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(resp.itt(), writes[0].first);
  uint32_t max = 0;
  for (int i = 0; i < 50 && max != e + 128; ++i) {
    ASSERT_TRUE(ini.Send(ini.NopOut(ini.NextItt(), pdu::kReservedTag, true)));
    const Pdu nop = Expect(ini, Opcode::kNopIn);
    EXPECT_EQ(nop.exp_cmd_sn(), e + 128);  // the ignored TUR did not consume its CmdSN
    max = nop.max_cmd_sn();
  }
  ASSERT_EQ(max, e + 128);
  ASSERT_TRUE(ini.Send(TurWithCmdSn(ini, tur_sn, 0x7001)));
  const Pdu tur = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(tur.itt(), 0x7001u);
  EXPECT_EQ(tur.scsi_status(), 0);
  EXPECT_EQ(tur.exp_cmd_sn(), e + 129);
}

TEST_F(ConnectionTest, MaxCmdSnAdvancesAsCommandsComplete) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  const uint32_t e = ini.cmd_sn;
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(0, 8), 4096, false, true, itt)));
  const Pdu r2t = Expect(ini, Opcode::kR2T);
  EXPECT_EQ(r2t.exp_cmd_sn(), e + 1);
  EXPECT_EQ(r2t.max_cmd_sn(), e + 127);  // the write holds one slot of the window

  ASSERT_TRUE(ini.Send(ini.NopOut(ini.NextItt(), pdu::kReservedTag, true)));
  Pdu nop = Expect(ini, Opcode::kNopIn);
  EXPECT_EQ(nop.exp_cmd_sn(), e + 1);
  EXPECT_EQ(nop.max_cmd_sn(), e + 127);

  ASSERT_TRUE(ini.Send(ini.DataOut(itt, r2t.ttt(), 0, 0, true), Pattern(4096, 1)));
  const Pdu resp = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(resp.scsi_status(), 0);
  EXPECT_GE(resp.max_cmd_sn(), e + 127);

  ASSERT_TRUE(ini.Send(ini.NopOut(ini.NextItt(), pdu::kReservedTag, true)));
  nop = Expect(ini, Opcode::kNopIn);
  EXPECT_EQ(nop.exp_cmd_sn(), e + 1);
  EXPECT_EQ(nop.max_cmd_sn(), e + 128);  // slot returned
}

TEST_F(ConnectionTest, ImmediateCommandsDoNotAdvanceExpCmdSn) {
  TestInitiator ini;
  LoginNormal(ini);
  const uint32_t e = ini.cmd_sn;
  Pdu r = Command(ini, TestUnitReadyCdb(), 0, false, false, /*immediate=*/true);
  EXPECT_EQ(r.scsi_status(), 0);
  EXPECT_EQ(r.exp_cmd_sn(), e);
  EXPECT_EQ(r.max_cmd_sn(), e - 1 + 128);
  r = Command(ini, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(r.exp_cmd_sn(), e + 1);
}

// ---------------------------------------------------------------------------------------------
// Writes: immediate data, unsolicited Data-Out, R2Ts (RFC 7143 4.2.5.2, 11.7, 11.8)

TEST_F(ConnectionTest, WriteWithImmediateDataOnly) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}}));
  const auto data = Pattern(8192, 3);
  WriteImmediate(ini, 16, data);
  EXPECT_TRUE(ini.Quiet(100ms));  // no R2T
  EXPECT_EQ(ReadBack(ini, 16, 8192), data);
}

TEST_F(ConnectionTest, WriteSolicitedByR2tsInBurstsOfMaxBurstLength) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"},
                                {"ImmediateData", "No"},
                                {"MaxBurstLength", "4096"},
                                {"FirstBurstLength", "4096"},
                                {"MaxOutstandingR2T", "1"}}));
  const auto data = Pattern(16384, 9);
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(100, 32), 16384, false, true, itt)));
  std::vector<uint32_t> ttts;
  for (uint32_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const Pdu r2t = Expect(ini, Opcode::kR2T);
    ASSERT_FALSE(HasFailure());
    EXPECT_EQ(r2t.flags(), 0x80);
    EXPECT_EQ(r2t.itt(), itt);
    EXPECT_EQ(r2t.h().lun_raw(), 0u);
    EXPECT_NE(r2t.ttt(), pdu::kReservedTag);
    EXPECT_EQ(r2t.data_sn(), i);  // R2TSN
    EXPECT_EQ(r2t.buffer_offset(), i * 4096);
    EXPECT_EQ(r2t.desired_length(), 4096u);
    ttts.push_back(r2t.ttt());
    // MaxOutstandingR2T=1: the next R2T waits for this burst.
    EXPECT_TRUE(ini.Quiet(100ms));
    // Two Data-Out PDUs per burst; DataSN restarts at 0 for every R2T (RFC 7143 11.7.5).
    const uint32_t off = r2t.buffer_offset();
    ASSERT_TRUE(
        ini.Send(ini.DataOut(itt, r2t.ttt(), 0, off, false), std::span(data).subspan(off, 2048)));
    ASSERT_TRUE(ini.Send(ini.DataOut(itt, r2t.ttt(), 1, off + 2048, true),
                         std::span(data).subspan(off + 2048, 2048)));
  }
  const Pdu resp = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(resp.itt(), itt);
  EXPECT_EQ(resp.scsi_status(), 0);
  EXPECT_EQ(resp.flags(), 0x80);  // no residual
  EXPECT_EQ(resp.data_sn(), 4u);  // ExpDataSN: the R2Ts sent for the command
  EXPECT_EQ(ReadBack(ini, 100, 16384), data);
}

// A Reject does not end a command (RFC 7143 11.17): a write whose Data-Out breaks the sequence
// ends with CHECK CONDITION, ABORTED COMMAND and the data-phase ASC, so the initiator is not left
// waiting for its SCSI timeout. Regression: only a Reject was sent, and the command never ended.
TEST_F(ConnectionTest, DataOutWithWrongDataSnEndsTheWriteWithDataPhaseError) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(0, 8), 4096, false, true, itt)));
  const Pdu r2t = Expect(ini, Opcode::kR2T);
  ASSERT_TRUE(ini.Send(ini.DataOut(itt, r2t.ttt(), 1, 0, true), Pattern(4096, 5)));  // DataSN 1
  const Pdu r = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(r.itt(), itt);
  EXPECT_EQ(r.scsi_status(), 0x02);
  EXPECT_EQ(test::ParseSense(r), (Sense{0x0b, 0x4b, 0x00}));  // DATA PHASE ERROR
  EXPECT_EQ(r.residual(), 4096u);                             // nothing was written
  EXPECT_EQ(ReadBack(ini, 0, 4096), std::vector<uint8_t>(4096, 0));
  // Data-Out that still arrives for the ended write is discarded; the connection carries on.
  ASSERT_TRUE(ini.Send(ini.DataOut(itt, r2t.ttt(), 0, 0, true), Pattern(4096, 5)));
  EXPECT_EQ(Command(ini, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
  EXPECT_TRUE(ini.Quiet(200ms));
}

TEST_F(ConnectionTest, DataOutWithWrongOffsetEndsTheWriteWithDataOffsetError) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(0, 8), 4096, false, true, itt)));
  const Pdu r2t = Expect(ini, Opcode::kR2T);
  ASSERT_TRUE(ini.Send(ini.DataOut(itt, r2t.ttt(), 0, 512, true), Pattern(512, 5)));
  const Pdu r = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(r.itt(), itt);
  EXPECT_EQ(test::ParseSense(r), (Sense{0x0b, 0x4b, 0x05}));  // DATA OFFSET ERROR
  EXPECT_EQ(Command(ini, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
}

TEST_F(ConnectionTest, DataOutEndingTheBurstEarlyEndsTheWrite) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(0, 8), 4096, false, true, itt)));
  const Pdu r2t = Expect(ini, Opcode::kR2T);
  ASSERT_TRUE(ini.Send(ini.DataOut(itt, r2t.ttt(), 0, 0, true), Pattern(1024, 5)));  // F=1 early
  const Pdu r = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(test::ParseSense(r), (Sense{0x0b, 0x4b, 0x00}));
}

TEST_F(ConnectionTest, WriteWithUnsolicitedDataOutUpToFirstBurstLength) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "No"},
                                {"ImmediateData", "Yes"},
                                {"MaxBurstLength", "16384"},
                                {"FirstBurstLength", "8192"}}));
  const auto data = Pattern(24576, 77);
  const uint32_t itt = ini.NextItt();
  // 2048 bytes immediate, 6144 in two unsolicited Data-Out: FirstBurstLength in all.
  ASSERT_TRUE(
      ini.Send(ini.ScsiCommand(Write10Cdb(200, 48), 24576, false, true, itt, /*final_bit=*/false),
               std::span(data).subspan(0, 2048)));
  ASSERT_TRUE(ini.Send(ini.DataOut(itt, pdu::kReservedTag, 0, 2048, false),
                       std::span(data).subspan(2048, 4096)));
  ASSERT_TRUE(ini.Send(ini.DataOut(itt, pdu::kReservedTag, 1, 6144, true),
                       std::span(data).subspan(6144, 2048)));
  const Pdu r2t = Expect(ini, Opcode::kR2T);
  EXPECT_EQ(r2t.itt(), itt);
  EXPECT_EQ(r2t.data_sn(), 0u);
  EXPECT_EQ(r2t.buffer_offset(), 8192u);
  EXPECT_EQ(r2t.desired_length(), 16384u);
  ASSERT_TRUE(
      ini.Send(ini.DataOut(itt, r2t.ttt(), 0, 8192, false), std::span(data).subspan(8192, 8192)));
  ASSERT_TRUE(
      ini.Send(ini.DataOut(itt, r2t.ttt(), 1, 16384, true), std::span(data).subspan(16384, 8192)));
  const Pdu resp = Expect(ini, Opcode::kScsiResponse);
  EXPECT_EQ(resp.itt(), itt);
  EXPECT_EQ(resp.scsi_status(), 0);
  EXPECT_EQ(ReadBack(ini, 200, 24576), data);
}

TEST_F(ConnectionTest, ImmediateDataBeyondFirstBurstLengthIsRejected) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"FirstBurstLength", "4096"}}));
  const uint32_t itt = ini.NextItt();
  const pdu::Bhs cmd = ini.ScsiCommand(Write10Cdb(0, 16), 8192, false, true, itt);
  ASSERT_TRUE(ini.Send(cmd, Pattern(8192, 1)));
  const Pdu rej = Expect(ini, Opcode::kReject);
  EXPECT_EQ(rej.response(), 0x04);
  EXPECT_EQ(rej.data, Header(cmd, 8192));
  const Pdu r = Command(ini, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(r.scsi_status(), 0);
}

// ---------------------------------------------------------------------------------------------
// Reads: Data-In (RFC 7143 11.7), status in the last Data-In, residuals (11.4.5)

TEST_F(ConnectionTest, ReadIsSplitByTheInitiatorsMaxRecvDataSegmentLength) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"MaxRecvDataSegmentLength", "4096"}}));
  const auto data = Pattern(16384, 21);
  WriteImmediate(ini, 64, data);
  std::vector<uint8_t> got;
  const uint32_t stat_sn = ini.exp_stat_sn;
  const auto pdus = Read(ini, 64, 32, 16384, &got);
  ASSERT_EQ(pdus.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const Pdu& p = pdus[i];
    EXPECT_EQ(p.opcode(), Opcode::kDataIn);
    EXPECT_EQ(p.data.size(), 4096u);
    EXPECT_EQ(p.data_sn(), i);
    EXPECT_EQ(p.buffer_offset(), i * 4096);
    EXPECT_EQ(p.ttt(), pdu::kReservedTag);
    if (i < 3) {
      EXPECT_EQ(p.flags(), 0x00);
    }
  }
  EXPECT_EQ(pdus[3].flags(), 0x81);  // F + S, no residual
  EXPECT_EQ(pdus[3].scsi_status(), 0);
  EXPECT_EQ(pdus[3].stat_sn(), stat_sn);
  EXPECT_EQ(pdus[3].residual(), 0u);
  EXPECT_EQ(got, data);
  EXPECT_TRUE(ini.Quiet(200ms));  // no separate SCSI Response
}

TEST_F(ConnectionTest, ReadSetsTheFinalBitAtEveryMaxBurstLength) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"MaxRecvDataSegmentLength", "4096"},
                                {"MaxBurstLength", "8192"},
                                {"FirstBurstLength", "8192"}}));
  std::vector<uint8_t> got;
  const auto pdus = Read(ini, 0, 32, 16384, &got);
  ASSERT_EQ(pdus.size(), 4u);
  EXPECT_EQ(pdus[0].flags(), 0x00);
  EXPECT_EQ(pdus[1].flags(), 0x80);  // end of the first sequence
  EXPECT_EQ(pdus[2].flags(), 0x00);
  EXPECT_EQ(pdus[3].flags(), 0x81);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(pdus[i].data_sn(), i);
}

TEST_F(ConnectionTest, ReadWithSmallerEdtlReportsOverflow) {
  TestInitiator ini;
  LoginNormal(ini);
  const auto data = Pattern(4096, 40);
  WriteImmediate(ini, 8, data);
  std::vector<uint8_t> got;
  const auto pdus = Read(ini, 8, 8, 2048, &got);
  ASSERT_FALSE(pdus.empty());
  const Pdu& last = pdus.back();
  ASSERT_EQ(last.opcode(), Opcode::kDataIn);
  EXPECT_EQ(last.flags(), 0x80 | 0x04 | 0x01);  // F, O, S
  EXPECT_EQ(last.residual(), 2048u);
  EXPECT_EQ(last.scsi_status(), 0);
  EXPECT_EQ(got, std::vector<uint8_t>(data.begin(), data.begin() + 2048));
}

TEST_F(ConnectionTest, ReadWithLargerEdtlReportsUnderflow) {
  TestInitiator ini;
  LoginNormal(ini);
  const auto data = Pattern(4096, 41);
  WriteImmediate(ini, 8, data);
  std::vector<uint8_t> got;
  const auto pdus = Read(ini, 8, 8, 8192, &got);
  ASSERT_FALSE(pdus.empty());
  const Pdu& last = pdus.back();
  ASSERT_EQ(last.opcode(), Opcode::kDataIn);
  EXPECT_EQ(last.flags(), 0x80 | 0x02 | 0x01);  // F, U, S
  EXPECT_EQ(last.residual(), 4096u);
  EXPECT_EQ(got, data);
}

TEST_F(ConnectionTest, StatSnIncrementsByOnePerResponse) {
  TestInitiator ini;
  LoginNormal(ini);
  std::vector<uint32_t> sns;
  for (int i = 0; i < 3; ++i)
    sns.push_back(Command(ini, TestUnitReadyCdb(), 0, false, false).stat_sn());
  std::vector<uint8_t> got;
  sns.push_back(Read(ini, 0, 1, 512, &got).back().stat_sn());
  ASSERT_TRUE(ini.Send(ini.NopOut(ini.NextItt(), pdu::kReservedTag, false)));
  sns.push_back(Expect(ini, Opcode::kNopIn).stat_sn());
  sns.push_back(Command(ini, TestUnitReadyCdb(), 0, false, false).stat_sn());
  for (size_t i = 1; i < sns.size(); ++i) EXPECT_EQ(sns[i], sns[0] + i) << i;
}

// ---------------------------------------------------------------------------------------------
// Digests (RFC 7143 13.1, 7.8)

class DigestTest : public ConnectionTest {
 protected:
  void SetUp() override {
    ConnectionTest::SetUp();
    ASSERT_FALSE(HasFatalFailure());
    LoginNormal(ini_, SessionKeys({{"HeaderDigest", "CRC32C,None"},
                                   {"DataDigest", "CRC32C,None"},
                                   {"MaxRecvDataSegmentLength", "4096"}}));
  }
  TestInitiator ini_;
};

TEST_F(DigestTest, ResponsesCarryCorrectDigests) {
  // Expect() checks both digests of every PDU; the power-on unit attention (with sense data)
  // already came with digests in SetUp.
  const auto data = Pattern(6000, 8);
  std::vector<uint8_t> sized(data.begin(), data.begin() + 5632);  // 11 blocks
  WriteImmediate(ini_, 3, sized);
  std::vector<uint8_t> got;
  const auto pdus = Read(ini_, 3, 11, 5632, &got);
  ASSERT_EQ(pdus.size(), 2u);
  for (const Pdu& p : pdus) {
    EXPECT_TRUE(p.header_digest_ok);
    EXPECT_TRUE(p.data_digest_ok);
  }
  EXPECT_EQ(got, sized);
  // An odd-length ping exercises the padding under the data digest.
  const std::vector<uint8_t> ping = {'p', 'i', 'n', 'g', '!'};
  ASSERT_TRUE(ini_.Send(ini_.NopOut(0x55, pdu::kReservedTag, true), ping));
  const Pdu nop = Expect(ini_, Opcode::kNopIn);
  EXPECT_EQ(nop.data, ping);
}

TEST_F(DigestTest, BadDataDigestGetsRejectAndTheConnectionGoesOn) {
  const std::vector<uint8_t> ping = {1, 2, 3, 4, 5, 6, 7, 8};
  const pdu::Bhs nop = ini_.NopOut(0x66, pdu::kReservedTag, true);
  ASSERT_TRUE(ini_.Send(nop, ping, {.corrupt_data_digest = true}));
  const Pdu rej = Expect(ini_, Opcode::kReject);
  EXPECT_EQ(rej.response(), 0x02);  // data digest error
  EXPECT_EQ(rej.data, Header(nop, ping.size()));
  ASSERT_TRUE(ini_.Send(ini_.NopOut(0x67, pdu::kReservedTag, true), ping));
  const Pdu echo = Expect(ini_, Opcode::kNopIn);
  EXPECT_EQ(echo.itt(), 0x67u);
  EXPECT_EQ(echo.data, ping);
}

// RFC 7143 7.8: for immediate data "the non-data part of the command PDU is considered": the
// command is received (its CmdSN consumed), its data is not, and once all data is in the task ends
// with CHECK CONDITION, PROTOCOL SERVICE CRC ERROR (ABORTED COMMAND, 47h/05h; 13.5.1).
TEST_F(DigestTest, BadImmediateDataDigestFailsTheCommandButKeepsItsCmdSn) {
  const uint32_t e = ini_.cmd_sn;
  const uint32_t itt = ini_.NextItt();
  const pdu::Bhs cmd = ini_.ScsiCommand(Write10Cdb(500, 8), 4096, false, true, itt);
  ASSERT_TRUE(ini_.Send(cmd, Pattern(4096, 13), {.corrupt_data_digest = true}));
  const Pdu rej = Expect(ini_, Opcode::kReject);
  EXPECT_EQ(rej.response(), 0x02);
  EXPECT_EQ(rej.data, Header(cmd, 4096));
  const Pdu resp = Expect(ini_, Opcode::kScsiResponse, 2s);
  EXPECT_EQ(resp.itt(), itt);
  EXPECT_EQ(resp.scsi_status(), 0x02);
  EXPECT_EQ(test::ParseSense(resp), (Sense{0x0b, 0x47, 0x05}));
  EXPECT_EQ(resp.exp_cmd_sn(), e + 1);
  // The session goes on with the next CmdSN, and the corrupt data never reached the LUN.
  EXPECT_EQ(Command(ini_, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
  EXPECT_EQ(ReadBack(ini_, 500, 4096), std::vector<uint8_t>(4096, 0));
}

// RFC 7143 7.8 (b): a Data-Out with a bad data digest fails its task, answered only once the
// last solicited Data-Out arrived.
TEST_F(DigestTest, BadDataOutDigestFailsTheTaskAfterAllItsData) {
  const uint32_t itt = ini_.NextItt();
  ASSERT_TRUE(ini_.Send(ini_.ScsiCommand(Write10Cdb(600, 16), 8192, false, true, itt)));
  const Pdu r2t = Expect(ini_, Opcode::kR2T);
  ASSERT_EQ(r2t.desired_length(), 8192u);
  const auto data = Pattern(8192, 14);
  const pdu::Bhs bad = ini_.DataOut(itt, r2t.ttt(), 0, 0, false);
  ASSERT_TRUE(ini_.Send(bad, std::span(data).subspan(0, 4096), {.corrupt_data_digest = true}));
  const Pdu rej = Expect(ini_, Opcode::kReject);
  EXPECT_EQ(rej.response(), 0x02);
  EXPECT_EQ(rej.data, Header(bad, 4096));
  EXPECT_TRUE(ini_.Quiet(200ms));  // no response while data is still expected
  ASSERT_TRUE(
      ini_.Send(ini_.DataOut(itt, r2t.ttt(), 1, 4096, true), std::span(data).subspan(4096)));
  const Pdu resp = Expect(ini_, Opcode::kScsiResponse);
  EXPECT_EQ(resp.itt(), itt);
  EXPECT_EQ(resp.scsi_status(), 0x02);
  EXPECT_EQ(test::ParseSense(resp), (Sense{0x0b, 0x47, 0x05}));
  EXPECT_EQ(ReadBack(ini_, 600, 8192), std::vector<uint8_t>(8192, 0));
}

TEST_F(DigestTest, BadHeaderDigestClosesTheConnection) {
  ASSERT_TRUE(
      ini_.Send(ini_.NopOut(0x68, pdu::kReservedTag, true), {}, {.corrupt_header_digest = true}));
  std::vector<Pdu> before;
  EXPECT_TRUE(ini_.WaitClosed(5s, &before));
  EXPECT_TRUE(before.empty());
}

TEST_F(ConnectionTest, DataSegmentLongerThanDeclaredIsRejectedAndCloses) {
  TestInitiator ini;
  LoginNormal(ini);
  pdu::Bhs nop = ini.NopOut(0x70, pdu::kReservedTag, true);
  nop.SetDataSegmentLength(262144 + 4);  // the target declared 262144
  ASSERT_TRUE(ini.SendRaw(nop.data(), pdu::kBhsLength));
  const Pdu rej = Expect(ini, Opcode::kReject);
  EXPECT_EQ(rej.response(), 0x04);
  EXPECT_EQ(rej.data, std::vector<uint8_t>(nop.b.begin(), nop.b.end()));
  EXPECT_TRUE(ini.WaitClosed());
}

// ---------------------------------------------------------------------------------------------
// NOP (RFC 7143 11.18, 11.19)

TEST_F(ConnectionTest, NopOutPingDataIsEchoed) {
  TestInitiator ini;
  LoginNormal(ini);
  const std::vector<uint8_t> ping = {'h', 'e', 'l', 'l', 'o', ' ', 'p', 'i', 'n', 'g', '!'};
  pdu::Bhs h = ini.NopOut(0xabcd, pdu::kReservedTag, true);
  h.SetLunRaw(pdu::EncodeLun(3));
  ASSERT_TRUE(ini.Send(h, ping));
  const Pdu r = Expect(ini, Opcode::kNopIn);
  EXPECT_EQ(r.flags(), 0x80);
  EXPECT_EQ(r.itt(), 0xabcdu);
  EXPECT_EQ(r.ttt(), pdu::kReservedTag);
  EXPECT_EQ(r.h().lun_raw(), pdu::EncodeLun(3));
  EXPECT_EQ(r.data, ping);
}

TEST_F(ConnectionTest, TargetPingsAnIdleInitiatorAndDropsItWhenUnanswered) {
  GatewayOptions g;
  g.nop_interval_ms = 300;
  g.nop_timeout_ms = 700;
  StartDataplane(g);
  TestInitiator ini;
  LoginNormal(ini);
  const uint32_t stat_sn = ini.exp_stat_sn;
  const Pdu ping = Expect(ini, Opcode::kNopIn, 3s);
  EXPECT_EQ(ping.itt(), pdu::kReservedTag);
  EXPECT_NE(ping.ttt(), pdu::kReservedTag);
  EXPECT_EQ(ping.flags(), 0x80);
  EXPECT_EQ(ping.stat_sn(), stat_sn);  // StatSN not advanced (RFC 7143 11.19.2)
  EXPECT_TRUE(ping.data.empty());
  // Answer it: ITT 0xffffffff, the target's TTT, immediate.
  const auto answered = std::chrono::steady_clock::now();
  ASSERT_TRUE(ini.Send(ini.NopOut(pdu::kReservedTag, ping.ttt(), true)));

  // Answered: the connection lives and, idle again, is pinged again. This one goes unanswered.
  const Pdu ping2 = Expect(ini, Opcode::kNopIn, 3s);
  EXPECT_EQ(ping2.itt(), pdu::kReservedTag);
  EXPECT_NE(ping2.ttt(), ping.ttt());
  EXPECT_TRUE(ini.WaitClosed(5s));
  // Not before the ping went unanswered for the timeout: the target received the answer after
  // `answered`, pinged after the interval of silence that followed and closed after the timeout,
  // so at least interval + timeout passed since, however slowly either side was scheduled.
  EXPECT_GE(std::chrono::steady_clock::now() - answered, 1000ms);
}

// ---------------------------------------------------------------------------------------------
// Task management (RFC 7143 11.5, 11.6)

TEST_F(ConnectionTest, AbortTaskOfAnUnknownTaskSaysTaskDoesNotExist) {
  TestInitiator ini;
  LoginNormal(ini);
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.TaskMgmt(1, itt, 0xdead, ini.cmd_sn + 10)));
  const Pdu r = Expect(ini, Opcode::kTaskMgmtResponse);
  EXPECT_EQ(r.itt(), itt);
  EXPECT_EQ(r.flags(), 0x80);
  EXPECT_EQ(r.response(), 1);
}

TEST_F(ConnectionTest, LunResetRaisesUnitAttentionOnTheOtherSession) {
  TestInitiator a, b;
  LoginTwo(a, b);
  const uint32_t itt = a.NextItt();
  ASSERT_TRUE(a.Send(a.TaskMgmt(5, itt, pdu::kReservedTag, a.cmd_sn)));
  const Pdu r = Expect(a, Opcode::kTaskMgmtResponse);
  EXPECT_EQ(r.itt(), itt);
  EXPECT_EQ(r.response(), 0);
  // SAM-5 5.8: BUS DEVICE RESET FUNCTION OCCURRED for every other I_T nexus, reported once.
  Pdu t = Command(b, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(t.scsi_status(), 0x02);
  EXPECT_EQ(test::ParseSense(t), (Sense{0x6, 0x29, 0x03}));
  EXPECT_EQ(Command(b, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
}

// Regression: a write aborted while its R2T was still queued went out as a SCSI Response GOOD
// (underflow, residual = EDTL) and took a StatSN. With InitialR2T=Yes and ImmediateData=No, the
// WRITE and the ABORT TASK in one TCP segment are handled in one pass, before any write to the
// socket.
TEST_F(ConnectionTest, WriteAbortedWithItsR2tQueuedGetsNoResponse) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  const uint32_t write_sn = ini.cmd_sn;
  const uint32_t witt = ini.NextItt();
  const pdu::Bhs write = ini.ScsiCommand(Write10Cdb(0, 8), 4096, false, true, witt);
  const uint32_t titt = ini.NextItt();
  const pdu::Bhs abort = ini.TaskMgmt(1, titt, witt, write_sn);
  std::vector<uint8_t> segment = Header(write, 0);
  const auto second = Header(abort, 0);
  segment.insert(segment.end(), second.begin(), second.end());
  ASSERT_TRUE(ini.SendRaw(segment.data(), segment.size()));
  const Pdu r = Expect(ini, Opcode::kTaskMgmtResponse);
  EXPECT_EQ(r.itt(), titt);
  EXPECT_EQ(r.response(), 0);  // Function complete
  EXPECT_TRUE(ini.Quiet(300ms)) << "an R2T or a SCSI Response for the aborted write";
  // No StatSN went to the aborted write: the next response follows the TMF response's.
  const Pdu t = Command(ini, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(t.scsi_status(), 0);
  EXPECT_EQ(t.stat_sn(), r.stat_sn() + 1);
}

// RFC 7143 4.2.2.1: MaxCmdSN is what the target can queue once this response is out. Regression:
// a response was built while its own command still held a slot, one short of the window.
TEST_F(ConnectionTest, ResponseAdvertisesTheSlotItsCommandFrees) {
  TestInitiator ini;
  LoginNormal(ini);
  const Pdu r = Command(ini, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(r.max_cmd_sn(), r.exp_cmd_sn() + Session::kCmdWindow - 1);
  std::vector<uint8_t> data;
  const auto pdus = Read(ini, 0, 8, 4096, &data);
  ASSERT_FALSE(pdus.empty());
  EXPECT_EQ(pdus.back().max_cmd_sn(), pdus.back().exp_cmd_sn() + Session::kCmdWindow - 1);
}

TEST_F(ConnectionTest, LunResetOfAMissingLunSaysLunDoesNotExist) {
  TestInitiator ini;
  LoginNormal(ini);
  ASSERT_TRUE(ini.Send(ini.TaskMgmt(5, 0x31, pdu::kReservedTag, ini.cmd_sn, /*lun=*/9)));
  EXPECT_EQ(Expect(ini, Opcode::kTaskMgmtResponse).response(), 2);
}

TEST_F(ConnectionTest, AbortTaskOfAWriteWaitingForDataOut) {
  TestInitiator ini;
  LoginNormal(ini, SessionKeys({{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  const uint32_t write_sn = ini.cmd_sn;
  const uint32_t witt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.ScsiCommand(Write10Cdb(0, 8), 4096, false, true, witt)));
  const Pdu r2t = Expect(ini, Opcode::kR2T);
  const uint32_t titt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.TaskMgmt(1, titt, witt, write_sn)));
  const Pdu r = Expect(ini, Opcode::kTaskMgmtResponse);
  EXPECT_EQ(r.itt(), titt);
  EXPECT_EQ(r.response(), 0);
  // Data-Out for the aborted task is discarded without an answer (RFC 7143 4.2.3).
  ASSERT_TRUE(ini.Send(ini.DataOut(witt, r2t.ttt(), 0, 0, true), Pattern(4096, 2)));
  const Pdu t = Command(ini, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(t.scsi_status(), 0);
  EXPECT_TRUE(ini.Quiet(300ms));  // never a SCSI Response for the aborted write
}

// ---------------------------------------------------------------------------------------------
// Logout, SNACK, discovery limits

TEST_F(ConnectionTest, LogoutAnswersThenCloses) {
  TestInitiator ini;
  LoginNormal(ini);
  const uint32_t itt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.Logout(0, itt)));
  const Pdu r = Expect(ini, Opcode::kLogoutResponse);
  EXPECT_EQ(r.itt(), itt);
  EXPECT_EQ(r.flags(), 0x80);
  EXPECT_EQ(r.response(), 0);
  std::vector<Pdu> after;
  EXPECT_TRUE(ini.WaitClosed(5s, &after));
  EXPECT_TRUE(after.empty());
}

TEST_F(ConnectionTest, SnackIsRejectedAsNotSupported) {
  TestInitiator ini;
  LoginNormal(ini);
  pdu::Bhs snack;
  snack.SetOpcode(Opcode::kSnackRequest);
  snack.SetFlags(0x80);
  snack.SetItt(0x44);
  snack.Set32(20, pdu::kReservedTag);
  snack.Set32(28, ini.exp_stat_sn);
  ASSERT_TRUE(ini.Send(snack));
  const Pdu rej = Expect(ini, Opcode::kReject);
  EXPECT_EQ(rej.response(), 0x05);  // command not supported
  EXPECT_EQ(rej.data, Header(snack, 0));
  EXPECT_EQ(Command(ini, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
}

TEST_F(ConnectionTest, ScsiCommandInADiscoverySessionIsRejected) {
  TestInitiator ini;
  ASSERT_TRUE(ini.Connect(portal_));
  auto r = ini.Login({{"InitiatorName", kInitiator}, {"SessionType", "Discovery"}});
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->login_status(), 0);
  const pdu::Bhs cmd = ini.ScsiCommand(TestUnitReadyCdb(), 0, false, false, 0x99);
  ASSERT_TRUE(ini.Send(cmd));
  const Pdu rej = Expect(ini, Opcode::kReject);
  EXPECT_EQ(rej.response(), 0x04);
  EXPECT_EQ(rej.data, Header(cmd, 0));
}

// ---------------------------------------------------------------------------------------------
// Sequence numbers at send time, and Data-In digests over the bytes sent

// RFC 7143 11.19.2: a target's ping carries the current StatSN (not advanced) and the current
// command window. Regression: they were taken when the ping was queued, behind responses that
// had not been numbered yet, so the ping went out with a StatSN older than theirs.
TEST_F(ConnectionTest, KeepAlivePingCarriesTheSequenceNumbersOfItsSendTime) {
  GatewayOptions g;
  g.nop_interval_ms = 300;
  g.nop_timeout_ms = 30000;
  StartDataplane(g);
  TestInitiator ini;
  LoginNormal(ini);
  // 24 MiB of Data-In the initiator does not read yet: the writer stalls with responses queued.
  constexpr int kReads = 24;
  for (int i = 0; i < kReads; ++i) {
    ASSERT_TRUE(
        ini.Send(ini.ScsiCommand(Read10Cdb(0, 2048), 1u << 20, true, false, ini.NextItt())));
  }
  // Idle past the ping interval (the ping is what is tested: it needs the time to pass).
  std::this_thread::sleep_for(1200ms);
  uint32_t last_stat_sn = 0;
  uint32_t last_max_cmd_sn = 0;
  int statuses = 0;
  std::optional<Pdu> ping;
  while (!ping) {
    Pdu p;
    ASSERT_EQ(ini.Recv(&p, 5s), RecvStatus::kOk) << "after " << statuses << " statuses";
    if (p.opcode() == Opcode::kNopIn) {
      ping = p;
    } else if (p.opcode() == Opcode::kDataIn && (p.flags() & 0x01)) {
      last_stat_sn = p.stat_sn();
      last_max_cmd_sn = p.max_cmd_sn();
      ++statuses;
    }
  }
  ASSERT_EQ(statuses, kReads) << "the ping is queued behind every read";
  EXPECT_EQ(ping->itt(), pdu::kReservedTag);
  EXPECT_EQ(ping->stat_sn(), last_stat_sn + 1);
  EXPECT_EQ(ping->max_cmd_sn(), last_max_cmd_sn);
  EXPECT_EQ(ping->max_cmd_sn(), ping->exp_cmd_sn() + Session::kCmdWindow - 1);
}

// With DataDigest=CRC32C the digest must cover the bytes on the wire. Regression: zero-copy
// Data-In from a RAM LUN was digested over store memory that a writer on another reactor could
// change before the bytes reached the socket.
TEST_F(ConnectionTest, DataInDigestsHoldWhileAnotherReactorWritesTheSameBlocks) {
  StartDataplane(GatewayOptions{}, /*reactors=*/2);
  TestInitiator writer;
  LoginNormal(writer);
  TestInitiator reader;
  reader.isid[5] = 2;
  LoginNormal(reader, SessionKeys({{"DataDigest", "CRC32C"}, {"InitiatorName", kInitiator2}}));
  const auto sessions = dp_->ListSessions();
  ASSERT_EQ(sessions.size(), 2u);
  ASSERT_NE(sessions[0].reactor, sessions[1].reactor) << "both sessions on one reactor";

  std::atomic<bool> stop{false};
  std::thread w([&] {
    const auto a = Pattern(65536, 1);
    const auto b = Pattern(65536, 2);
    for (int i = 0; !stop.load(); ++i) {
      const uint32_t itt = writer.NextItt();
      if (!writer.Send(writer.ScsiCommand(Write10Cdb(0, 128), 65536, false, true, itt),
                       i % 2 ? a : b)) {
        return;
      }
      Pdu r;
      if (writer.Recv(&r) != RecvStatus::kOk) return;
    }
  });
  int reads = 0;
  int bad_digests = 0;
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < until && !HasFailure()) {
    std::vector<uint8_t> data;
    for (const Pdu& p : Read(reader, 0, 512, 256 * 1024, &data)) {
      if (!p.data_digest_ok) ++bad_digests;
    }
    ++reads;
  }
  stop = true;
  w.join();
  EXPECT_GT(reads, 20);
  EXPECT_EQ(bad_digests, 0) << "of " << reads << " reads";
}

// ---------------------------------------------------------------------------------------------
// Aborts and reinstatement wait for store I/O in flight (SAM-5 5.6, RFC 7143 6.3.5, 11.6)

// What each test guards is an order: once the response is sent, none of the writes it ends may
// still land. The store holds every write kDelay but answers reads at once, so an observer session
// reading the written blocks right after the response sees the store as it is then, and reading
// them again after kDelay must find the same bytes. A target that answers before the write left the
// store (at once, or after a grace period shorter than kDelay) fails the second comparison. A slow
// test thread can only hide such a target, never fail a sound one. Each test also reads the clock
// before it sends the write, so "answered kDelay after `sent` at the earliest" holds however slowly
// either side is scheduled.
class SlowStoreTest : public ConnectionTest {
 protected:
  static constexpr auto kDelay = 400ms;
  static constexpr uint16_t kWriteBlocks = 8;
  void SetUp() override {
    backing::FaultSpec slow;
    slow.delay = kDelay;  // every write and flush starts 400 ms late: aborts catch them in flight
    slow.reads = false;   // reads see the store at once: the observer's view
    StartDataplane(GatewayOptions{}, 1, slow);
  }
  // Another I_T nexus (its own ISID), which only reads the blocks the tests write.
  void LoginObserver(TestInitiator& observer) {
    observer.isid[5] = 9;
    LoginNormal(observer, SessionKeys({{"InitiatorName", kInitiator2}}));
  }
  // The written blocks as the store holds them now; a unit attention (a reset's) is read past.
  std::vector<uint8_t> Snapshot(TestInitiator& observer) {
    std::vector<uint8_t> data;
    for (int attempt = 0; attempt < 3; ++attempt) {
      const auto pdus = Read(observer, 0, kWriteBlocks, kWriteBlocks * kBlock, &data);
      const bool checked = !pdus.empty() && pdus.back().opcode() == Opcode::kScsiResponse &&
                           pdus.back().scsi_status() == 0x02;
      if (!checked) return data;
    }
    ADD_FAILURE() << "the observer's READ kept answering CHECK CONDITION";
    return data;
  }
  // Call as soon as the response that ends the writes has arrived.
  void ExpectNoWriteLandsAfterTheResponse(TestInitiator& observer) {
    const std::vector<uint8_t> at_response = Snapshot(observer);
    std::this_thread::sleep_for(kDelay + 200ms);
    EXPECT_EQ(Snapshot(observer), at_response) << "a write landed after the response that ended it";
  }
  void SendWrite(TestInitiator& ini, uint32_t itt, uint8_t seed) {
    ASSERT_TRUE(ini.Send(
        ini.ScsiCommand(Write10Cdb(0, kWriteBlocks), kWriteBlocks * kBlock, false, true, itt),
        Pattern(kWriteBlocks * kBlock, seed)));
  }
  static std::chrono::milliseconds Since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t);
  }
};

// Regression: the TMF response was queued at once, while the aborted write's store I/O could still
// land afterwards, over data the initiator wrote after being told the task was gone.
TEST_F(SlowStoreTest, AbortTaskIsAnsweredOnlyOnceTheAbortedWriteLeftTheStore) {
  TestInitiator ini, observer;
  LoginNormal(ini);
  LoginObserver(observer);
  const uint32_t write_sn = ini.cmd_sn;
  const uint32_t witt = ini.NextItt();
  const auto sent = std::chrono::steady_clock::now();
  SendWrite(ini, witt, 7);
  const uint32_t titt = ini.NextItt();
  ASSERT_TRUE(ini.Send(ini.TaskMgmt(1, titt, witt, write_sn)));
  const Pdu r = Expect(ini, Opcode::kTaskMgmtResponse, 5s);
  const auto answered = Since(sent);
  ExpectNoWriteLandsAfterTheResponse(observer);
  EXPECT_EQ(r.itt(), titt);
  EXPECT_EQ(r.response(), 0);
  EXPECT_GE(answered, kDelay) << "answered before the write's store I/O ended";
  EXPECT_TRUE(ini.Quiet(200ms)) << "a response for the aborted write";
}

TEST_F(SlowStoreTest, LunResetFromAnotherSessionWaitsForItsWrites) {
  TestInitiator a, b, observer;
  LoginTwo(a, b);
  LoginObserver(observer);
  const auto sent = std::chrono::steady_clock::now();
  SendWrite(a, a.NextItt(), 9);
  // A TUR behind the write on a's connection: once it is answered the write is in the store.
  EXPECT_EQ(Command(a, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
  ASSERT_TRUE(b.Send(b.TaskMgmt(5, b.NextItt(), pdu::kReservedTag, b.cmd_sn)));
  const Pdu r = Expect(b, Opcode::kTaskMgmtResponse, 5s);
  const auto answered = Since(sent);
  ExpectNoWriteLandsAfterTheResponse(observer);
  EXPECT_EQ(r.response(), 0);
  EXPECT_GE(answered, kDelay) << "answered before a's write left the store";
  EXPECT_TRUE(a.Quiet(200ms)) << "a response for the write the reset aborted";
  const Pdu t = Command(a, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(test::ParseSense(t), (Sense{0x6, 0x29, 0x03}));
}

// SAM-5 7.4: CLEAR TASK SET ends the tasks of every I_T nexus (one task set, TST=000b), is answered
// once they have left the store, and each other nexus that lost one is told (TAS=0).
TEST_F(SlowStoreTest, ClearTaskSetEndsEveryNexussWritesAndTellsThem) {
  TestInitiator a, b, observer;
  LoginTwo(a, b);
  LoginObserver(observer);
  SendWrite(a, a.NextItt(), 13);
  EXPECT_EQ(Command(a, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);  // in the store
  ASSERT_TRUE(b.Send(b.TaskMgmt(4, b.NextItt(), pdu::kReservedTag, b.cmd_sn)));
  const Pdu r = Expect(b, Opcode::kTaskMgmtResponse, 5s);
  ExpectNoWriteLandsAfterTheResponse(observer);
  EXPECT_EQ(r.response(), 0);
  EXPECT_TRUE(a.Quiet(200ms)) << "a response for the write CLEAR TASK SET aborted";
  EXPECT_EQ(test::ParseSense(Command(a, TestUnitReadyCdb(), 0, false, false)),
            (Sense{0x6, 0x2F, 0x00}));  // COMMANDS CLEARED BY ANOTHER INITIATOR
  EXPECT_EQ(Command(b, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);  // the issuer's
}

// SAM-5 7.2: ABORT TASK SET ends the tasks of its own I_T nexus only.
TEST_F(SlowStoreTest, AbortTaskSetLeavesAnotherNexussWrite) {
  TestInitiator a, b;
  LoginTwo(a, b);
  const uint32_t witt = a.NextItt();
  SendWrite(a, witt, 14);
  EXPECT_EQ(Command(a, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);  // in the store
  ASSERT_TRUE(b.Send(b.TaskMgmt(2, b.NextItt(), pdu::kReservedTag, b.cmd_sn)));
  EXPECT_EQ(Expect(b, Opcode::kTaskMgmtResponse, 5s).response(), 0);
  const Pdu w = Expect(a, Opcode::kScsiResponse, 5s);
  EXPECT_EQ(w.itt(), witt);
  EXPECT_EQ(w.scsi_status(), 0) << "ABORT TASK SET ended a task of another I_T nexus";
}

// Regression: a login reinstating a session (same initiator name and ISID) completed while the old
// session's writes were still running, so an old write could land after the initiator's retry.
TEST_F(SlowStoreTest, ReinstatementAnswersTheLoginOnlyAfterTheOldSessionsWrites) {
  TestInitiator old_conn, observer;
  LoginNormal(old_conn);
  LoginObserver(observer);
  const auto sent = std::chrono::steady_clock::now();
  SendWrite(old_conn, old_conn.NextItt(), 11);
  EXPECT_EQ(Command(old_conn, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
  TestInitiator fresh;  // same initiator name and ISID
  ASSERT_TRUE(fresh.Connect(portal_));
  auto login = fresh.Login(SessionKeys());
  ASSERT_TRUE(login.has_value());
  const auto answered = Since(sent);
  ExpectNoWriteLandsAfterTheResponse(observer);
  EXPECT_EQ(login->login_status(), 0);
  EXPECT_GE(answered, kDelay) << "login answered while the old write ran";
  std::vector<Pdu> before_close;
  EXPECT_TRUE(old_conn.WaitClosed(5s, &before_close));
  for (const Pdu& p : before_close) {
    EXPECT_NE(p.opcode(), Opcode::kScsiResponse) << "the old session's write was answered";
  }
  // The new session works: the write it retries lands and reads back.
  const Pdu ua = Command(fresh, TestUnitReadyCdb(), 0, false, false);
  EXPECT_EQ(ua.scsi_status(), 0x02);
  WriteImmediate(fresh, 0, Pattern(4096, 12));
  EXPECT_EQ(ReadBack(fresh, 0, 4096), Pattern(4096, 12));
}

// RFC 7143 11.9.1: an Async Message is a full feature phase PDU. A session kill (RequestLogout)
// reaching a reinstating session while its login response waits for the old session's writes
// sent the Async Message first, and the initiator got it where it awaited the login response.
TEST_F(SlowStoreTest, ALogoutRequestedDuringAHeldReinstatementFollowsTheLoginResponse) {
  TestInitiator old_conn, fresh;
  LoginNormal(old_conn);
  SendWrite(old_conn, old_conn.NextItt(), 15);
  EXPECT_EQ(Command(old_conn, TestUnitReadyCdb(), 0, false, false).scsi_status(), 0);
  ASSERT_TRUE(fresh.Connect(portal_));  // same initiator name and ISID
  auto login = std::async(std::launch::async, [&] { return fresh.Login(SessionKeys()); });
  // The new session is listed while its login response is held.
  uint16_t tsih = 0;
  const auto until = std::chrono::steady_clock::now() + kDelay;
  while (tsih == 0 && std::chrono::steady_clock::now() < until) {
    for (const auto& s : dp_->ListSessions()) {
      if (s.tsih != old_conn.tsih) tsih = s.tsih;
    }
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(tsih, 0) << "the reinstating session was not listed while its login was held";
  ASSERT_TRUE(dp_->RequestLogout(tsih, std::chrono::seconds(5)));
  const std::optional<Pdu> r = login.get();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->opcode(), Opcode::kLoginResponse) << "a PDU came before the login response";
  EXPECT_EQ(r->login_status(), 0);
  const Pdu a = Expect(fresh, Opcode::kAsyncMessage, 5s);
  EXPECT_EQ(a.bhs[36], 1);  // the logout request, once the initiator is in full feature phase
}

// RFC 7143 11.14 / SAM-5: after the Logout Response none of the session's writes may still land.
TEST_F(SlowStoreTest, LogoutIsAnsweredOnlyAfterTheSessionsWrites) {
  TestInitiator ini, observer;
  LoginNormal(ini);
  LoginObserver(observer);
  const auto sent = std::chrono::steady_clock::now();
  SendWrite(ini, ini.NextItt(), 13);
  ASSERT_TRUE(ini.Send(ini.Logout(0, ini.NextItt())));
  const Pdu r = Expect(ini, Opcode::kLogoutResponse, 5s);
  const auto answered = Since(sent);
  ExpectNoWriteLandsAfterTheResponse(observer);
  EXPECT_EQ(r.response(), 0);
  EXPECT_GE(answered, kDelay);
}

}  // namespace connection_test
}  // namespace iscsigw::iscsi
