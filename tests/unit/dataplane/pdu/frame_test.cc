#include "dataplane/pdu/frame.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dataplane/pdu/crc32c.h"

namespace iscsigw::pdu {
namespace frame_test {

struct PduSpec {
  uint8_t ahs_words = 0;
  uint32_t dsl = 0;
  bool header_digest = false;
  bool data_digest = false;
  uint8_t fill = 0x11;
};

// Builds one PDU as it appears on the wire: BHS, AHS, header digest, data, padding, data digest.
std::vector<uint8_t> BuildPdu(const PduSpec& s) {
  Bhs h;
  h.SetOpcode(Opcode::kNopOut);
  h.SetFlags(0x80);
  h.Set8(4, s.ahs_words);
  h.SetDataSegmentLength(s.dsl);
  h.SetItt(0x01020304);
  std::vector<uint8_t> out(h.b.begin(), h.b.end());
  for (uint32_t i = 0; i < s.ahs_words * 4u; ++i) out.push_back(static_cast<uint8_t>(0xa0 + i));
  if (s.header_digest) {
    const uint32_t crc = Crc32c(out.data(), out.size());
    out.resize(out.size() + 4);
    StoreDigest(out.data() + out.size() - 4, crc);
  }
  if (s.dsl > 0) {
    const size_t data_start = out.size();
    for (uint32_t i = 0; i < s.dsl; ++i) out.push_back(static_cast<uint8_t>(s.fill + i));
    out.resize(out.size() + PadLength(s.dsl), 0);
    if (s.data_digest) {
      const uint32_t crc = Crc32c(out.data() + data_start, out.size() - data_start);
      out.resize(out.size() + 4);
      StoreDigest(out.data() + out.size() - 4, crc);
    }
  }
  return out;
}

FrameLimits Limits(const PduSpec& s, uint32_t max_dsl = 8192) {
  return FrameLimits{max_dsl, s.header_digest, s.data_digest};
}

TEST(ParseFrame, EmptyAndShortInputNeedMoreWithUnknownLength) {
  const auto pdu = BuildPdu({});
  Frame f;
  for (size_t n : {size_t{0}, size_t{1}, size_t{47}}) {
    const auto r = ParseFrame({pdu.data(), n}, FrameLimits{}, &f);
    EXPECT_EQ(r.status, FrameStatus::kNeedMore) << n;
    EXPECT_EQ(r.needed, 0u) << n;
  }
}

// One row per layout: every prefix shorter than the PDU needs more, and once the header (with its
// digest) is in, `needed` is the exact PDU length.
struct LayoutRow {
  const char* name;
  PduSpec spec;
  size_t expected_total;
  uint32_t expected_ahs;
};

class ParseFrameLayout : public testing::TestWithParam<LayoutRow> {};

TEST_P(ParseFrameLayout, FramesExactlyOnePdu) {
  const LayoutRow& row = GetParam();
  const auto pdu = BuildPdu(row.spec);
  ASSERT_EQ(pdu.size(), row.expected_total);
  const FrameLimits limits = Limits(row.spec);
  const size_t header_total = 48 + row.expected_ahs + (row.spec.header_digest ? 4 : 0);

  Frame f;
  for (size_t n = 48; n < pdu.size(); ++n) {
    const auto r = ParseFrame({pdu.data(), n}, limits, &f);
    ASSERT_EQ(r.status, FrameStatus::kNeedMore) << "prefix " << n;
    ASSERT_EQ(r.needed, n < header_total ? header_total : row.expected_total) << "prefix " << n;
  }
  // Trailing bytes of a next PDU are not part of this one.
  auto with_tail = pdu;
  with_tail.insert(with_tail.end(), {0xde, 0xad, 0xbe});
  const auto r = ParseFrame(with_tail, limits, &f);
  ASSERT_EQ(r.status, FrameStatus::kComplete);
  EXPECT_EQ(r.needed, row.expected_total);
  EXPECT_EQ(f.total_length, row.expected_total);
  EXPECT_EQ(FrameLength(pdu.data(), limits), row.expected_total);
  EXPECT_EQ(f.bhs, with_tail.data());
  EXPECT_EQ(f.ahs_length, row.expected_ahs);
  if (row.expected_ahs > 0) {
    ASSERT_EQ(f.ahs, with_tail.data() + 48);
    EXPECT_EQ(f.ahs[0], 0xa0);
  } else {
    EXPECT_EQ(f.ahs, nullptr);
  }
  EXPECT_EQ(f.data_length, row.spec.dsl);
  if (row.spec.dsl > 0) {
    ASSERT_EQ(f.data, with_tail.data() + header_total);
    EXPECT_EQ(f.data[0], row.spec.fill);
    EXPECT_EQ(f.data[row.spec.dsl - 1], static_cast<uint8_t>(row.spec.fill + row.spec.dsl - 1));
  } else {
    EXPECT_EQ(f.data, nullptr);
  }
  EXPECT_EQ(f.header().itt(), 0x01020304u);
  EXPECT_FALSE(f.data_digest_error);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ParseFrameLayout,
    testing::Values(
        LayoutRow{"BhsOnly", {}, 48, 0}, LayoutRow{"AlignedData", {.dsl = 8}, 56, 0},
        LayoutRow{"PaddedData1", {.dsl = 1}, 52, 0}, LayoutRow{"PaddedData3", {.dsl = 3}, 52, 0},
        LayoutRow{"PaddedData5", {.dsl = 5}, 56, 0},
        LayoutRow{"Ahs", {.ahs_words = 2, .dsl = 6}, 48 + 8 + 8, 8},
        LayoutRow{"HeaderDigestNoData", {.header_digest = true}, 52, 0},
        // No data segment: no data digest either (RFC 7143 11.2.3).
        LayoutRow{"DataDigestNoData", {.data_digest = true}, 48, 0},
        LayoutRow{"BothDigestsNoData", {.header_digest = true, .data_digest = true}, 52, 0},
        LayoutRow{"AllParts",
                  {.ahs_words = 1, .dsl = 7, .header_digest = true, .data_digest = true},
                  48 + 4 + 4 + 8 + 4,
                  4},
        LayoutRow{"DataDigestPadded", {.dsl = 2, .data_digest = true}, 48 + 4 + 4, 0}),
    [](const testing::TestParamInfo<LayoutRow>& p) { return p.param.name; });

TEST(ParseFrame, HeaderDigestMismatchIsReportedBeforeAnyLengthIsTrusted) {
  auto pdu = BuildPdu({.dsl = 100, .header_digest = true});
  pdu[48] ^= 0x01;  // corrupt the header digest itself
  Frame f;
  // Only the header has arrived: the digest is checked already, no waiting for the data.
  auto r = ParseFrame({pdu.data(), 52}, Limits({.header_digest = true}), &f);
  EXPECT_EQ(r.status, FrameStatus::kHeaderDigestError);

  auto pdu2 = BuildPdu({.dsl = 4, .header_digest = true});
  pdu2[5] ^= 0x7f;  // DataSegmentLength corrupted in flight: must not be believed
  r = ParseFrame(pdu2, Limits({.header_digest = true}), &f);
  EXPECT_EQ(r.status, FrameStatus::kHeaderDigestError);
}

TEST(ParseFrame, HeaderDigestCoversTheAhs) {
  auto pdu = BuildPdu({.ahs_words = 1, .header_digest = true});
  pdu[49] ^= 0x10;
  Frame f;
  EXPECT_EQ(ParseFrame(pdu, Limits({.header_digest = true}), &f).status,
            FrameStatus::kHeaderDigestError);
}

TEST(ParseFrame, DataDigestMismatchStillConsumesTheWholePdu) {
  const PduSpec spec{.dsl = 10, .header_digest = true, .data_digest = true};
  auto pdu = BuildPdu(spec);
  const size_t total = pdu.size();
  pdu[52 + 3] ^= 0x40;           // one data byte
  pdu.insert(pdu.end(), 48, 0);  // a following PDU's bytes must not be counted
  Frame f;
  const auto r = ParseFrame(pdu, Limits(spec), &f);
  EXPECT_EQ(r.status, FrameStatus::kDataDigestError);
  EXPECT_TRUE(f.data_digest_error);  // the header is sound, the data must not be used
  EXPECT_EQ(r.needed, total);
  EXPECT_EQ(f.total_length, total);
  EXPECT_EQ(f.bhs, pdu.data());
  EXPECT_EQ(f.header().itt(), 0x01020304u);
}

TEST(ParseFrame, DataDigestCoversThePadding) {
  const PduSpec spec{.dsl = 5, .data_digest = true};
  auto pdu = BuildPdu(spec);
  pdu[48 + 6] = 0xff;  // a pad byte
  Frame f;
  EXPECT_EQ(ParseFrame(pdu, Limits(spec), &f).status, FrameStatus::kDataDigestError);
}

TEST(ParseFrame, DataDigestNotCheckedUntilTheWholePduArrived) {
  const PduSpec spec{.dsl = 16, .data_digest = true};
  auto pdu = BuildPdu(spec);
  Frame f;
  const auto r = ParseFrame({pdu.data(), pdu.size() - 1}, Limits(spec), &f);
  EXPECT_EQ(r.status, FrameStatus::kNeedMore);
  EXPECT_EQ(r.needed, pdu.size());
}

TEST(ParseFrame, DataSegmentLengthOverTheLimitIsAnError) {
  const auto pdu = BuildPdu({.dsl = 8193});
  Frame f;
  // Reported as soon as the BHS is in: the PDU is never buffered.
  EXPECT_EQ(ParseFrame({pdu.data(), 48}, Limits({}, 8192), &f).status,
            FrameStatus::kDataSegmentTooLong);
  EXPECT_EQ(ParseFrame(pdu, Limits({}, 8192), &f).status, FrameStatus::kDataSegmentTooLong);
}

TEST(ParseFrame, DataSegmentLengthExactlyAtTheLimitIsAccepted) {
  const auto pdu = BuildPdu({.dsl = 8192});
  Frame f;
  const auto r = ParseFrame(pdu, Limits({}, 8192), &f);
  EXPECT_EQ(r.status, FrameStatus::kComplete);
  EXPECT_EQ(f.data_length, 8192u);
  EXPECT_EQ(f.total_length, 48u + 8192u);
}

TEST(ParseFrame, LargestDataSegmentLengthFieldIsRejectedByDefaultLimit) {
  Bhs h;
  h.SetDataSegmentLength(kMaxDataSegmentLength);
  Frame f;
  EXPECT_EQ(ParseFrame(h.b, FrameLimits{}, &f).status, FrameStatus::kDataSegmentTooLong);
}

TEST(ParseFrame, BackToBackPdusAreFramedInTurn) {
  const PduSpec a{.dsl = 3, .header_digest = true, .data_digest = true, .fill = 0x10};
  const PduSpec b{.header_digest = true, .data_digest = true};
  const PduSpec c{
      .ahs_words = 1, .dsl = 9, .header_digest = true, .data_digest = true, .fill = 0x30};
  std::vector<uint8_t> stream;
  std::vector<size_t> sizes;
  for (const PduSpec& s : {a, b, c}) {
    const auto p = BuildPdu(s);
    sizes.push_back(p.size());
    stream.insert(stream.end(), p.begin(), p.end());
  }
  const FrameLimits limits{8192, true, true};
  size_t pos = 0;
  std::vector<uint32_t> dsls;
  for (size_t i = 0; i < 3; ++i) {
    Frame f;
    const auto r = ParseFrame({stream.data() + pos, stream.size() - pos}, limits, &f);
    ASSERT_EQ(r.status, FrameStatus::kComplete) << i;
    EXPECT_EQ(f.total_length, sizes[i]) << i;
    EXPECT_EQ(f.bhs, stream.data() + pos);
    dsls.push_back(f.data_length);
    pos += f.total_length;
  }
  EXPECT_EQ(pos, stream.size());
  EXPECT_EQ(dsls, (std::vector<uint32_t>{3, 0, 9}));
  Frame f;
  EXPECT_EQ(ParseFrame({stream.data() + pos, 0}, limits, &f).status, FrameStatus::kNeedMore);
}

}  // namespace frame_test
}  // namespace iscsigw::pdu
