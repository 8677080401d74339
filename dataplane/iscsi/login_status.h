// Login response Status-Class and Status-Detail (RFC 7143 11.13.5).
// The high byte is the Status-Class (0 success, 1 redirection, 2 initiator error, 3 target error),
// the low byte the Status-Detail. Pure values, any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace iscsigw::iscsi {

// RFC 7143 11.13.5 status class (high byte) and detail (low byte).
enum class LoginStatus : uint16_t {
  kSuccess = 0x0000,
  kTargetMovedTemporarily = 0x0101,
  kTargetMovedPermanently = 0x0102,
  kInitiatorError = 0x0200,
  kAuthenticationFailure = 0x0201,
  kAuthorizationFailure = 0x0202,
  kNotFound = 0x0203,
  kTargetRemoved = 0x0204,
  kUnsupportedVersion = 0x0205,
  kTooManyConnections = 0x0206,
  kMissingParameter = 0x0207,
  kCantIncludeInSession = 0x0208,
  kSessionTypeNotSupported = 0x0209,
  kSessionDoesNotExist = 0x020a,
  kInvalidDuringLogin = 0x020b,
  kTargetError = 0x0300,
  kServiceUnavailable = 0x0301,
  kOutOfResources = 0x0302,
};

// Status-Class byte of the Login Response (RFC 7143 11.13.5).
constexpr uint8_t LoginStatusClass(LoginStatus s) {
  return static_cast<uint8_t>(static_cast<uint16_t>(s) >> 8);
}
// Status-Detail byte of the Login Response (RFC 7143 11.13.5).
constexpr uint8_t LoginStatusDetail(LoginStatus s) {
  return static_cast<uint8_t>(static_cast<uint16_t>(s) & 0xff);
}

constexpr std::string_view LoginStatusName(LoginStatus s) {
  switch (s) {
    case LoginStatus::kSuccess:
      return "Success";
    case LoginStatus::kTargetMovedTemporarily:
      return "TargetMovedTemporarily";
    case LoginStatus::kTargetMovedPermanently:
      return "TargetMovedPermanently";
    case LoginStatus::kInitiatorError:
      return "InitiatorError";
    case LoginStatus::kAuthenticationFailure:
      return "AuthenticationFailure";
    case LoginStatus::kAuthorizationFailure:
      return "AuthorizationFailure";
    case LoginStatus::kNotFound:
      return "NotFound";
    case LoginStatus::kTargetRemoved:
      return "TargetRemoved";
    case LoginStatus::kUnsupportedVersion:
      return "UnsupportedVersion";
    case LoginStatus::kTooManyConnections:
      return "TooManyConnections";
    case LoginStatus::kMissingParameter:
      return "MissingParameter";
    case LoginStatus::kCantIncludeInSession:
      return "CantIncludeInSession";
    case LoginStatus::kSessionTypeNotSupported:
      return "SessionTypeNotSupported";
    case LoginStatus::kSessionDoesNotExist:
      return "SessionDoesNotExist";
    case LoginStatus::kInvalidDuringLogin:
      return "InvalidDuringLogin";
    case LoginStatus::kTargetError:
      return "TargetError";
    case LoginStatus::kServiceUnavailable:
      return "ServiceUnavailable";
    case LoginStatus::kOutOfResources:
      return "OutOfResources";
  }
  return "Unknown";
}

}  // namespace iscsigw::iscsi
