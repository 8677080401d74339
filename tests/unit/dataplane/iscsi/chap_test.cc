#include "dataplane/iscsi/chap.h"

#include <gtest/gtest.h>

#include <numeric>

#include "dataplane/iscsi/gateway.h"

namespace iscsigw::iscsi {
namespace chap_test {

using Outcome = ChapAuthenticator::Outcome;
using KV = std::vector<pdu::KeyValue>;

std::vector<uint8_t> Seq16() {
  std::vector<uint8_t> c(16);
  std::iota(c.begin(), c.end(), 0);
  return c;
}

std::string Value(const KV& kv, const std::string& key) {
  for (const auto& p : kv) {
    if (p.key == key) return p.value;
  }
  return "<missing>";
}

// Reference digests of H(0x07 || "abcdefghijkl" || 00 01 .. 0f), computed independently.
struct Vector {
  ChapAlgorithm a;
  const char* hex;
};
const Vector kVectors[] = {
    {ChapAlgorithm::kMd5, "0xfb9e45ac2c8befdb26ac0bdcbbf7b715"},
    {ChapAlgorithm::kSha1, "0x8f95e6316b51bcfa322453b2dc36d4f23dfc920b"},
    {ChapAlgorithm::kSha256, "0xd34cc0891330e19925af8fb8059b94041c9bcc80835f6ec2537924c712e08643"},
    {ChapAlgorithm::kSha3_256,
     "0xdf0139011fcb81fcb1a2c1143719ebd0b2a84df5d95ab0a83cb77f30b62d7bdb"},
};

TEST(ChapDigest, MatchesReferenceVectorsForEveryAlgorithm) {
  for (const auto& v : kVectors) {
    EXPECT_EQ(EncodeChapHex(ChapResponse(v.a, 7, "abcdefghijkl", Seq16())), v.hex)
        << static_cast<int>(v.a);
  }
  EXPECT_EQ(ChapDigestLength(ChapAlgorithm::kMd5), 16u);
  EXPECT_EQ(ChapDigestLength(ChapAlgorithm::kSha1), 20u);
  EXPECT_EQ(ChapDigestLength(ChapAlgorithm::kSha256), 32u);
  EXPECT_EQ(ChapDigestLength(ChapAlgorithm::kSha3_256), 32u);
}

TEST(ChapBinary, DecodesHexAndBase64) {
  EXPECT_EQ(DecodeChapBinary("0x0aFF"), (std::vector<uint8_t>{0x0a, 0xff}));
  EXPECT_EQ(DecodeChapBinary("0xabc"), (std::vector<uint8_t>{0x0a, 0xbc}));  // implied zero
  EXPECT_EQ(DecodeChapBinary("0bAAEC"), (std::vector<uint8_t>{0x00, 0x01, 0x02}));
  EXPECT_EQ(DecodeChapBinary("0bAAE="), (std::vector<uint8_t>{0x00, 0x01}));
  EXPECT_FALSE(DecodeChapBinary("0x0g"));
  EXPECT_FALSE(DecodeChapBinary("1234"));
  EXPECT_FALSE(DecodeChapBinary("0x"));
  EXPECT_FALSE(DecodeChapBinary("0b!!"));
}

TEST(ChapCredentialsValidation, RefusesShortSecretsAndSharedMutualSecret) {
  EXPECT_TRUE(ValidateChapCredentials({}, "t: ").ok());
  EXPECT_TRUE(ValidateChapCredentials({"u", "123456789012", "", ""}, "t: ").ok());
  Status s = ValidateChapCredentials({"u", "12345678901", "", ""}, "target x: ");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "target x: chap.secret is 11 bytes; RFC 7143 requires at least 12");
  s = ValidateChapCredentials({"u", "123456789012", "t", "123456789012"}, "t: ");
  EXPECT_EQ(s.message(), "t: chap.mutual_secret must differ from chap.secret (RFC 7143 9.2.1)");
  s = ValidateChapCredentials({"u", "123456789012", "t", "short"}, "t: ");
  EXPECT_EQ(s.message(), "t: chap.mutual_secret is 5 bytes; RFC 7143 requires at least 12");
  s = ValidateChapCredentials({"u", "123456789012", "t", ""}, "t: ");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = ValidateChapCredentials({"", "123456789012", "", ""}, "t: ");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = ValidateChapCredentials({"bad\nname", "123456789012", "", ""}, "t: ");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

class ChapExchange : public ::testing::Test {
 protected:
  ChapCredentials creds_{"alice", "alice-secret-1", "target", "target-secret-1"};
  ChapAuthenticator chap_{creds_};
  KV out_;

  // Runs the CHAP_A step with a fixed challenge and returns it.
  void Challenge(const std::string& algorithms = "5") {
    chap_.SetChallengeForTest(7, Seq16());
    ASSERT_EQ(chap_.Step({{"CHAP_A", algorithms}}, &out_), Outcome::kContinue);
  }
  std::string Response(const std::string& secret, ChapAlgorithm a = ChapAlgorithm::kMd5) {
    return EncodeChapHex(ChapResponse(a, 7, secret, Seq16()));
  }
};

TEST_F(ChapExchange, AnswersTheFirstSupportedAlgorithmOfTheInitiatorsList) {
  Challenge("1,7,5");
  EXPECT_EQ(Value(out_, "CHAP_A"), "7");
  EXPECT_EQ(Value(out_, "CHAP_I"), "7");
  EXPECT_EQ(Value(out_, "CHAP_C"), EncodeChapHex(Seq16()));
}

TEST_F(ChapExchange, RandomChallengeIsAtLeast16BytesAndFreshPerLogin) {
  ChapAuthenticator a(creds_), b(creds_);
  KV oa, ob;
  ASSERT_EQ(a.Step({{"CHAP_A", "5"}}, &oa), Outcome::kContinue);
  ASSERT_EQ(b.Step({{"CHAP_A", "7"}}, &ob), Outcome::kContinue);
  const auto ca = DecodeChapBinary(Value(oa, "CHAP_C"));
  const auto cb = DecodeChapBinary(Value(ob, "CHAP_C"));
  ASSERT_TRUE(ca && cb);
  EXPECT_EQ(ca->size(), 16u);
  EXPECT_EQ(cb->size(), 32u);  // SHA-256: as long as the digest
  EXPECT_NE(*ca, std::vector<uint8_t>(cb->begin(), cb->begin() + 16));
}

TEST_F(ChapExchange, DigestsLeftOutByTheOperatorAreNeverChosen) {
  auto strong = ParseChapDigests("SHA-256,sha3-256");
  ASSERT_TRUE(strong.ok()) << strong.status().message();
  ChapAuthenticator a(creds_, strong.value());
  KV out;
  ASSERT_EQ(a.Step({{"CHAP_A", "5,6,7"}}, &out), Outcome::kContinue);
  EXPECT_EQ(Value(out, "CHAP_A"), "7");  // the initiator's first that the gateway accepts
  ChapAuthenticator b(creds_, strong.value());
  out.clear();
  EXPECT_EQ(b.Step({{"CHAP_A", "5,6"}}, &out), Outcome::kAuthFailed);
  EXPECT_EQ(Value(out, "CHAP_A"), "Reject");
}

TEST(ChapDigestsTest, ParsesTheFourNamesAndRefusesOthers) {
  auto all = ParseChapDigests("SHA-256,SHA3-256,SHA-1,MD5");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.value(), ChapDigests{});
  auto md5 = ParseChapDigests("md5");
  ASSERT_TRUE(md5.ok());
  EXPECT_TRUE(md5.value().Allows(ChapAlgorithm::kMd5));
  EXPECT_FALSE(md5.value().Allows(ChapAlgorithm::kSha256));
  for (const char* bad : {"", "SHA-512", "SHA-256,", "SHA256"}) {
    auto r = ParseChapDigests(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(ParseChapDigests("SHA-256,SHA-512").status().message().find("\"sha-512\""),
            std::string::npos);
}

TEST_F(ChapExchange, RejectsAlgorithmListWithoutSupportedValue) {
  EXPECT_EQ(chap_.Step({{"CHAP_A", "1,2,99"}}, &out_), Outcome::kAuthFailed);
  EXPECT_EQ(Value(out_, "CHAP_A"), "Reject");
}

TEST_F(ChapExchange, OneWaySucceedsWithTheRightSecret) {
  Challenge();
  out_.clear();
  EXPECT_EQ(chap_.Step({{"CHAP_N", "alice"}, {"CHAP_R", Response("alice-secret-1")}}, &out_),
            Outcome::kDone);
  EXPECT_TRUE(chap_.done());
  EXPECT_TRUE(out_.empty());
  EXPECT_FALSE(chap_.mutual_done());
}

TEST(ChapBase64, AcceptsBase64Response) {
  ChapAuthenticator chap(ChapCredentials{"alice", "abcdefghijkl", "", ""});
  chap.SetChallengeForTest(7, Seq16());
  KV out;
  ASSERT_EQ(chap.Step({{"CHAP_A", "5"}}, &out), Outcome::kContinue);
  // base64 of the MD5 reference response H(7 || "abcdefghijkl" || 00..0f).
  EXPECT_EQ(chap.Step({{"CHAP_N", "alice"}, {"CHAP_R", "0b+55FrCyL79smrAvcu/e3FQ=="}}, &out),
            Outcome::kDone);
}

TEST_F(ChapExchange, WrongSecretFails) {
  Challenge();
  EXPECT_EQ(chap_.Step({{"CHAP_N", "alice"}, {"CHAP_R", Response("wrong-secret-1")}}, &out_),
            Outcome::kAuthFailed);
  EXPECT_EQ(chap_.error(), "CHAP_R does not match");
}

TEST_F(ChapExchange, WrongNameFails) {
  Challenge();
  EXPECT_EQ(chap_.Step({{"CHAP_N", "bob"}, {"CHAP_R", Response("alice-secret-1")}}, &out_),
            Outcome::kAuthFailed);
  EXPECT_EQ(chap_.error(), "CHAP_N does not match");
}

TEST_F(ChapExchange, ResponseToAnotherChallengeFails) {
  // A response replayed from an earlier login answers a different challenge.
  Challenge();
  std::vector<uint8_t> other(16, 0xee);
  const std::string replayed =
      EncodeChapHex(ChapResponse(ChapAlgorithm::kMd5, 7, "alice-secret-1", other));
  EXPECT_EQ(chap_.Step({{"CHAP_N", "alice"}, {"CHAP_R", replayed}}, &out_), Outcome::kAuthFailed);
}

TEST_F(ChapExchange, MutualAnswersWithTargetNameAndResponse) {
  Challenge();
  out_.clear();
  std::vector<uint8_t> ic(16, 0x42);
  EXPECT_EQ(chap_.Step({{"CHAP_N", "alice"},
                        {"CHAP_R", Response("alice-secret-1")},
                        {"CHAP_I", "9"},
                        {"CHAP_C", EncodeChapHex(ic)}},
                       &out_),
            Outcome::kDone);
  EXPECT_EQ(Value(out_, "CHAP_N"), "target");
  EXPECT_EQ(Value(out_, "CHAP_R"),
            EncodeChapHex(ChapResponse(ChapAlgorithm::kMd5, 9, "target-secret-1", ic)));
  EXPECT_TRUE(chap_.mutual_done());
}

TEST_F(ChapExchange, ReflectedChallengeIsRefused) {
  Challenge();
  EXPECT_EQ(chap_.Step({{"CHAP_N", "alice"},
                        {"CHAP_R", Response("alice-secret-1")},
                        {"CHAP_I", "7"},
                        {"CHAP_C", EncodeChapHex(Seq16())}},
                       &out_),
            Outcome::kAuthFailed);
  EXPECT_EQ(chap_.error(), "initiator CHAP_C reflects the target's challenge");
}

TEST_F(ChapExchange, MutualWithoutTargetCredentialsFails) {
  ChapAuthenticator one_way(ChapCredentials{"alice", "alice-secret-1", "", ""});
  one_way.SetChallengeForTest(7, Seq16());
  ASSERT_EQ(one_way.Step({{"CHAP_A", "5"}}, &out_), Outcome::kContinue);
  EXPECT_EQ(one_way.Step({{"CHAP_N", "alice"},
                          {"CHAP_R", Response("alice-secret-1")},
                          {"CHAP_I", "1"},
                          {"CHAP_C", "0x0102030405060708090a0b0c0d0e0f10"}},
                         &out_),
            Outcome::kAuthFailed);
}

TEST_F(ChapExchange, KeysOutOfOrderAreProtocolErrors) {
  EXPECT_EQ(chap_.Step({{"CHAP_N", "alice"}}, &out_), Outcome::kProtocolError);
  ChapAuthenticator other(creds_);
  other.SetChallengeForTest(7, Seq16());
  ASSERT_EQ(other.Step({{"CHAP_A", "5"}}, &out_), Outcome::kContinue);
  EXPECT_EQ(
      other.Step({{"CHAP_N", "alice"}, {"CHAP_R", Response("alice-secret-1")}, {"CHAP_I", "1"}},
                 &out_),
      Outcome::kProtocolError);
}

TEST_F(ChapExchange, NothingBeforeChapAIsFine) {
  EXPECT_EQ(chap_.Step({{"AuthMethod", "CHAP"}}, &out_), Outcome::kContinue);
  EXPECT_TRUE(out_.empty());
}

TEST(SourceNet, ParsesAndMatchesCidrs) {
  auto net = SourceNet::Parse("10.1.0.0/16");
  ASSERT_TRUE(net);
  EXPECT_TRUE(net->Contains("10.1.2.3"));
  EXPECT_TRUE(net->Contains("10.1.2.3:3260"));
  EXPECT_FALSE(net->Contains("10.2.0.1:3260"));
  EXPECT_FALSE(net->Contains("[fd00::1]:3260"));
  auto one = SourceNet::Parse("127.0.0.1");
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->Contains("127.0.0.1:5000"));
  EXPECT_FALSE(one->Contains("127.0.0.2:5000"));
  auto v6 = SourceNet::Parse("fd00::/64");
  ASSERT_TRUE(v6);
  EXPECT_TRUE(v6->Contains("[fd00::1]:3260"));
  EXPECT_FALSE(v6->Contains("[fd01::1]:3260"));
  EXPECT_FALSE(SourceNet::Parse("10.1.2.3/8"));  // host bits set
  EXPECT_FALSE(SourceNet::Parse("10.0.0.0/33"));
  EXPECT_FALSE(SourceNet::Parse("nonsense"));
  EXPECT_FALSE(SourceNet::Parse("10.0.0.0/"));
}

TEST(TargetConfigAcl, AdmitsListedInitiatorsFromAllowedSourcesOnly) {
  TargetConfig tc;
  tc.acl.push_back({"iqn.2026-11.io.test:a", {}});
  tc.acl.push_back({"iqn.2026-11.io.test:b", {*SourceNet::Parse("192.168.0.0/24")}});
  EXPECT_TRUE(tc.Allows("iqn.2026-11.io.test:a", "10.0.0.1:1"));
  EXPECT_TRUE(tc.Allows("iqn.2026-11.io.test:b", "192.168.0.7:1"));
  EXPECT_FALSE(tc.Allows("iqn.2026-11.io.test:b", "192.168.1.7:1"));
  EXPECT_FALSE(tc.Allows("iqn.2026-11.io.test:c", "192.168.0.7:1"));
  tc.allow_any_initiator = true;
  EXPECT_TRUE(tc.Allows("iqn.2026-11.io.test:c", "192.168.0.7:1"));
}

TEST(ChapCredentialsTest, AMutualSecretIsNoInitiatorSecretAnywhereOnTheGateway) {
  const ChapCredentials a{"alice", "alice-secret-0001", "gw", "gateway-secret-01"};
  const ChapCredentials b{"bob", "bob-secret-000002", "", ""};
  const ChapCredentials none;
  // Apart: every mutual secret differs from every initiator secret; repeats of either are fine.
  EXPECT_TRUE(ValidateMutualSecretsApart(
                  {{"target a", &a}, {"target b", &b}, {"target a2", &a}, {"discovery", &none}})
                  .ok());
  // Another target's initiator secret as a's mutual secret: refused, naming both, not the secret.
  const ChapCredentials reuse{"carol", "gateway-secret-01", "", ""};
  Status s = ValidateMutualSecretsApart({{"target a", &a}, {"target c", &reuse}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("target a: chap.mutual_secret is the initiator secret of target c"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("gateway-secret-01"), std::string::npos);
  // Discovery's initiator secret counts too, whichever order the sets come in.
  const ChapCredentials discovery{"disco", "gateway-secret-01", "", ""};
  s = ValidateMutualSecretsApart({{"discovery", &discovery}, {"target a", &a}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("initiator secret of discovery"), std::string::npos) << s.message();
}

}  // namespace chap_test
}  // namespace iscsigw::iscsi
