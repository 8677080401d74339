// Sense data (SPC-4 4.5): sense keys, additional sense codes, and the helpers that turn a Task into
// CHECK CONDITION with fixed-format sense data. Pure functions on the Task; no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dataplane/scsi/task.h"

namespace iscsigw::scsi {

// SPC-4 4.5.6, table 54.
enum class SenseKey : uint8_t {
  kNoSense = 0x0,
  kRecoveredError = 0x1,
  kNotReady = 0x2,
  kMediumError = 0x3,
  kHardwareError = 0x4,
  kIllegalRequest = 0x5,
  kUnitAttention = 0x6,
  kDataProtect = 0x7,
  kBlankCheck = 0x8,
  kVendorSpecific = 0x9,
  kCopyAborted = 0xA,
  kAbortedCommand = 0xB,
  kVolumeOverflow = 0xD,
  kMiscompare = 0xE,
  kCompleted = 0xF,
};

// An ADDITIONAL SENSE CODE / ADDITIONAL SENSE CODE QUALIFIER pair (SPC-4 4.5.6, table 55).
struct Asc {
  uint8_t asc = 0;
  uint8_t ascq = 0;

  static const Asc kNoAdditionalSenseInformation;                    // 00h/00h
  static const Asc kWriteError;                                      // 0Ch/00h
  static const Asc kInvalidFieldInCommandInformationUnit;            // 0Eh/03h
  static const Asc kUnrecoveredReadError;                            // 11h/00h
  static const Asc kParameterListLengthError;                        // 1Ah/00h
  static const Asc kMiscompareDuringVerify;                          // 1Dh/00h
  static const Asc kInvalidCommandOperationCode;                     // 20h/00h
  static const Asc kLbaOutOfRange;                                   // 21h/00h
  static const Asc kInvalidFieldInCdb;                               // 24h/00h
  static const Asc kLogicalUnitNotSupported;                         // 25h/00h
  static const Asc kInvalidFieldInParameterList;                     // 26h/00h
  static const Asc kWriteProtected;                                  // 27h/00h
  static const Asc kPowerOnReset;                                    // 29h/00h
  static const Asc kPowerOnOccurred;                                 // 29h/01h
  static const Asc kBusDeviceReset;                                  // 29h/03h
  static const Asc kModeParametersChanged;                           // 2Ah/01h
  static const Asc kCapacityDataChanged;                             // 2Ah/09h
  static const Asc kAsymmetricAccessStateChanged;                    // 2Ah/06h
  static const Asc kReservationsPreempted;                           // 2Ah/03h
  static const Asc kReservationsReleased;                            // 2Ah/04h
  static const Asc kRegistrationsPreempted;                          // 2Ah/05h
  static const Asc kInvalidReleaseOfPersistentReservation;           // 26h/04h
  static const Asc kSavingParametersNotSupported;                    // 39h/00h
  static const Asc kLogicalUnitNotReadyCauseNotReportable;           // 04h/00h
  static const Asc kLogicalUnitNotReadyInitializingCommandRequired;  // 04h/02h
  static const Asc kReportedLunsDataChanged;                         // 3Fh/0Eh
  static const Asc kInternalTargetFailure;                           // 44h/00h
  static const Asc kCommandsClearedByAnotherInitiator;               // 2Fh/00h
  // Third-party copy (SPC-4 6.4).
  static const Asc kOperationInProgress;               // 00h/16h
  static const Asc kUnreachableCopyTarget;             // 08h/04h
  static const Asc kTooManyTargetDescriptors;          // 26h/06h
  static const Asc kUnsupportedTargetDescriptorType;   // 26h/07h
  static const Asc kTooManySegmentDescriptors;         // 26h/08h
  static const Asc kUnsupportedSegmentDescriptorType;  // 26h/09h
  static const Asc kInlineDataLengthExceeded;          // 26h/0Bh
  static const Asc kInsufficientResources;             // 55h/03h

  friend constexpr bool operator==(Asc a, Asc b) { return a.asc == b.asc && a.ascq == b.ascq; }
};

inline constexpr Asc Asc::kNoAdditionalSenseInformation{0x00, 0x00};
inline constexpr Asc Asc::kWriteError{0x0C, 0x00};
inline constexpr Asc Asc::kInvalidFieldInCommandInformationUnit{0x0E, 0x03};
inline constexpr Asc Asc::kUnrecoveredReadError{0x11, 0x00};
inline constexpr Asc Asc::kParameterListLengthError{0x1A, 0x00};
inline constexpr Asc Asc::kMiscompareDuringVerify{0x1D, 0x00};
inline constexpr Asc Asc::kInvalidCommandOperationCode{0x20, 0x00};
inline constexpr Asc Asc::kLbaOutOfRange{0x21, 0x00};
inline constexpr Asc Asc::kInvalidFieldInCdb{0x24, 0x00};
inline constexpr Asc Asc::kLogicalUnitNotSupported{0x25, 0x00};
inline constexpr Asc Asc::kInvalidFieldInParameterList{0x26, 0x00};
inline constexpr Asc Asc::kWriteProtected{0x27, 0x00};
inline constexpr Asc Asc::kPowerOnReset{0x29, 0x00};
inline constexpr Asc Asc::kPowerOnOccurred{0x29, 0x01};
inline constexpr Asc Asc::kBusDeviceReset{0x29, 0x03};
inline constexpr Asc Asc::kModeParametersChanged{0x2A, 0x01};
inline constexpr Asc Asc::kCapacityDataChanged{0x2A, 0x09};
inline constexpr Asc Asc::kAsymmetricAccessStateChanged{0x2A, 0x06};
inline constexpr Asc Asc::kReservationsPreempted{0x2A, 0x03};
inline constexpr Asc Asc::kReservationsReleased{0x2A, 0x04};
inline constexpr Asc Asc::kRegistrationsPreempted{0x2A, 0x05};
inline constexpr Asc Asc::kInvalidReleaseOfPersistentReservation{0x26, 0x04};
inline constexpr Asc Asc::kSavingParametersNotSupported{0x39, 0x00};
inline constexpr Asc Asc::kLogicalUnitNotReadyCauseNotReportable{0x04, 0x00};
inline constexpr Asc Asc::kLogicalUnitNotReadyInitializingCommandRequired{0x04, 0x02};
inline constexpr Asc Asc::kReportedLunsDataChanged{0x3F, 0x0E};
inline constexpr Asc Asc::kInternalTargetFailure{0x44, 0x00};
inline constexpr Asc Asc::kCommandsClearedByAnotherInitiator{0x2F, 0x00};
inline constexpr Asc Asc::kOperationInProgress{0x00, 0x16};
inline constexpr Asc Asc::kUnreachableCopyTarget{0x08, 0x04};
inline constexpr Asc Asc::kTooManyTargetDescriptors{0x26, 0x06};
inline constexpr Asc Asc::kUnsupportedTargetDescriptorType{0x26, 0x07};
inline constexpr Asc Asc::kTooManySegmentDescriptors{0x26, 0x08};
inline constexpr Asc Asc::kUnsupportedSegmentDescriptorType{0x26, 0x09};
inline constexpr Asc Asc::kInlineDataLengthExceeded{0x26, 0x0B};
inline constexpr Asc Asc::kInsufficientResources{0x55, 0x03};

// Length of fixed-format sense data as we build it (SPC-4 4.5.3: 8-byte header + 10 additional).
inline constexpr size_t kFixedSenseLength = 18;
// Length of descriptor-format sense data without descriptors (SPC-4 4.5.2).
inline constexpr size_t kDescriptorSenseLength = 8;

// Sense-key-specific field pointer (SPC-4 4.5.2.4.2): which CDB or parameter-list byte (and,
// optionally, bit) was wrong.
struct FieldPointer {
  bool in_cdb = true;  // C/D bit: 1 = CDB, 0 = parameter list
  uint16_t byte = 0;   // FIELD POINTER
  int8_t bit = -1;     // BIT POINTER (0..7) or -1 when BPV is 0
};

// Writes fixed-format sense data (response code 70h, current error) into out[0..18); sks may be
// null. Returns kFixedSenseLength.
size_t BuildFixedSense(uint8_t* out, SenseKey key, Asc asc, const FieldPointer* sks = nullptr);
// Writes descriptor-format sense data (response code 72h) without descriptors into out[0..8).
size_t BuildDescriptorSense(uint8_t* out, SenseKey key, Asc asc);

// CHECK CONDITION with fixed-format sense; clears any Data-In already produced.
void SetCheckCondition(Task& task, SenseKey key, Asc asc);
inline void SetCheckCondition(Task& task, SenseKey key, uint8_t asc, uint8_t ascq) {
  SetCheckCondition(task, key, Asc{asc, ascq});
}
// ILLEGAL REQUEST / INVALID FIELD IN CDB (24h/00h) pointing at cdb[byte] (bit: -1 for the byte).
void SetInvalidFieldInCdb(Task& task, uint16_t byte, int8_t bit = -1);
// Reserved CDB bytes cdb[first..last] must be zero: otherwise INVALID FIELD IN CDB pointing at the
// first non-zero one, and true.
bool RejectNonZeroCdbBytes(Task& task, uint16_t first, uint16_t last);
// ILLEGAL REQUEST / INVALID FIELD IN PARAMETER LIST (26h/00h) pointing at the parameter byte.
void SetInvalidFieldInParameterList(Task& task, uint16_t byte, int8_t bit = -1);
// ILLEGAL REQUEST with another parameter-list code (e.g. TOO MANY TARGET DESCRIPTORS) pointing at
// the parameter byte.
void SetParameterListError(Task& task, Asc asc, uint16_t byte, int8_t bit = -1);
// CHECK CONDITION with the INFORMATION field set (VALID=1), e.g. MISCOMPARE with the offset of the
// first differing byte (SBC-3 5.2). Values above 32 bits use descriptor format (SPC-4 4.5.2.2).
void SetCheckConditionWithInfo(Task& task, SenseKey key, Asc asc, uint64_t information);

}  // namespace iscsigw::scsi
