// RFC 7143 opcodes, reason codes and fixed values of the Basic Header Segment.
#pragma once

#include <cstdint>

namespace iscsigw::pdu {

inline constexpr uint32_t kBhsLength = 48;
inline constexpr uint32_t kDigestLength = 4;
inline constexpr uint32_t kReservedTag = 0xffffffff;  // RFC 7143 11.18.4 / 11.19.4
inline constexpr uint32_t kMaxDataSegmentLength = (1u << 24) - 1;

// RFC 7143 11.2.1.2
enum class Opcode : uint8_t {
  // Initiator opcodes
  kNopOut = 0x00,
  kScsiCommand = 0x01,
  kTaskMgmtRequest = 0x02,
  kLoginRequest = 0x03,
  kTextRequest = 0x04,
  kDataOut = 0x05,
  kLogoutRequest = 0x06,
  kSnackRequest = 0x10,
  // Target opcodes
  kNopIn = 0x20,
  kScsiResponse = 0x21,
  kTaskMgmtResponse = 0x22,
  kLoginResponse = 0x23,
  kTextResponse = 0x24,
  kDataIn = 0x25,
  kLogoutResponse = 0x26,
  kR2T = 0x31,
  kAsyncMessage = 0x32,
  kReject = 0x3f,
};

// RFC 7143 11.17.1
enum class RejectReason : uint8_t {
  kDataDigestError = 0x02,
  kSnackReject = 0x03,
  kProtocolError = 0x04,
  kCommandNotSupported = 0x05,
  kImmediateCommandReject = 0x06,
  kTaskInProgress = 0x07,
  kInvalidDataAck = 0x08,
  kInvalidPduField = 0x09,
  kLongOpReject = 0x0a,
  kDeprecated = 0x0b,
  kWaitingForLogout = 0x0c,
};

// RFC 7143 11.5.1
enum class TmfFunction : uint8_t {
  kAbortTask = 1,
  kAbortTaskSet = 2,
  kClearAca = 3,
  kClearTaskSet = 4,
  kLogicalUnitReset = 5,
  kTargetWarmReset = 6,
  kTargetColdReset = 7,
  kTaskReassign = 8,
};

// RFC 7143 11.6.1
enum class TmfResponse : uint8_t {
  kFunctionComplete = 0,
  kTaskDoesNotExist = 1,
  kLunDoesNotExist = 2,
  kTaskStillAllegiant = 3,
  kTaskAllegianceReassignmentNotSupported = 4,
  kNotSupported = 5,
  kAuthorizationFailed = 6,
  kFunctionRejected = 255,
};

// RFC 7143 11.14.1 / 11.15.1
enum class LogoutReason : uint8_t {
  kCloseSession = 0,
  kCloseConnection = 1,
  kRemoveConnectionForRecovery = 2,
};
enum class LogoutResponse : uint8_t {
  kSuccess = 0,
  kCidNotFound = 1,
  kRecoveryNotSupported = 2,
  kCleanupFailed = 3,
};

// RFC 7143 11.4.2 (SCSI Response "Response" field)
enum class ScsiResponseCode : uint8_t {
  kCommandCompleted = 0x00,
  kTargetFailure = 0x01,
};

// RFC 7143 11.9.1
enum class AsyncEvent : uint8_t {
  kScsiAsyncEvent = 0,
  kLogoutRequest = 1,
  kDropConnection = 2,
  kDropAllConnections = 3,
  kNegotiationRequest = 4,
};

}  // namespace iscsigw::pdu
