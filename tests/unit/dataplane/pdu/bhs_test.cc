#include "dataplane/pdu/bhs.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>

namespace iscsigw::pdu {
namespace bhs_test {

TEST(BhsView, ReadsCommonFieldsAtRfcOffsets) {
  std::array<uint8_t, kBhsLength> b{};
  b[0] = 0x40 | 0x01;  // I bit + SCSI Command
  b[1] = 0xc1;         // F, R, ATTR=1
  b[4] = 3;            // TotalAHSLength in words
  b[5] = 0x01;
  b[6] = 0x02;
  b[7] = 0x03;  // DataSegmentLength 0x010203
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<uint8_t>(0x10 + i);
  b[16] = 0xde;
  b[17] = 0xad;
  b[18] = 0xbe;
  b[19] = 0xef;
  const BhsView h(b.data());
  EXPECT_EQ(h.opcode(), Opcode::kScsiCommand);
  EXPECT_EQ(h.raw_opcode(), 0x01);
  EXPECT_TRUE(h.immediate());
  EXPECT_EQ(h.flags(), 0xc1);
  EXPECT_TRUE(h.final_bit());
  EXPECT_TRUE(h.read_bit());
  EXPECT_FALSE(h.write_bit());
  EXPECT_EQ(h.total_ahs_bytes(), 12u);
  EXPECT_EQ(h.data_segment_length(), 0x010203u);
  EXPECT_EQ(h.lun_raw(), 0x1011121314151617ull);
  EXPECT_EQ(h.itt(), 0xdeadbeefu);
}

TEST(BhsView, OpcodeIgnoresTheReservedTopBit) {
  std::array<uint8_t, kBhsLength> b{};
  b[0] = 0x80 | 0x05;
  const BhsView h(b.data());
  EXPECT_EQ(h.opcode(), Opcode::kDataOut);
  EXPECT_FALSE(h.immediate());
}

TEST(Bhs, BuilderAndViewRoundTripScsiCommandFields) {
  Bhs b;
  b.SetOpcode(Opcode::kScsiCommand);
  b.SetFlags(0xa0);  // F + W
  b.SetDataSegmentLength(0xabcdef);
  b.SetLunRaw(EncodeLun(7));
  b.SetItt(0x11223344);
  b.Set32(20, 65536);       // EDTL
  b.Set32(24, 0xfffffffe);  // CmdSN
  b.Set32(28, 42);          // ExpStatSN
  for (int i = 0; i < 16; ++i) b.Set8(32 + i, static_cast<uint8_t>(0x28 + i));
  const BhsView h(b.data());
  EXPECT_EQ(h.opcode(), Opcode::kScsiCommand);
  EXPECT_TRUE(h.final_bit());
  EXPECT_TRUE(h.write_bit());
  EXPECT_FALSE(h.read_bit());
  EXPECT_EQ(h.data_segment_length(), 0xabcdefu);
  EXPECT_EQ(DecodeLun(h.lun_raw()), 7u);
  EXPECT_EQ(h.itt(), 0x11223344u);
  EXPECT_EQ(h.expected_data_transfer_length(), 65536u);
  EXPECT_EQ(h.cmd_sn(), 0xfffffffeu);
  EXPECT_EQ(h.exp_stat_sn(), 42u);
  EXPECT_EQ(h.cdb()[0], 0x28);
  EXPECT_EQ(h.cdb()[15], 0x28 + 15);
  // Big-endian on the wire.
  EXPECT_EQ(b.b[5], 0xab);
  EXPECT_EQ(b.b[7], 0xef);
  EXPECT_EQ(b.b[16], 0x11);
  EXPECT_EQ(b.b[19], 0x44);
}

TEST(Bhs, DataOutFields) {
  Bhs b;
  b.SetOpcode(Opcode::kDataOut);
  b.Set32(20, 0x00000105);  // TTT
  b.Set32(36, 3);           // DataSN
  b.Set32(40, 12288);       // BufferOffset
  const BhsView h(b.data());
  EXPECT_EQ(h.ttt(), 0x105u);
  EXPECT_EQ(h.data_sn(), 3u);
  EXPECT_EQ(h.buffer_offset(), 12288u);
}

TEST(Bhs, LoginFields) {
  Bhs b;
  b.SetOpcode(Opcode::kLoginRequest);
  b.b[0] |= 0x40;
  b.SetFlags(0x80 | 0x04 | 0x03);  // T, CSG=1, NSG=3
  b.Set8(2, 0x00);
  b.Set8(3, 0x00);
  const uint8_t isid[6] = {0x80, 1, 2, 3, 4, 5};
  for (int i = 0; i < 6; ++i) b.Set8(8 + i, isid[i]);
  b.Set16(14, 0x1234);  // TSIH
  b.Set16(20, 0x0007);  // CID
  const BhsView h(b.data());
  EXPECT_TRUE(h.transit());
  EXPECT_FALSE(h.cont());
  EXPECT_EQ(h.csg(), 1);
  EXPECT_EQ(h.nsg(), 3);
  EXPECT_EQ(h.isid()[0], 0x80);
  EXPECT_EQ(h.isid()[5], 5);
  EXPECT_EQ(h.tsih(), 0x1234);
  EXPECT_EQ(h.cid(), 7);

  b.SetFlags(0x40 | 0x00 | 0x01);  // C, CSG=0, NSG=1
  EXPECT_FALSE(h.transit());
  EXPECT_TRUE(h.cont());
  EXPECT_EQ(h.csg(), 0);
  EXPECT_EQ(h.nsg(), 1);
}

TEST(Bhs, TaskManagementAndLogoutFields) {
  Bhs b;
  b.SetFlags(0x80 | 5);  // LOGICAL UNIT RESET
  b.Set32(20, 0xcafe);
  b.Set32(32, 99);
  BhsView h(b.data());
  EXPECT_EQ(h.tmf_function(), 5);
  EXPECT_EQ(h.referenced_task_tag(), 0xcafeu);
  EXPECT_EQ(h.ref_cmd_sn(), 99u);
  b.SetFlags(0x80 | 2);
  EXPECT_EQ(h.logout_reason(), 2);
}

TEST(Bhs, SetSnWritesTheTargetTrailer) {
  Bhs b;
  b.SetSn(0x01020304, 0x05060708, 0x090a0b0c);
  const BhsView h(b.data());
  EXPECT_EQ(h.u32(24), 0x01020304u);
  EXPECT_EQ(h.u32(28), 0x05060708u);
  EXPECT_EQ(h.u32(32), 0x090a0b0cu);
  b.Clear();
  for (uint8_t v : b.b) EXPECT_EQ(v, 0);
}

// RFC 1982 serial number arithmetic with SERIAL_BITS = 32 (RFC 7143 4.2.2.1).
struct SnRow {
  uint32_t a, b;
  bool less;
};

class SnLessTest : public testing::TestWithParam<SnRow> {};

TEST_P(SnLessTest, FollowsRfc1982) {
  const SnRow& r = GetParam();
  EXPECT_EQ(SnLess(r.a, r.b), r.less) << r.a << " < " << r.b;
  EXPECT_EQ(SnLessEq(r.a, r.b), r.less || r.a == r.b);
}

INSTANTIATE_TEST_SUITE_P(
    Rfc1982, SnLessTest,
    testing::Values(SnRow{0, 1, true}, SnRow{1, 0, false}, SnRow{5, 5, false},
                    // Across the wrap: 0xffffffff comes right before 0.
                    SnRow{0xffffffff, 0, true}, SnRow{0, 0xffffffff, false},
                    SnRow{0xfffffff0, 0x10, true}, SnRow{0x10, 0xfffffff0, false},
                    // Half the space apart, minus one: still ordered.
                    SnRow{0, 0x7fffffff, true}, SnRow{0x7fffffff, 0, false},
                    SnRow{0x80000000, 0xffffffff, true},
                    // Exactly 2^31 apart the comparison is undefined: neither is less.
                    SnRow{0, 0x80000000, false}, SnRow{0x80000000, 0, false},
                    SnRow{0xc0000001, 0x40000000, true}));

TEST(PadLength, PadsToFourBytes) {
  EXPECT_EQ(PadLength(0), 0u);
  EXPECT_EQ(PadLength(1), 3u);
  EXPECT_EQ(PadLength(2), 2u);
  EXPECT_EQ(PadLength(3), 1u);
  EXPECT_EQ(PadLength(4), 0u);
  EXPECT_EQ(PadLength(8193), 3u);
  static_assert(PadLength(6) == 2);
}

// SAM-5 4.7: single-level LUN structures.
TEST(Lun, PeripheralDeviceAddressingBelow256) {
  EXPECT_EQ(EncodeLun(0), 0u);
  EXPECT_EQ(EncodeLun(1), 0x0001000000000000ull);
  EXPECT_EQ(EncodeLun(255), 0x00ff000000000000ull);
  for (uint64_t lun : {0u, 1u, 17u, 255u}) EXPECT_EQ(DecodeLun(EncodeLun(lun)), lun);
}

TEST(Lun, FlatSpaceAddressingFrom256) {
  EXPECT_EQ(EncodeLun(256), 0x4100000000000000ull);
  EXPECT_EQ(EncodeLun(0x3fff), 0x7fff000000000000ull);
  for (uint64_t lun : {256u, 1000u, 0x3fffu}) EXPECT_EQ(DecodeLun(EncodeLun(lun)), lun);
  // Flat space may also name small LUNs (Linux does for some targets).
  EXPECT_EQ(DecodeLun(0x4005000000000000ull), 5u);
}

TEST(Lun, PeripheralWithNonZeroBusIsNoLun) {
  EXPECT_EQ(DecodeLun(0x0105000000000000ull), ~uint64_t{0});
  EXPECT_EQ(DecodeLun(0x3f00000000000000ull), ~uint64_t{0});
}

TEST(Lun, UnsupportedAddressingMethodsAreNoLun) {
  EXPECT_EQ(DecodeLun(0x8001000000000000ull), ~uint64_t{0});  // logical unit addressing
  EXPECT_EQ(DecodeLun(0xc001000000000000ull), ~uint64_t{0});  // extended
}

}  // namespace bhs_test
}  // namespace iscsigw::pdu
