#include "dataplane/iscsi/negotiation.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/iscsi/login_status.h"

namespace iscsigw::iscsi {
namespace negotiation_test {

using pdu::KeyValue;
using KVs = std::vector<KeyValue>;

constexpr char kInitiator[] = "iqn.1994-05.com.redhat:client";
constexpr char kTarget[] = "iqn.2026-11.io.iscsigw:demo";

KVs FirstSecurityRequest(const char* session_type = "Normal") {
  KVs kvs = {{"InitiatorName", kInitiator}, {"SessionType", session_type}};
  if (std::string(session_type) == "Normal") kvs.push_back({"TargetName", kTarget});
  kvs.push_back({"AuthMethod", "None"});
  return kvs;
}

// A negotiator past the security stage of a Normal (or Discovery) session.
class NegotiatorTest : public testing::Test {
 protected:
  void StartSession(const char* session_type = "Normal") {
    KVs out;
    ASSERT_EQ(neg_.Process(FirstSecurityRequest(session_type), Stage::kSecurity, &out),
              LoginStatus::kSuccess)
        << neg_.error();
    ASSERT_EQ(out, (KVs{{"AuthMethod", "None"}}));
  }
  LoginStatus Operational(const KVs& in) {
    out_.clear();
    return neg_.Process(in, Stage::kOperational, &out_);
  }

  TargetLimits limits_;
  Negotiator neg_{limits_, ""};
  KVs out_;
};

// One row per key of RFC 7143 section 13: the initiator's offer, the target's answer (nullopt:
// none, for declarations) and the resulting parameter.
struct KeyRow {
  const char* name;
  const char* key;
  const char* offer;
  std::optional<std::string> answer;
  std::function<void(const SessionParams&)> check;
};

class NegotiatorKeyTest : public NegotiatorTest, public testing::WithParamInterface<KeyRow> {};

TEST_P(NegotiatorKeyTest, AnswersPerRfc7143Section13) {
  const KeyRow& row = GetParam();
  StartSession();
  ASSERT_EQ(Operational({{row.key, row.offer}}), LoginStatus::kSuccess) << neg_.error();
  if (row.answer) {
    EXPECT_EQ(out_, (KVs{{row.key, *row.answer}}));
  } else {
    EXPECT_TRUE(out_.empty());
  }
  if (row.check) row.check(neg_.params());
}

const SessionParams kDefaults{};

INSTANTIATE_TEST_SUITE_P(
    Keys, NegotiatorKeyTest,
    testing::Values(
        // 13.1 digests: first of the initiator's list that the target supports.
        KeyRow{"HeaderDigestCrcFirst", "HeaderDigest", "CRC32C,None", "CRC32C",
               [](const SessionParams& p) { EXPECT_TRUE(p.header_digest); }},
        KeyRow{"HeaderDigestNoneFirst", "HeaderDigest", "None,CRC32C", "None",
               [](const SessionParams& p) { EXPECT_FALSE(p.header_digest); }},
        KeyRow{"HeaderDigestUnknownSkipped", "HeaderDigest", "X-md5,CRC32C", "CRC32C",
               [](const SessionParams& p) { EXPECT_TRUE(p.header_digest); }},
        KeyRow{"HeaderDigestNoneSupported", "HeaderDigest", "X-md5", "Reject",
               [](const SessionParams& p) { EXPECT_FALSE(p.header_digest); }},
        KeyRow{"DataDigestCrc", "DataDigest", "CRC32C", "CRC32C",
               [](const SessionParams& p) { EXPECT_TRUE(p.data_digest); }},
        KeyRow{"DataDigestEmptyElement", "DataDigest", "CRC32C,,None", "Reject",
               [](const SessionParams& p) { EXPECT_FALSE(p.data_digest); }},
        // 13.2 MaxConnections: Minimum, 1..65535.
        KeyRow{"MaxConnectionsMin", "MaxConnections", "8", "1",
               [](const SessionParams& p) { EXPECT_EQ(p.max_connections, 1u); }},
        KeyRow{"MaxConnectionsZero", "MaxConnections", "0", "Reject", nullptr},
        KeyRow{"MaxConnectionsTooBig", "MaxConnections", "65536", "Reject", nullptr},
        // 13.10 InitialR2T: OR with the target's No.
        KeyRow{"InitialR2TNo", "InitialR2T", "No", "No",
               [](const SessionParams& p) { EXPECT_FALSE(p.initial_r2t); }},
        KeyRow{"InitialR2TYes", "InitialR2T", "Yes", "Yes",
               [](const SessionParams& p) { EXPECT_TRUE(p.initial_r2t); }},
        KeyRow{"InitialR2TLowercase", "InitialR2T", "no", "Reject",
               [](const SessionParams& p) { EXPECT_TRUE(p.initial_r2t); }},
        // 13.11 ImmediateData: AND with the target's Yes.
        KeyRow{"ImmediateDataYes", "ImmediateData", "Yes", "Yes",
               [](const SessionParams& p) { EXPECT_TRUE(p.immediate_data); }},
        KeyRow{"ImmediateDataNo", "ImmediateData", "No", "No",
               [](const SessionParams& p) { EXPECT_FALSE(p.immediate_data); }},
        // 13.12 MaxRecvDataSegmentLength: declarative, never echoed.
        KeyRow{"MaxRecvDataSegmentLength", "MaxRecvDataSegmentLength", "65536", std::nullopt,
               [](const SessionParams& p) {
                 EXPECT_EQ(p.initiator_max_recv_data_segment_length, 65536u);
               }},
        KeyRow{"MaxRecvDataSegmentLengthHex", "MaxRecvDataSegmentLength", "0x2000", std::nullopt,
               [](const SessionParams& p) {
                 EXPECT_EQ(p.initiator_max_recv_data_segment_length, 8192u);
               }},
        // 13.13 MaxBurstLength: Minimum, 512..2^24-1.
        KeyRow{"MaxBurstLength", "MaxBurstLength", "262144", "262144",
               [](const SessionParams& p) { EXPECT_EQ(p.max_burst_length, 262144u); }},
        KeyRow{"MaxBurstLengthHex", "MaxBurstLength", "0x10000", "65536",
               [](const SessionParams& p) { EXPECT_EQ(p.max_burst_length, 65536u); }},
        KeyRow{"MaxBurstLengthUpperBound", "MaxBurstLength", "0XFFFFFF", "16777215",
               [](const SessionParams& p) { EXPECT_EQ(p.max_burst_length, 16777215u); }},
        KeyRow{"MaxBurstLengthAboveRange", "MaxBurstLength", "16777216", "Reject",
               [](const SessionParams& p) {
                 EXPECT_EQ(p.max_burst_length, kDefaults.max_burst_length);
               }},
        KeyRow{"MaxBurstLengthBelowRange", "MaxBurstLength", "511", "Reject",
               [](const SessionParams& p) {
                 EXPECT_EQ(p.max_burst_length, kDefaults.max_burst_length);
               }},
        KeyRow{"MaxBurstLengthGarbage", "MaxBurstLength", "12abc", "Reject", nullptr},
        KeyRow{"MaxBurstLengthNegative", "MaxBurstLength", "-1", "Reject", nullptr},
        KeyRow{"MaxBurstLengthEmpty", "MaxBurstLength", "", "Reject", nullptr},
        KeyRow{"MaxBurstLengthBareHexPrefix", "MaxBurstLength", "0x", "Reject", nullptr},
        KeyRow{"MaxBurstLengthOver32Bits", "MaxBurstLength", "99999999999", "Reject", nullptr},
        // 13.14 FirstBurstLength: Minimum with the target's 262144.
        KeyRow{"FirstBurstLength", "FirstBurstLength", "65536", "65536",
               [](const SessionParams& p) { EXPECT_EQ(p.first_burst_length, 65536u); }},
        KeyRow{"FirstBurstLengthAboveLimit", "FirstBurstLength", "1048576", "262144",
               [](const SessionParams& p) { EXPECT_EQ(p.first_burst_length, 262144u); }},
        KeyRow{"FirstBurstLengthBelowRange", "FirstBurstLength", "100", "Reject", nullptr},
        // 13.15 DefaultTime2Wait: Maximum with the target's 2, 0..3600.
        KeyRow{"DefaultTime2WaitLower", "DefaultTime2Wait", "0", "2",
               [](const SessionParams& p) { EXPECT_EQ(p.default_time2wait, 2u); }},
        KeyRow{"DefaultTime2WaitHigher", "DefaultTime2Wait", "0X3", "3",
               [](const SessionParams& p) { EXPECT_EQ(p.default_time2wait, 3u); }},
        KeyRow{"DefaultTime2WaitTooBig", "DefaultTime2Wait", "3601", "Reject", nullptr},
        // 13.16 DefaultTime2Retain: Minimum with the target's 0.
        KeyRow{"DefaultTime2Retain", "DefaultTime2Retain", "20", "0",
               [](const SessionParams& p) { EXPECT_EQ(p.default_time2retain, 0u); }},
        KeyRow{"DefaultTime2RetainTooBig", "DefaultTime2Retain", "3601", "Reject",
               [](const SessionParams& p) { EXPECT_EQ(p.default_time2retain, 20u); }},
        // 13.17 MaxOutstandingR2T: Minimum with the target's 16, 1..65535.
        KeyRow{"MaxOutstandingR2T", "MaxOutstandingR2T", "1", "1",
               [](const SessionParams& p) { EXPECT_EQ(p.max_outstanding_r2t, 1u); }},
        KeyRow{"MaxOutstandingR2TAboveLimit", "MaxOutstandingR2T", "64", "16",
               [](const SessionParams& p) { EXPECT_EQ(p.max_outstanding_r2t, 16u); }},
        KeyRow{"MaxOutstandingR2TZero", "MaxOutstandingR2T", "0", "Reject", nullptr},
        // 13.18, 13.19: OR with the target's Yes.
        KeyRow{"DataPDUInOrder", "DataPDUInOrder", "No", "Yes",
               [](const SessionParams& p) { EXPECT_TRUE(p.data_pdu_in_order); }},
        KeyRow{"DataSequenceInOrder", "DataSequenceInOrder", "No", "Yes",
               [](const SessionParams& p) { EXPECT_TRUE(p.data_sequence_in_order); }},
        // 13.20 ErrorRecoveryLevel: Minimum with the target's 0, 0..2.
        KeyRow{"ErrorRecoveryLevel", "ErrorRecoveryLevel", "2", "0",
               [](const SessionParams& p) { EXPECT_EQ(p.error_recovery_level, 0u); }},
        KeyRow{"ErrorRecoveryLevelTooBig", "ErrorRecoveryLevel", "3", "Reject", nullptr},
        // 13.23 TaskReporting: only RFC3720.
        KeyRow{"TaskReporting", "TaskReporting", "ResponseFence,RFC3720", "RFC3720", nullptr},
        KeyRow{"TaskReportingWithoutRfc3720", "TaskReporting", "FastAbort", "Reject", nullptr},
        // 13.25 obsolete markers: No (never NotUnderstood); MarkInt keys: Reject.
        KeyRow{"IFMarker", "IFMarker", "No", "No", nullptr},
        KeyRow{"OFMarkerYes", "OFMarker", "Yes", "No", nullptr},
        KeyRow{"IFMarkInt", "IFMarkInt", "2048~8192", "Reject", nullptr},
        KeyRow{"OFMarkInt", "OFMarkInt", "2048", "Reject", nullptr},
        // 6.2: keys not understood.
        KeyRow{"VendorKey", "X-com.example.Feature", "Yes", "NotUnderstood", nullptr},
        KeyRow{"PublicExtensionKey", "X#com.example", "1", "NotUnderstood", nullptr},
        KeyRow{"NodeArchitectureIsDeclarative", "X#NodeArchitecture", "ExampleOS/v1", std::nullopt,
               nullptr},
        KeyRow{"UnknownKey", "FrobnicationLevel", "3", "NotUnderstood", nullptr},
        KeyRow{"RdmaExtensions", "RDMAExtensions", "No", "NotUnderstood", nullptr},
        // 6.2: a reserved constant is an answer, not an offer; nothing to answer.
        KeyRow{"ReservedValueNotAnswered", "MaxBurstLength", "Reject", std::nullopt,
               [](const SessionParams& p) {
                 EXPECT_EQ(p.max_burst_length, kDefaults.max_burst_length);
               }}),
    [](const testing::TestParamInfo<KeyRow>& p) { return p.param.name; });

TEST(NegotiatorProtocolLevel, AnswersMinimumWithLevelOne) {
  // RFC 7143 13.24 / RFC 7144: Minimum, this target implements level 1.
  for (const auto& [offer, answer] :
       std::vector<std::pair<std::string, std::string>>{{"2", "1"}, {"0", "0"}, {"32", "Reject"}}) {
    Negotiator neg(TargetLimits{}, "");
    KVs out;
    ASSERT_EQ(neg.Process(FirstSecurityRequest(), Stage::kSecurity, &out), LoginStatus::kSuccess);
    out.clear();
    ASSERT_EQ(neg.Process({{"iSCSIProtocolLevel", offer}}, Stage::kOperational, &out),
              LoginStatus::kSuccess);
    EXPECT_EQ(out, (KVs{{"iSCSIProtocolLevel", answer}})) << offer;
    EXPECT_EQ(neg.protocol_level(), answer == "0" ? 0u : 1u);
  }
}

TEST_F(NegotiatorTest, DigestsRespectTargetLimits) {
  limits_.allow_header_digest = false;
  limits_.allow_data_digest = false;
  Negotiator neg(limits_, "");
  KVs out;
  ASSERT_EQ(neg.Process(FirstSecurityRequest(), Stage::kSecurity, &out), LoginStatus::kSuccess);
  out.clear();
  ASSERT_EQ(neg.Process({{"HeaderDigest", "CRC32C,None"}, {"DataDigest", "CRC32C"}},
                        Stage::kOperational, &out),
            LoginStatus::kSuccess);
  EXPECT_EQ(out, (KVs{{"HeaderDigest", "None"}, {"DataDigest", "Reject"}}));
  EXPECT_FALSE(neg.params().header_digest);
  EXPECT_FALSE(neg.params().data_digest);
}

TEST_F(NegotiatorTest, BooleanResultsFollowTargetPolicy) {
  limits_.require_initial_r2t = true;
  limits_.allow_immediate_data = false;
  Negotiator neg(limits_, "");
  KVs out;
  ASSERT_EQ(neg.Process(FirstSecurityRequest(), Stage::kSecurity, &out), LoginStatus::kSuccess);
  out.clear();
  ASSERT_EQ(
      neg.Process({{"InitialR2T", "No"}, {"ImmediateData", "Yes"}}, Stage::kOperational, &out),
      LoginStatus::kSuccess);
  EXPECT_EQ(out, (KVs{{"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  EXPECT_TRUE(neg.params().initial_r2t);
  EXPECT_FALSE(neg.params().immediate_data);
}

TEST_F(NegotiatorTest, LinuxOpenIscsiLogin) {
  // The keys open-iscsi sends, in its order; every offered key is answered exactly once.
  StartSession();
  ASSERT_EQ(Operational({{"HeaderDigest", "None"},
                         {"DataDigest", "None"},
                         {"DefaultTime2Wait", "2"},
                         {"DefaultTime2Retain", "0"},
                         {"IFMarker", "No"},
                         {"OFMarker", "No"},
                         {"ErrorRecoveryLevel", "0"},
                         {"InitialR2T", "No"},
                         {"ImmediateData", "Yes"},
                         {"MaxBurstLength", "16776192"},
                         {"FirstBurstLength", "262144"},
                         {"MaxOutstandingR2T", "1"},
                         {"MaxConnections", "1"},
                         {"DataPDUInOrder", "Yes"},
                         {"DataSequenceInOrder", "Yes"},
                         {"MaxRecvDataSegmentLength", "262144"}}),
            LoginStatus::kSuccess)
      << neg_.error();
  neg_.AppendTargetDeclarations(Stage::kOperational, 1, &out_);
  EXPECT_EQ(out_, (KVs{{"HeaderDigest", "None"},
                       {"DataDigest", "None"},
                       {"DefaultTime2Wait", "2"},
                       {"DefaultTime2Retain", "0"},
                       {"IFMarker", "No"},
                       {"OFMarker", "No"},
                       {"ErrorRecoveryLevel", "0"},
                       {"InitialR2T", "No"},
                       {"ImmediateData", "Yes"},
                       {"MaxBurstLength", "16776192"},
                       {"FirstBurstLength", "262144"},
                       {"MaxOutstandingR2T", "1"},
                       {"MaxConnections", "1"},
                       {"DataPDUInOrder", "Yes"},
                       {"DataSequenceInOrder", "Yes"},
                       {"TargetPortalGroupTag", "1"},
                       {"MaxRecvDataSegmentLength", "262144"}}));
  ASSERT_EQ(neg_.Finish(), LoginStatus::kSuccess) << neg_.error();
  const SessionParams& p = neg_.params();
  EXPECT_EQ(p.session_type, SessionType::kNormal);
  EXPECT_EQ(p.initiator_name, kInitiator);
  EXPECT_EQ(p.target_name, kTarget);
  EXPECT_FALSE(p.initial_r2t);
  EXPECT_TRUE(p.immediate_data);
  EXPECT_EQ(p.max_burst_length, 16776192u);
  EXPECT_EQ(p.first_burst_length, 262144u);
  EXPECT_EQ(p.initiator_max_recv_data_segment_length, 262144u);
  EXPECT_EQ(p.target_max_recv_data_segment_length, 262144u);
  EXPECT_EQ(p.default_time2retain, 0u);
  EXPECT_TRUE(neg_.target_name_given());
}

TEST_F(NegotiatorTest, FirstRequestNeedsInitiatorName) {
  KVs out;
  EXPECT_EQ(
      neg_.Process({{"SessionType", "Discovery"}, {"AuthMethod", "None"}}, Stage::kSecurity, &out),
      LoginStatus::kMissingParameter);
  EXPECT_NE(neg_.error().find("InitiatorName"), std::string::npos);
}

TEST_F(NegotiatorTest, NormalSessionNeedsTargetName) {
  KVs out;
  EXPECT_EQ(
      neg_.Process({{"InitiatorName", kInitiator}, {"AuthMethod", "None"}}, Stage::kSecurity, &out),
      LoginStatus::kMissingParameter);
  EXPECT_FALSE(neg_.target_name_given());
  EXPECT_EQ(neg_.params().session_type, SessionType::kNormal);  // 13.21 default
}

TEST_F(NegotiatorTest, DiscoverySessionNeedsNoTargetName) {
  StartSession("Discovery");
  EXPECT_EQ(neg_.params().session_type, SessionType::kDiscovery);
  EXPECT_FALSE(neg_.target_name_given());
  EXPECT_EQ(neg_.Finish(), LoginStatus::kSuccess);
}

TEST_F(NegotiatorTest, UnknownSessionTypeIsNotSupported) {
  KVs out;
  EXPECT_EQ(neg_.Process({{"InitiatorName", kInitiator}, {"SessionType", "Bogus"}},
                         Stage::kSecurity, &out),
            LoginStatus::kSessionTypeNotSupported);
}

TEST_F(NegotiatorTest, SessionTypeAfterFirstRequestIsAnError) {
  StartSession();
  EXPECT_EQ(Operational({{"SessionType", "Discovery"}}), LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, DiscoverySessionAnswersIrrelevant) {
  // RFC 7143 13: "Irrelevant when: SessionType=Discovery".
  StartSession("Discovery");
  ASSERT_EQ(Operational({{"MaxConnections", "1"},
                         {"InitialR2T", "Yes"},
                         {"ImmediateData", "No"},
                         {"MaxBurstLength", "262144"},
                         {"FirstBurstLength", "65536"},
                         {"MaxOutstandingR2T", "1"},
                         {"DataPDUInOrder", "Yes"},
                         {"DataSequenceInOrder", "Yes"},
                         {"TaskReporting", "RFC3720"},
                         {"iSCSIProtocolLevel", "1"},
                         {"HeaderDigest", "None"},
                         {"ErrorRecoveryLevel", "0"},
                         {"DefaultTime2Wait", "2"},
                         {"MaxRecvDataSegmentLength", "32768"}}),
            LoginStatus::kSuccess)
      << neg_.error();
  neg_.AppendTargetDeclarations(Stage::kOperational, 1, &out_);
  EXPECT_EQ(out_, (KVs{{"MaxConnections", "Irrelevant"},
                       {"InitialR2T", "Irrelevant"},
                       {"ImmediateData", "Irrelevant"},
                       {"MaxBurstLength", "Irrelevant"},
                       {"FirstBurstLength", "Irrelevant"},
                       {"MaxOutstandingR2T", "Irrelevant"},
                       {"DataPDUInOrder", "Irrelevant"},
                       {"DataSequenceInOrder", "Irrelevant"},
                       {"TaskReporting", "Irrelevant"},
                       {"iSCSIProtocolLevel", "Irrelevant"},
                       {"HeaderDigest", "None"},
                       {"ErrorRecoveryLevel", "0"},
                       {"DefaultTime2Wait", "2"},
                       {"MaxRecvDataSegmentLength", "262144"}}));
  EXPECT_EQ(neg_.params().initiator_max_recv_data_segment_length, 32768u);
  EXPECT_EQ(neg_.params().max_burst_length, SessionParams{}.max_burst_length);
  EXPECT_EQ(neg_.Finish(), LoginStatus::kSuccess);
}

TEST_F(NegotiatorTest, SessionTypeIsReadBeforeOtherKeysOfTheFirstRequest) {
  // An initiator that skips the security stage may put SessionType after operational keys.
  KVs out;
  ASSERT_EQ(neg_.Process({{"InitiatorName", kInitiator},
                          {"MaxBurstLength", "65536"},
                          {"SessionType", "Discovery"}},
                         Stage::kOperational, &out),
            LoginStatus::kSuccess);
  EXPECT_EQ(out, (KVs{{"MaxBurstLength", "Irrelevant"}}));
}

TEST_F(NegotiatorTest, KeyOfferedTwiceInOneLoginIsAProtocolError) {
  // RFC 7143 6.2: renegotiation during login -> Login reject, initiator error.
  StartSession();
  ASSERT_EQ(Operational({{"MaxBurstLength", "65536"}}), LoginStatus::kSuccess);
  EXPECT_EQ(Operational({{"MaxBurstLength", "65536"}}), LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, KeyRepeatedWithinOneRequestIsAProtocolError) {
  StartSession();
  EXPECT_EQ(Operational({{"HeaderDigest", "None"}, {"HeaderDigest", "None"}}),
            LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, InitiatorNameCannotBeRedeclared) {
  StartSession();
  EXPECT_EQ(Operational({{"InitiatorName", "iqn.2000-01.com.other:x"}}),
            LoginStatus::kInitiatorError);
  EXPECT_EQ(neg_.params().initiator_name, kInitiator);
}

TEST_F(NegotiatorTest, MalformedDeclarationRejectsLogin) {
  // A declaration cannot be answered with Reject (RFC 7143 13.12 range 512..2^24-1).
  StartSession();
  EXPECT_EQ(Operational({{"MaxRecvDataSegmentLength", "511"}}), LoginStatus::kInitiatorError);
  Negotiator neg(limits_, "");
  KVs out;
  ASSERT_EQ(neg.Process(FirstSecurityRequest(), Stage::kSecurity, &out), LoginStatus::kSuccess);
  EXPECT_EQ(neg.Process({{"MaxRecvDataSegmentLength", "0x1000000"}}, Stage::kOperational, &out),
            LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, EmptyInitiatorNameRejectsLogin) {
  KVs out;
  EXPECT_EQ(neg_.Process({{"InitiatorName", ""}}, Stage::kSecurity, &out),
            LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, TargetOnlyKeysFromInitiatorAreProtocolErrors) {
  for (const char* key : {"TargetAlias", "TargetAddress", "TargetPortalGroupTag"}) {
    Negotiator neg(limits_, "");
    KVs out;
    ASSERT_EQ(neg.Process(FirstSecurityRequest(), Stage::kSecurity, &out), LoginStatus::kSuccess);
    EXPECT_EQ(neg.Process({{key, "1"}}, Stage::kOperational, &out), LoginStatus::kInitiatorError)
        << key;
  }
}

TEST_F(NegotiatorTest, SendTargetsDuringLoginIsAProtocolError) {
  StartSession("Discovery");
  EXPECT_EQ(Operational({{"SendTargets", "All"}}), LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, OperationalKeyInSecurityStageIsAProtocolError) {
  KVs in = FirstSecurityRequest();
  in.push_back({"MaxBurstLength", "65536"});
  KVs out;
  EXPECT_EQ(neg_.Process(in, Stage::kSecurity, &out), LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, AuthMethodInOperationalStageIsAProtocolError) {
  StartSession();
  Negotiator neg(limits_, "");
  KVs out;
  EXPECT_EQ(
      neg.Process({{"InitiatorName", kInitiator}, {"TargetName", kTarget}, {"AuthMethod", "None"}},
                  Stage::kOperational, &out),
      LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, FullFeatureStageIsNotALoginStage) {
  KVs out;
  EXPECT_EQ(neg_.Process(FirstSecurityRequest(), Stage::kFullFeature, &out),
            LoginStatus::kInitiatorError);
}

TEST(NegotiatorAuth, AnswersFirstOfInitiatorListThatTargetAccepts) {
  struct Row {
    std::vector<std::string> ours;
    std::string offer;
    std::string answer;
  };
  for (const Row& row : std::vector<Row>{{{"None"}, "CHAP,None", "None"},
                                         {{"CHAP"}, "None", "Reject"},
                                         {{"None", "CHAP"}, "CHAP,None", "CHAP"},
                                         {{"CHAP"}, "KRB5,SRP,CHAP", "CHAP"},
                                         {{"None"}, ",None", "Reject"}}) {
    Negotiator neg(TargetLimits{}, "");
    neg.SetAuthMethods(row.ours);
    KVs out;
    ASSERT_EQ(
        neg.Process(
            {{"InitiatorName", kInitiator}, {"TargetName", kTarget}, {"AuthMethod", row.offer}},
            Stage::kSecurity, &out),
        LoginStatus::kSuccess);
    EXPECT_EQ(out, (KVs{{"AuthMethod", row.answer}})) << row.offer;
    EXPECT_EQ(neg.auth_method(), row.answer == "Reject" ? "" : row.answer);
  }
}

TEST(NegotiatorAuth, ChapKeysFollowAgreedChapAndProduceNoAnswer) {
  Negotiator neg(TargetLimits{}, "");
  neg.SetAuthMethods({"CHAP"});
  KVs out;
  ASSERT_EQ(
      neg.Process(
          {{"InitiatorName", kInitiator}, {"TargetName", kTarget}, {"AuthMethod", "CHAP,None"}},
          Stage::kSecurity, &out),
      LoginStatus::kSuccess);
  out.clear();
  ASSERT_EQ(neg.Process({{"CHAP_A", "7,6,5"}}, Stage::kSecurity, &out), LoginStatus::kSuccess);
  EXPECT_TRUE(out.empty());
  ASSERT_EQ(neg.Process({{"CHAP_N", "user"}, {"CHAP_R", "0x0102"}}, Stage::kSecurity, &out),
            LoginStatus::kSuccess);
  EXPECT_TRUE(out.empty());
  // The operational stage is not refused here: whether CHAP succeeded is LoginStages' to say.
  EXPECT_EQ(neg.Process({{"HeaderDigest", "None"}}, Stage::kOperational, &out),
            LoginStatus::kSuccess);
  // CHAP keys outside the security stage are protocol errors.
  EXPECT_EQ(neg.Process({{"CHAP_I", "1"}}, Stage::kOperational, &out),
            LoginStatus::kInitiatorError);
}

TEST(NegotiatorAuth, ChapKeysWithoutAuthMethodChapAreProtocolErrors) {
  Negotiator neg(TargetLimits{}, "");
  KVs out;
  EXPECT_EQ(neg.Process({{"InitiatorName", kInitiator},
                         {"TargetName", kTarget},
                         {"AuthMethod", "None"},
                         {"CHAP_A", "5"}},
                        Stage::kSecurity, &out),
            LoginStatus::kInitiatorError);
}

TEST_F(NegotiatorTest, LeadingOnlyKeysOnOtherConnectionsAreProtocolErrors) {
  neg_.SetLeadingConnection(false);
  StartSession();
  EXPECT_EQ(Operational({{"MaxBurstLength", "65536"}}), LoginStatus::kInitiatorError);
  Negotiator neg(limits_, "");
  neg.SetLeadingConnection(false);
  KVs out;
  ASSERT_EQ(neg.Process(FirstSecurityRequest(), Stage::kSecurity, &out), LoginStatus::kSuccess);
  out.clear();
  // Connection-scoped keys (Use IO / ALL) are fine.
  EXPECT_EQ(neg.Process({{"HeaderDigest", "None"}, {"MaxRecvDataSegmentLength", "8192"}},
                        Stage::kOperational, &out),
            LoginStatus::kSuccess);
  EXPECT_EQ(out, (KVs{{"HeaderDigest", "None"}}));
}

TEST_F(NegotiatorTest, FirstBurstLengthIrrelevantWithInitialR2TAndNoImmediateData) {
  // RFC 7143 13.14, even when FirstBurstLength precedes the keys that decide it.
  StartSession();
  ASSERT_EQ(
      Operational({{"FirstBurstLength", "65536"}, {"InitialR2T", "Yes"}, {"ImmediateData", "No"}}),
      LoginStatus::kSuccess);
  EXPECT_EQ(
      out_,
      (KVs{{"FirstBurstLength", "Irrelevant"}, {"InitialR2T", "Yes"}, {"ImmediateData", "No"}}));
  EXPECT_EQ(neg_.Finish(), LoginStatus::kSuccess);
}

TEST_F(NegotiatorTest, FirstBurstLengthAnswerNeverExceedsMaxBurstLength) {
  StartSession();
  ASSERT_EQ(Operational({{"FirstBurstLength", "262144"}, {"MaxBurstLength", "65536"}}),
            LoginStatus::kSuccess);
  EXPECT_EQ(out_, (KVs{{"FirstBurstLength", "65536"}, {"MaxBurstLength", "65536"}}));
  EXPECT_EQ(neg_.Finish(), LoginStatus::kSuccess);
  EXPECT_EQ(neg_.params().first_burst_length, 65536u);
}

TEST_F(NegotiatorTest, FinishRejectsFirstBurstAboveMaxBurst) {
  // Negotiated in separate requests, the integrity rule of 13.14 is checked at the end.
  StartSession();
  ASSERT_EQ(Operational({{"FirstBurstLength", "262144"}}), LoginStatus::kSuccess);
  ASSERT_EQ(Operational({{"MaxBurstLength", "65536"}}), LoginStatus::kSuccess);
  EXPECT_EQ(neg_.Finish(), LoginStatus::kInitiatorError);
  EXPECT_NE(neg_.error().find("FirstBurstLength"), std::string::npos);
}

TEST_F(NegotiatorTest, FinishClampsDefaultFirstBurstToSmallerMaxBurst) {
  StartSession();
  ASSERT_EQ(Operational({{"MaxBurstLength", "16384"}}), LoginStatus::kSuccess);
  EXPECT_EQ(neg_.Finish(), LoginStatus::kSuccess);
  EXPECT_EQ(neg_.params().first_burst_length, 16384u);
  EXPECT_EQ(neg_.params().max_burst_length, 16384u);
}

TEST_F(NegotiatorTest, FinishWithoutRequestFails) {
  EXPECT_EQ(neg_.Finish(), LoginStatus::kMissingParameter);
}

TEST_F(NegotiatorTest, FinishKeepsRfcDefaultsForKeysNeverNegotiated) {
  StartSession();
  ASSERT_EQ(neg_.Finish(), LoginStatus::kSuccess);
  const SessionParams& p = neg_.params();
  EXPECT_TRUE(p.initial_r2t);
  EXPECT_TRUE(p.immediate_data);
  EXPECT_EQ(p.max_burst_length, 262144u);
  EXPECT_EQ(p.first_burst_length, 65536u);
  EXPECT_EQ(p.initiator_max_recv_data_segment_length, 8192u);
  EXPECT_EQ(p.target_max_recv_data_segment_length, 8192u);  // never declared
  EXPECT_EQ(p.default_time2retain, 20u);
  EXPECT_EQ(p.max_outstanding_r2t, 1u);
}

TEST(NegotiatorDeclarations, EachDeclarationOncePerLogin) {
  TargetLimits limits;
  limits.max_recv_data_segment_length = 65536;
  Negotiator neg(limits, "demo");
  KVs out;
  ASSERT_EQ(neg.Process(FirstSecurityRequest(), Stage::kSecurity, &out), LoginStatus::kSuccess);
  out.clear();
  // First response, security stage: TPGT and alias; MaxRecvDataSegmentLength is operational.
  neg.AppendTargetDeclarations(Stage::kSecurity, 7, &out);
  EXPECT_EQ(out, (KVs{{"TargetPortalGroupTag", "7"}, {"TargetAlias", "demo"}}));
  out.clear();
  neg.AppendTargetDeclarations(Stage::kOperational, 7, &out);
  EXPECT_EQ(out, (KVs{{"MaxRecvDataSegmentLength", "65536"}}));
  EXPECT_EQ(neg.params().target_max_recv_data_segment_length, 65536u);
  out.clear();
  neg.AppendTargetDeclarations(Stage::kOperational, 7, &out);
  EXPECT_TRUE(out.empty());
}

TEST(NegotiatorDeclarations, DiscoveryDeclaresOnlyMaxRecvDataSegmentLength) {
  Negotiator neg(TargetLimits{}, "demo");
  KVs out;
  ASSERT_EQ(neg.Process(FirstSecurityRequest("Discovery"), Stage::kSecurity, &out),
            LoginStatus::kSuccess);
  out.clear();
  neg.AppendTargetDeclarations(Stage::kSecurity, 1, &out);
  EXPECT_TRUE(out.empty());
  neg.AppendTargetDeclarations(Stage::kOperational, 1, &out);
  EXPECT_EQ(out, (KVs{{"MaxRecvDataSegmentLength", "262144"}}));
}

TEST(NegotiatorDeclarations, ClampsMisconfiguredLimitIntoRange) {
  TargetLimits limits;
  limits.max_recv_data_segment_length = 100;
  Negotiator neg(limits, "");
  KVs out;
  neg.AppendTargetDeclarations(Stage::kOperational, 1, &out);
  EXPECT_EQ(out, (KVs{{"TargetPortalGroupTag", "1"}, {"MaxRecvDataSegmentLength", "512"}}));
}

TEST_F(NegotiatorTest, FullFeatureTextNegotiation) {
  StartSession();
  ASSERT_EQ(neg_.Finish(), LoginStatus::kSuccess);
  KVs out;
  ASSERT_EQ(neg_.ProcessFullFeature({{"SendTargets", "All"},
                                     {"MaxRecvDataSegmentLength", "0x4000"},
                                     {"MaxBurstLength", "65536"},
                                     {"X-com.example.k", "1"}},
                                    &out),
            LoginStatus::kSuccess)
      << neg_.error();
  // SendTargets is the caller's; MaxRecvDataSegmentLength is declared (Use ALL), not answered;
  // MaxBurstLength is leading-only login negotiation (Use LO): Reject.
  EXPECT_EQ(out, (KVs{{"MaxBurstLength", "Reject"}, {"X-com.example.k", "NotUnderstood"}}));
  EXPECT_EQ(neg_.params().initiator_max_recv_data_segment_length, 16384u);
  EXPECT_EQ(neg_.params().max_burst_length, 262144u);
  // Each text request is a new negotiation: the same key may come again.
  out.clear();
  ASSERT_EQ(neg_.ProcessFullFeature({{"MaxRecvDataSegmentLength", "8192"}}, &out),
            LoginStatus::kSuccess);
  EXPECT_EQ(neg_.params().initiator_max_recv_data_segment_length, 8192u);
}

TEST_F(NegotiatorTest, FullFeatureTextErrors) {
  StartSession();
  KVs out;
  EXPECT_EQ(neg_.ProcessFullFeature({{"MaxRecvDataSegmentLength", "100"}}, &out),
            LoginStatus::kInitiatorError);
  EXPECT_EQ(neg_.ProcessFullFeature({{"X-a", "1"}, {"X-a", "2"}}, &out),
            LoginStatus::kInitiatorError);
}

TEST(LoginStatus, ClassAndDetailBytes) {
  // RFC 7143 11.13.5.
  EXPECT_EQ(LoginStatusClass(LoginStatus::kSuccess), 0);
  EXPECT_EQ(LoginStatusClass(LoginStatus::kTargetMovedTemporarily), 1);
  EXPECT_EQ(LoginStatusClass(LoginStatus::kMissingParameter), 2);
  EXPECT_EQ(LoginStatusDetail(LoginStatus::kMissingParameter), 7);
  EXPECT_EQ(LoginStatusDetail(LoginStatus::kInvalidDuringLogin), 0x0b);
  EXPECT_EQ(LoginStatusClass(LoginStatus::kOutOfResources), 3);
  EXPECT_EQ(LoginStatusDetail(LoginStatus::kOutOfResources), 2);
  EXPECT_EQ(LoginStatusName(LoginStatus::kSessionTypeNotSupported), "SessionTypeNotSupported");
}

}  // namespace negotiation_test
}  // namespace iscsigw::iscsi
