// CHAP authentication for iSCSI login (RFC 7143 12.1.3, RFC 1994): the target side of the
// security-stage exchange, one-way (the target checks the initiator) and mutual (the initiator also
// checks the target).
//
//   I -> T  AuthMethod=CHAP[,...]           (answered by the Negotiator)
//   I -> T  CHAP_A=<A1,A2,...>              T -> I  CHAP_A=<A> CHAP_I=<I> CHAP_C=<C>
//   I -> T  CHAP_N=<N> CHAP_R=<R> [CHAP_I=<I'> CHAP_C=<C'>]   T -> I  [CHAP_N=<N'> CHAP_R=<R'>]
//
// Algorithms: 5 MD5 (RFC 1994), 6 SHA-1, 7 SHA-256, 8 SHA3-256 (the IANA iSCSI CHAP registry, as
// Linux offers them); the target picks the first of the initiator's list it supports. Challenges
// are fresh random bytes per login (at least 16); responses are compared in constant time; an
// initiator challenge equal to the target's (a reflection attack) is refused.
//
// Secrets never leave this object except as digests, and are never logged. One authenticator per
// login, owned by the connection and used on its reactor thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "dataplane/pdu/text.h"

namespace iscsigw::iscsi {

// Credentials of one target (or of discovery). Empty user: CHAP not required.
struct ChapCredentials {
  std::string user;           // CHAP_N the initiator must send
  std::string secret;         // shared with the initiator
  std::string mutual_user;    // CHAP_N the target answers with in mutual CHAP (empty: one-way)
  std::string mutual_secret;  // the target's secret for mutual CHAP

  bool enabled() const { return !user.empty(); }
  bool mutual() const { return !mutual_user.empty(); }
  bool operator==(const ChapCredentials&) const = default;
};

// RFC 7143 9.2.1 (RFC 3720 8.2.1): CHAP secrets of at least 96 bits.
inline constexpr size_t kMinChapSecretBytes = 12;
inline constexpr size_t kMaxChapSecretBytes = 255;
inline constexpr size_t kMaxChapNameBytes = 255;
// Upper bound on an initiator challenge (RFC 7143 12.1.3 leaves it to the target; 1024 bytes).
inline constexpr size_t kMaxChapChallengeBytes = 1024;

// Checks credentials at configuration time. `who` prefixes the message ("target X: chap: ...").
// Refuses short or long secrets, a mutual secret equal to the initiator secret (RFC 7143 9.2.1: a
// secret used for initiator authentication MUST NOT be used to authenticate the target), a mutual
// half without the one-way half, and names with control characters.
Status ValidateChapCredentials(const ChapCredentials& creds, std::string_view who);

// RFC 7143 9.2.1 across a whole gateway: a secret the target authenticates itself with (a mutual
// secret) must not be one that any initiator authenticates with, on any target or for discovery:
// otherwise an initiator that knows its own secret could pose as the gateway to another. Each
// entry names its set ("target X", "discovery"). The error names both sets, never the secret.
Status ValidateMutualSecretsApart(
    const std::vector<std::pair<std::string, const ChapCredentials*>>& sets);

enum class ChapAlgorithm : uint8_t { kMd5 = 5, kSha1 = 6, kSha256 = 7, kSha3_256 = 8 };

// The digests a gateway accepts in CHAP_A (--chap-digests): a bit per ChapAlgorithm, all by
// default. The target still answers the first of the initiator's list that it accepts.
struct ChapDigests {
  uint16_t mask = 0x1e0;  // bit N for algorithm N (5..8)
  bool Allows(ChapAlgorithm a) const { return (mask >> static_cast<unsigned>(a)) & 1; }
  bool operator==(const ChapDigests&) const = default;
};
// Parses a comma-separated list of MD5, SHA-1, SHA-256, SHA3-256 (any case, any order, at least
// one); the error names the item it does not know.
Result<ChapDigests> ParseChapDigests(std::string_view list);

size_t ChapDigestLength(ChapAlgorithm a);
// RFC 1994 4.1: Response = H(Identifier || secret || Challenge).
std::vector<uint8_t> ChapResponse(ChapAlgorithm a, uint8_t id, std::string_view secret,
                                  std::span<const uint8_t> challenge);
// RFC 7143 6.1 binary-value: "0x" hex or "0b" base64. nullopt when malformed.
std::optional<std::vector<uint8_t>> DecodeChapBinary(std::string_view v);
std::string EncodeChapHex(std::span<const uint8_t> bytes);

class ChapAuthenticator {
 public:
  enum class Outcome {
    kContinue,       // answered (maybe nothing); the exchange is not finished
    kDone,           // the initiator (and, if asked, the target) is authenticated
    kAuthFailed,     // login reject 0x0201
    kProtocolError,  // login reject 0x0200: CHAP keys out of order or malformed
  };

  explicit ChapAuthenticator(ChapCredentials creds, ChapDigests digests = {});

  // Consumes the CHAP_* keys of one security-stage login request and appends the answers to *out.
  Outcome Step(const std::vector<pdu::KeyValue>& in, std::vector<pdu::KeyValue>* out);

  bool done() const { return state_ == State::kDone; }
  // Why the last step failed (names the key; never contains a secret).
  const std::string& error() const { return error_; }
  // Whether the initiator asked the target to authenticate itself.
  bool mutual_done() const { return mutual_done_; }

  // Fixes the next challenge and identifier instead of random ones.
  void SetChallengeForTest(uint8_t id, std::vector<uint8_t> challenge);

 private:
  enum class State { kWaitAlgorithm, kWaitResponse, kDone, kFailed };
  Outcome Fail(Outcome o, std::string why);

  const ChapCredentials creds_;
  const ChapDigests digests_;
  State state_ = State::kWaitAlgorithm;
  ChapAlgorithm algorithm_ = ChapAlgorithm::kMd5;
  uint8_t id_ = 0;
  std::vector<uint8_t> challenge_;
  std::optional<std::pair<uint8_t, std::vector<uint8_t>>> test_challenge_;
  bool mutual_done_ = false;
  std::string error_;
};

}  // namespace iscsigw::iscsi
