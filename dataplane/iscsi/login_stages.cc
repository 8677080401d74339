#include "dataplane/iscsi/login_stages.h"

namespace iscsigw::iscsi {
namespace {

constexpr uint8_t kSecurityStage = 0;
constexpr uint8_t kOperationalStage = 1;

LoginStages::Where StageOf(uint8_t code) {
  switch (code) {
    case kSecurityStage:
      return LoginStages::Where::kSecurity;
    case kOperationalStage:
      return LoginStages::Where::kOperational;
    default:
      return LoginStages::Where::kFullFeature;
  }
}

}  // namespace

LoginStatus LoginStages::Check(const LoginStageFields& r, std::string* why) const {
  if (r.csg != kSecurityStage && r.csg != kOperationalStage) {
    *why = "CSG " + std::to_string(r.csg) + " is not a login stage";
    return LoginStatus::kInitiatorError;
  }
  if (where_ == Where::kFullFeature) {
    *why = "login request after the login ended";
    return LoginStatus::kInitiatorError;
  }
  if (where_ != Where::kNotStarted && StageOf(r.csg) != where_) {
    *why = "CSG " + std::to_string(r.csg) + " is not the stage the target is in (" +
           std::to_string(where_ == Where::kSecurity ? kSecurityStage : kOperationalStage) + ")";
    return LoginStatus::kInitiatorError;
  }
  if (r.cont) {
    if (r.transit) {
      *why = "C=1 with T=1";
      return LoginStatus::kInitiatorError;
    }
    return LoginStatus::kSuccess;
  }
  if (r.transit && (r.nsg <= r.csg || r.nsg == 2)) {
    *why = "T=1 to NSG " + std::to_string(r.nsg) + " from CSG " + std::to_string(r.csg);
    return LoginStatus::kInitiatorError;
  }
  return LoginStatus::kSuccess;
}

LoginStatus LoginStages::CheckAuthentication(const LoginStageFields& r, std::string* why) const {
  if (r.csg != kSecurityStage && !authentication_satisfied()) {
    *why = "operational stage before the required authentication succeeded";
    return LoginStatus::kAuthenticationFailure;
  }
  return LoginStatus::kSuccess;
}

bool LoginStages::MayTransit(const LoginStageFields& r) const {
  if (!r.transit || r.cont) return false;
  return r.csg != kSecurityStage || authentication_satisfied();
}

void LoginStages::Answered(const LoginStageFields& r, bool transit) {
  // A transit is only answered to a checked request, so its NSG is 1 or 3.
  where_ = StageOf(transit ? r.nsg : r.csg);
}

}  // namespace iscsigw::iscsi
