#include "dataplane/pdu/crc32c.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace iscsigw::pdu {
namespace crc32c_test {

std::array<uint8_t, 32> Filled(uint8_t v) {
  std::array<uint8_t, 32> a;
  a.fill(v);
  return a;
}

// RFC 3720 Appendix B.4 (unchanged in RFC 7143): CRC32C test vectors.
TEST(Crc32c, Rfc3720ZerosVector) {
  const auto d = Filled(0x00);
  EXPECT_EQ(Crc32c(d.data(), d.size()), 0x8a9136aau);
}

TEST(Crc32c, Rfc3720OnesVector) {
  const auto d = Filled(0xff);
  EXPECT_EQ(Crc32c(d.data(), d.size()), 0x62a8ab43u);
}

TEST(Crc32c, Rfc3720IncrementingVector) {
  std::array<uint8_t, 32> d;
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(d.data(), d.size()), 0x46dd794eu);
}

TEST(Crc32c, Rfc3720DecrementingVector) {
  std::array<uint8_t, 32> d;
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(d.data(), d.size()), 0x113fdb5cu);
}

// RFC 3720 B.4: an iSCSI SCSI Read (10) command PDU.
TEST(Crc32c, Rfc3720ScsiReadCommandVector) {
  const std::vector<uint8_t> d = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                  0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
                                  0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
                                  0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                  0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(Crc32c(d.data(), d.size()), 0xd9963a56u);
}

TEST(Crc32c, EmptyInputIsZero) { EXPECT_EQ(Crc32c(nullptr, 0), 0u); }

TEST(Crc32c, RunningCrcOverPiecesEqualsWholeBuffer) {
  std::vector<uint8_t> d(1000);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 7 + 3);
  const uint32_t whole = Crc32c(d.data(), d.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{3}, size_t{48}, size_t{999}, size_t{1000}}) {
    uint32_t crc = Crc32cUpdate(kCrc32cInit, d.data(), cut);
    crc = Crc32cUpdate(crc, d.data() + cut, d.size() - cut);
    EXPECT_EQ(Crc32cFinish(crc), whole) << "cut at " << cut;
  }
}

// RFC 3720 B.4 lists the zeros vector's CRC bytes as they go on the wire: aa 36 91 8a.
TEST(Crc32c, DigestGoesOnTheWireLeastSignificantByteFirst) {
  uint8_t wire[4] = {};
  StoreDigest(wire, 0x8a9136aau);
  EXPECT_EQ(wire[0], 0xaa);
  EXPECT_EQ(wire[1], 0x36);
  EXPECT_EQ(wire[2], 0x91);
  EXPECT_EQ(wire[3], 0x8a);
  EXPECT_EQ(LoadDigest(wire), 0x8a9136aau);
}

TEST(Crc32c, DigestOfDataFollowedByItsDigestIsTheCrc32cResidue) {
  // Appending the digest LSB first yields the fixed CRC32C residue: a property of the byte order
  // that an independent implementation can check.
  std::vector<uint8_t> d(64, 0x5a);
  const uint32_t crc = Crc32c(d.data(), d.size());
  d.resize(68);
  StoreDigest(d.data() + 64, crc);
  EXPECT_EQ(Crc32c(d.data(), d.size()), 0x48674bc7u);
}

}  // namespace crc32c_test
}  // namespace iscsigw::pdu
