// SCSI operation codes the engine knows by name (SPC-4 annex D, SBC-3 5.1 table 12). An opcode
// missing here is answered INVALID COMMAND OPERATION CODE by the dispatch table.
#pragma once

#include <cstdint>

namespace iscsigw::scsi {

enum Opcode : uint8_t {
  kTestUnitReady = 0x00,
  kRequestSense = 0x03,
  kRead6 = 0x08,
  kWrite6 = 0x0A,
  kInquiry = 0x12,
  kModeSelect6 = 0x15,
  kReserve6 = 0x16,
  kRelease6 = 0x17,
  kModeSense6 = 0x1A,
  kStartStopUnit = 0x1B,
  kPreventAllowMediumRemoval = 0x1E,
  kReadCapacity10 = 0x25,
  kRead10 = 0x28,
  kWrite10 = 0x2A,
  kSynchronizeCache10 = 0x35,
  kModeSelect10 = 0x55,
  kReserve10 = 0x56,
  kRelease10 = 0x57,
  kModeSense10 = 0x5A,
  kPersistentReserveIn = 0x5E,
  kPersistentReserveOut = 0x5F,
  kRead16 = 0x88,
  kWrite16 = 0x8A,
  kSynchronizeCache16 = 0x91,
  kWriteAtomic16 = 0x9C,  // SBC-4
  kServiceActionIn16 = 0x9E,
  kReportLuns = 0xA0,
  kMaintenanceIn = 0xA3,
  kRead12 = 0xA8,
  kWrite12 = 0xAA,
  // SBC-3 provisioning, verify and read-modify-write commands (sbc_provisioning.cc,
  // sbc_verify.cc).
  kWriteAndVerify10 = 0x2E,
  kVerify10 = 0x2F,
  kPreFetch10 = 0x34,
  kReadDefectData10 = 0x37,
  kWriteSame10 = 0x41,
  kUnmap = 0x42,
  kSanitize = 0x48,
  kCompareAndWrite = 0x89,
  kOrWrite16 = 0x8B,
  kWriteAndVerify16 = 0x8E,
  kVerify16 = 0x8F,
  kPreFetch16 = 0x90,
  kWriteSame16 = 0x93,
  kWriteAndVerify12 = 0xAE,
  kVerify12 = 0xAF,
  kReadDefectData12 = 0xB7,
  // SPC-4 third-party copy (xcopy.cc).
  kThirdPartyCopyOut = 0x83,  // EXTENDED COPY
  kThirdPartyCopyIn = 0x84,   // RECEIVE COPY RESULTS
};

// SERVICE ACTION IN(16) service actions (SBC-3 5.16).
inline constexpr uint8_t kSaReadCapacity16 = 0x10;
inline constexpr uint8_t kSaGetLbaStatus = 0x12;
// MAINTENANCE IN service actions (SPC-4 6.27, 6.35, 6.36).
inline constexpr uint8_t kSaReportTargetPortGroups = 0x0A;
inline constexpr uint8_t kSaReportSupportedOperationCodes = 0x0C;
inline constexpr uint8_t kSaReportSupportedTaskManagementFunctions = 0x0D;
// THIRD-PARTY COPY OUT / IN service actions (SPC-4 6.4, 6.18; the LID1 forms).
inline constexpr uint8_t kSaExtendedCopyLid1 = 0x00;
inline constexpr uint8_t kSaCopyStatusLid1 = 0x00;
inline constexpr uint8_t kSaOperatingParameters = 0x03;
inline constexpr uint8_t kSaFailedSegmentDetailsLid1 = 0x04;

// SPC-4 4.2.5.1: the CDB length follows from the opcode's group code (bits 7..5). 0 for groups
// whose length the opcode alone does not fix (variable length, reserved, vendor specific).
constexpr uint8_t CdbLengthForOpcode(uint8_t opcode) {
  switch (opcode >> 5) {
    case 0:
      return 6;
    case 1:
    case 2:
      return 10;
    case 4:
      return 16;
    case 5:
      return 12;
    default:
      return 0;
  }
}

}  // namespace iscsigw::scsi
