#include "dataplane/pdu/text.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace iscsigw::pdu {
namespace text_test {

std::vector<uint8_t> Bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

Result<std::vector<KeyValue>> Parse(std::string_view s) {
  TextAccumulator acc;
  EXPECT_TRUE(acc.Append(Bytes(s)).ok());
  return acc.Take();
}

TEST(TextAccumulator, ParsesPairsInOrder) {
  auto r =
      Parse(std::string_view("InitiatorName=iqn.1994-05.com.redhat:x\0SessionType=Normal\0", 58));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0], (KeyValue{"InitiatorName", "iqn.1994-05.com.redhat:x"}));
  EXPECT_EQ((*r)[1], (KeyValue{"SessionType", "Normal"}));
}

TEST(TextAccumulator, JoinsPairSplitAcrossContinuationPdus) {
  // RFC 7143 6.1 / 11.10.2: a pair may span PDUs sent with the C bit.
  TextAccumulator acc;
  const std::string all("HeaderDigest=CRC32C,None\0MaxRecvDataSegmentLength=262144\0", 57);
  ASSERT_TRUE(acc.Append(Bytes(std::string_view(all).substr(0, 7))).ok());   // "HeaderD"
  ASSERT_TRUE(acc.Append(Bytes(std::string_view(all).substr(7, 20))).ok());  // across the NUL
  ASSERT_TRUE(acc.Append(Bytes(std::string_view(all).substr(27))).ok());
  EXPECT_EQ(acc.size(), all.size());
  auto r = acc.Take();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0], (KeyValue{"HeaderDigest", "CRC32C,None"}));
  EXPECT_EQ((*r)[1], (KeyValue{"MaxRecvDataSegmentLength", "262144"}));
  EXPECT_TRUE(acc.empty());  // Take clears
}

TEST(TextAccumulator, TakeClearsEvenOnError) {
  TextAccumulator acc;
  ASSERT_TRUE(acc.Append(Bytes(std::string_view("NoEquals\0", 9))).ok());
  EXPECT_FALSE(acc.Take().ok());
  EXPECT_TRUE(acc.empty());
  ASSERT_TRUE(acc.Append(Bytes(std::string_view("A=1\0", 4))).ok());
  auto r = acc.Take();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 1u);
}

TEST(TextAccumulator, ToleratesMissingFinalNulAndNulPadding) {
  auto r = Parse(std::string_view("A=1\0\0B=2", 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1], (KeyValue{"B", "2"}));
}

TEST(TextAccumulator, EmptyInputGivesNoKeys) {
  TextAccumulator acc;
  auto r = acc.Take();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(TextAccumulator, EmptyValueIsAllowed) {
  auto r = Parse(std::string_view("InitiatorAlias=\0", 16));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0], (KeyValue{"InitiatorAlias", ""}));
}

TEST(TextAccumulator, ValueMayContainEquals) {
  auto r = Parse(std::string_view("X-a=b=c\0", 8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0], (KeyValue{"X-a", "b=c"}));
}

struct BadText {
  const char* name;
  std::string text;
};

class TextAccumulatorRejects : public testing::TestWithParam<BadText> {};

TEST_P(TextAccumulatorRejects, Malformed) {
  auto r = Parse(GetParam().text);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

std::string Pair(const std::string& k, const std::string& v) { return k + "=" + v + '\0'; }

INSTANTIATE_TEST_SUITE_P(
    Rfc7143Section6_1, TextAccumulatorRejects,
    testing::Values(BadText{"MissingEquals", std::string("A=1\0JustAKey\0", 13)},
                    BadText{"EmptyKey", Pair("", "x")},
                    BadText{"KeyOf64Bytes", Pair(std::string(64, 'K'), "1")},
                    BadText{"ValueOf256Bytes", Pair("TargetAlias", std::string(256, 'v'))},
                    BadText{"ListElementOf256Bytes",
                            Pair("AuthMethod", "None," + std::string(256, 'v'))},
                    BadText{"LongKeyValueOver8192", Pair("CHAP_C", "0x" + std::string(8191, 'a'))},
                    BadText{"DuplicateKey", Pair("A", "1") + Pair("B", "2") + Pair("A", "3")},
                    BadText{"ControlCharInValue", Pair("InitiatorAlias", "a\tb")},
                    BadText{"SpaceInKey", Pair("Bad Key", "1")},
                    BadText{"InvalidUtf8", Pair("InitiatorAlias", "\xc3(")},
                    BadText{"OverlongUtf8", Pair("InitiatorAlias", "\xc0\xaf")},
                    BadText{"TruncatedUtf8", Pair("InitiatorAlias", "ab\xe2\x82")}),
    [](const testing::TestParamInfo<BadText>& p) { return p.param.name; });

TEST(TextAccumulator, AcceptsBoundaryLengths) {
  const std::string text = Pair(std::string(63, 'K'), std::string(255, 'v')) +
                           Pair("CHAP_R", "0x" + std::string(8190, 'a')) +
                           Pair("InitiatorAlias", "caf\xc3\xa9");
  auto r = Parse(text);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].key.size(), 63u);
  EXPECT_EQ((*r)[0].value.size(), 255u);
  EXPECT_EQ((*r)[1].value.size(), 8192u);
  EXPECT_EQ((*r)[2].value, "caf\xc3\xa9");
}

TEST(TextAccumulator, AppendBeyondMaxBytesFailsAndKeepsContent) {
  TextAccumulator acc(16);
  ASSERT_TRUE(acc.Append(Bytes(std::string_view("A=1234567890\0", 13))).ok());
  Status s = acc.Append(Bytes(std::string_view("B=1\0", 4)));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(acc.size(), 13u);
  ASSERT_TRUE(acc.Append(Bytes(std::string_view("B=\0", 3))).ok());  // exactly 16
  auto r = acc.Take();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 2u);
}

TEST(TextAccumulator, ClearDropsContent) {
  TextAccumulator acc;
  ASSERT_TRUE(acc.Append(Bytes("A=1")).ok());
  acc.Clear();
  EXPECT_TRUE(acc.empty());
  auto r = acc.Take();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(TextEncode, EncodesNulTerminatedPairs) {
  std::vector<uint8_t> out = {'x'};
  EncodeText({{"HeaderDigest", "None"}, {"MaxRecvDataSegmentLength", "8192"}}, &out);
  AppendKey("TargetAlias", "", &out);
  const std::string expected("xHeaderDigest=None\0MaxRecvDataSegmentLength=8192\0TargetAlias=\0",
                             62);
  EXPECT_EQ(std::string(out.begin(), out.end()), expected);
}

TEST(TextEncode, RoundTripsThroughParser) {
  const std::vector<KeyValue> kvs = {{"AuthMethod", "CHAP,None"}, {"X-com.example.k", "v"}};
  std::vector<uint8_t> out;
  EncodeText(kvs, &out);
  auto r = ParseText(out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, kvs);
}

TEST(TextKeys, LongValueKeys) {
  EXPECT_TRUE(IsLongValueKey("CHAP_C"));
  EXPECT_TRUE(IsLongValueKey("CHAP_R"));
  EXPECT_FALSE(IsLongValueKey("CHAP_N"));
  EXPECT_FALSE(IsLongValueKey("TargetName"));
}

}  // namespace text_test
}  // namespace iscsigw::pdu
