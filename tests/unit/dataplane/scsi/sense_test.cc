#include "dataplane/scsi/sense.h"

#include <gtest/gtest.h>

#include <array>

#include "base/endian.h"

namespace iscsigw::scsi {
namespace sense_test {

TEST(Sense, FixedFormatLayout) {
  std::array<uint8_t, kFixedSenseLength> s{};
  s.fill(0xFF);
  ASSERT_EQ(BuildFixedSense(s.data(), SenseKey::kMediumError, Asc::kUnrecoveredReadError), 18u);
  EXPECT_EQ(s[0], 0x70);
  EXPECT_EQ(s[2], 0x03);
  EXPECT_EQ(s[7], 10);
  EXPECT_EQ(s[12], 0x11);
  EXPECT_EQ(s[13], 0x00);
  EXPECT_EQ(s[15], 0x00);  // SKSV=0
  EXPECT_EQ(s[16], 0x00);
  EXPECT_EQ(s[17], 0x00);
}

TEST(Sense, FieldPointerInCdbWithBit) {
  Task task;
  task.in_len = 100;
  task.in_seg_count = 1;
  SetInvalidFieldInCdb(task, 0x0102, 5);
  EXPECT_EQ(task.status, ScsiStatus::kCheckCondition);
  EXPECT_EQ(task.sense_len, 18);
  EXPECT_EQ(task.sense[2], 0x05);
  EXPECT_EQ(task.sense[12], 0x24);
  EXPECT_EQ(task.sense[15], 0x80 | 0x40 | 0x08 | 5);  // SKSV, C/D, BPV, bit 5
  EXPECT_EQ(LoadBe16(&task.sense[16]), 0x0102);
  EXPECT_EQ(task.in_len, 0u);  // no Data-In with CHECK CONDITION
  EXPECT_EQ(task.in_seg_count, 0u);
}

TEST(Sense, FieldPointerInParameterListWithoutBit) {
  Task task;
  SetInvalidFieldInParameterList(task, 7);
  EXPECT_EQ(task.sense[12], 0x26);
  EXPECT_EQ(task.sense[15], 0x80);  // SKSV only: C/D=0, BPV=0
  EXPECT_EQ(LoadBe16(&task.sense[16]), 7);
}

TEST(Sense, DescriptorFormatHeader) {
  std::array<uint8_t, kDescriptorSenseLength> s{};
  ASSERT_EQ(BuildDescriptorSense(s.data(), SenseKey::kUnitAttention, Asc::kBusDeviceReset), 8u);
  EXPECT_EQ(s[0], 0x72);
  EXPECT_EQ(s[1], 0x06);
  EXPECT_EQ(s[2], 0x29);
  EXPECT_EQ(s[3], 0x03);
  EXPECT_EQ(s[7], 0);
}

TEST(Sense, NamedCodesMatchSpc4) {
  EXPECT_EQ(Asc::kLbaOutOfRange, (Asc{0x21, 0x00}));
  EXPECT_EQ(Asc::kInvalidCommandOperationCode, (Asc{0x20, 0x00}));
  EXPECT_EQ(Asc::kLogicalUnitNotSupported, (Asc{0x25, 0x00}));
  EXPECT_EQ(Asc::kWriteProtected, (Asc{0x27, 0x00}));
  EXPECT_EQ(Asc::kPowerOnReset, (Asc{0x29, 0x00}));
  EXPECT_EQ(Asc::kBusDeviceReset, (Asc{0x29, 0x03}));
  EXPECT_EQ(Asc::kParameterListLengthError, (Asc{0x1A, 0x00}));
  EXPECT_EQ(Asc::kWriteError, (Asc{0x0C, 0x00}));
  EXPECT_EQ(Asc::kInvalidFieldInCommandInformationUnit, (Asc{0x0E, 0x03}));
  EXPECT_EQ(Asc::kCapacityDataChanged, (Asc{0x2A, 0x09}));
  EXPECT_EQ(Asc::kReportedLunsDataChanged, (Asc{0x3F, 0x0E}));
  EXPECT_EQ(static_cast<uint8_t>(SenseKey::kAbortedCommand), 0x0B);
  EXPECT_EQ(static_cast<uint8_t>(SenseKey::kMiscompare), 0x0E);
}

}  // namespace sense_test
}  // namespace iscsigw::scsi
