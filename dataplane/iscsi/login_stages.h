// LoginStages: the stage machine of one login (RFC 7143 6.3, 11.12, 12), apart from the keys.
// It decides, from a Login Request's CSG, NSG, T and C and from whether the authentication the
// login requires has succeeded, whether the request may be taken in the stage the target is in,
// and whether the answer may carry T=1. The connection (connection_login.cc) asks it for every
// login PDU; the login fuzzer and the model test (tests/) hold it to the same rules.
//
// The rules (docs/security.md lists them with the attacks they stop):
//   1. The first request starts the login in its CSG, security (0) or operational (1). Every later
//      request names the stage the target is in: the target moves only when it answered T=1, and
//      then to the NSG it answered (6.3, 11.12.3). Any other CSG is a login reject 0x0200.
//   2. CSG 2 is reserved and 3 is full feature phase, not a login stage (11.12.3): 0x0200.
//   3. C=1 with T=1 (11.12.2): 0x0200. With C=1 the NSG is not looked at.
//   4. T=1 names a later stage that exists: NSG > CSG and NSG != 2 (11.12.3): 0x0200.
//   5. A login that requires authentication (a CHAP target, discovery CHAP) leaves the security
//      stage only once it succeeded (12.1.3): until then a request asking for T=1 in the security
//      stage is answered T=0, and a request in the operational stage (a first request that skips
//      security) is a login reject 0x0201.
//
// Pure and small; one per login, owned by the connection and used on its reactor thread only.
#pragma once

#include <cstdint>
#include <string>

#include "dataplane/iscsi/login_status.h"

namespace iscsigw::iscsi {

// The stage fields of one Login Request (RFC 7143 11.12.1).
struct LoginStageFields {
  uint8_t csg = 0;
  uint8_t nsg = 0;
  bool transit = false;
  bool cont = false;
};

class LoginStages {
 public:
  // Where the login is: before its first request, in a stage, or done (full feature phase).
  enum class Where : uint8_t { kNotStarted, kSecurity, kOperational, kFullFeature };

  // Rules 1 to 4 for a request in the current stage: kSuccess, or the status to reject it with
  // (*why then says which rule broke, for the log).
  LoginStatus Check(const LoginStageFields& r, std::string* why) const;

  // Whether this login must authenticate (set once, when the first request named its target or
  // discovery), and whether it has.
  void RequireAuthentication(bool required) { auth_required_ = required; }
  void Authenticated() { authenticated_ = true; }
  bool authentication_satisfied() const { return !auth_required_ || authenticated_; }

  // Rule 5 for a request that passed Check: kSuccess, or 0x0201 when the request is in the
  // operational stage of a login whose authentication has not succeeded.
  LoginStatus CheckAuthentication(const LoginStageFields& r, std::string* why) const;

  // Whether the answer to the request carries T=1: the initiator asked for it and, from the
  // security stage, the authentication the login requires has succeeded (rule 5).
  bool MayTransit(const LoginStageFields& r) const;

  // The answer went out: with T=1 the target is now in its NSG, otherwise still in its CSG.
  void Answered(const LoginStageFields& r, bool transit);

  Where where() const { return where_; }

 private:
  Where where_ = Where::kNotStarted;
  bool auth_required_ = false;
  bool authenticated_ = false;
};

}  // namespace iscsigw::iscsi
