#include "dataplane/iscsi/chap.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

namespace iscsigw::iscsi {

namespace {

const EVP_MD* Md(ChapAlgorithm a) {
  switch (a) {
    case ChapAlgorithm::kMd5:
      return EVP_md5();
    case ChapAlgorithm::kSha1:
      return EVP_sha1();
    case ChapAlgorithm::kSha256:
      return EVP_sha256();
    case ChapAlgorithm::kSha3_256:
      return EVP_sha3_256();
  }
  return nullptr;
}

std::optional<ChapAlgorithm> ParseAlgorithm(std::string_view v) {
  unsigned n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  if (n >= 5 && n <= 8) return static_cast<ChapAlgorithm>(n);
  return std::nullopt;
}

// CHAP_I: a decimal (or 0x hex) number 0..255 (RFC 7143 12.1.3, RFC 1994 identifier).
std::optional<uint8_t> ParseIdentifier(std::string_view v) {
  unsigned n = 0;
  int base = 10;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
    v.remove_prefix(2);
    base = 16;
  }
  if (v.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n, base);
  if (ec != std::errc() || p != v.data() + v.size() || n > 255) return std::nullopt;
  return static_cast<uint8_t>(n);
}

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

const pdu::KeyValue* Find(const std::vector<pdu::KeyValue>& in, std::string_view key) {
  for (const auto& kv : in) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

bool Printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c >= 0x20 && c != 0x7f; });
}

}  // namespace

Status ValidateChapCredentials(const ChapCredentials& c, std::string_view who) {
  const std::string w(who);
  if (c.user.empty()) {
    if (!c.secret.empty() || c.mutual()) {
      return InvalidArgument(w + "chap.user is empty but a secret or mutual credentials are set");
    }
    return Status::Ok();
  }
  if (c.user.size() > kMaxChapNameBytes || !Printable(c.user)) {
    return InvalidArgument(w + "chap.user must be 1.." + std::to_string(kMaxChapNameBytes) +
                           " printable characters");
  }
  if (c.secret.size() < kMinChapSecretBytes) {
    return InvalidArgument(w + "chap.secret is " + std::to_string(c.secret.size()) +
                           " bytes; RFC 7143 requires at least " +
                           std::to_string(kMinChapSecretBytes));
  }
  if (c.secret.size() > kMaxChapSecretBytes) {
    return InvalidArgument(w + "chap.secret is longer than " + std::to_string(kMaxChapSecretBytes) +
                           " bytes");
  }
  if (c.mutual_user.empty() != c.mutual_secret.empty()) {
    return InvalidArgument(w + "chap.mutual_user and chap.mutual_secret must be set together");
  }
  if (c.mutual()) {
    if (c.mutual_user.size() > kMaxChapNameBytes || !Printable(c.mutual_user)) {
      return InvalidArgument(w + "chap.mutual_user must be 1.." +
                             std::to_string(kMaxChapNameBytes) + " printable characters");
    }
    if (c.mutual_secret.size() < kMinChapSecretBytes) {
      return InvalidArgument(w + "chap.mutual_secret is " + std::to_string(c.mutual_secret.size()) +
                             " bytes; RFC 7143 requires at least " +
                             std::to_string(kMinChapSecretBytes));
    }
    if (c.mutual_secret.size() > kMaxChapSecretBytes) {
      return InvalidArgument(w + "chap.mutual_secret is longer than " +
                             std::to_string(kMaxChapSecretBytes) + " bytes");
    }
    if (c.mutual_secret == c.secret) {
      return InvalidArgument(w +
                             "chap.mutual_secret must differ from chap.secret (RFC 7143 9.2.1)");
    }
  }
  return Status::Ok();
}

size_t ChapDigestLength(ChapAlgorithm a) {
  const EVP_MD* md = Md(a);
  return md ? static_cast<size_t>(EVP_MD_get_size(md)) : 0;
}

std::vector<uint8_t> ChapResponse(ChapAlgorithm a, uint8_t id, std::string_view secret,
                                  std::span<const uint8_t> challenge) {
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, Md(a), nullptr) == 1 &&
            EVP_DigestUpdate(ctx, &id, 1) == 1 &&
            EVP_DigestUpdate(ctx, secret.data(), secret.size()) == 1 &&
            EVP_DigestUpdate(ctx, challenge.data(), challenge.size()) == 1 &&
            EVP_DigestFinal_ex(ctx, out.data(), &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) return {};
  out.resize(len);
  return out;
}

std::optional<std::vector<uint8_t>> DecodeChapBinary(std::string_view v) {
  if (v.size() < 3 || v[0] != '0') return std::nullopt;
  const char kind = v[1];
  v.remove_prefix(2);
  std::vector<uint8_t> out;
  if (kind == 'x' || kind == 'X') {
    // RFC 7143 6.1: hex-constant; an odd number of digits has an implied leading zero.
    size_t i = 0;
    if (v.size() % 2 == 1) {
      const int h = HexValue(v[0]);
      if (h < 0) return std::nullopt;
      out.push_back(static_cast<uint8_t>(h));
      i = 1;
    }
    for (; i < v.size(); i += 2) {
      const int hi = HexValue(v[i]);
      const int lo = HexValue(v[i + 1]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<uint8_t>(hi << 4 | lo));
    }
    return out;
  }
  if (kind == 'b' || kind == 'B') {
    uint32_t acc = 0;
    int bits = 0;
    size_t pad = 0;
    for (char c : v) {
      if (c == '=') {
        ++pad;
        continue;
      }
      if (pad > 0) return std::nullopt;
      const int x = Base64Value(c);
      if (x < 0) return std::nullopt;
      acc = (acc << 6) | static_cast<uint32_t>(x);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out.push_back(static_cast<uint8_t>(acc >> bits));
      }
    }
    if (pad > 2 || out.empty()) return std::nullopt;
    return out;
  }
  return std::nullopt;
}

std::string EncodeChapHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  s.reserve(2 + bytes.size() * 2);
  for (uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

Status ValidateMutualSecretsApart(
    const std::vector<std::pair<std::string, const ChapCredentials*>>& sets) {
  std::map<std::string_view, const std::string*> initiator_secrets;  // secret -> whose
  for (const auto& [who, creds] : sets) {
    if (creds->enabled()) initiator_secrets.emplace(creds->secret, &who);
  }
  for (const auto& [who, creds] : sets) {
    if (!creds->mutual()) continue;
    auto it = initiator_secrets.find(creds->mutual_secret);
    if (it != initiator_secrets.end()) {
      return InvalidArgument(who + ": chap.mutual_secret is the initiator secret of " +
                             *it->second +
                             "; RFC 7143 9.2.1 forbids a secret that authenticates initiators "
                             "to authenticate the target");
    }
  }
  return Status::Ok();
}

Result<ChapDigests> ParseChapDigests(std::string_view list) {
  static constexpr std::pair<std::string_view, ChapAlgorithm> kNames[] = {
      {"md5", ChapAlgorithm::kMd5},
      {"sha-1", ChapAlgorithm::kSha1},
      {"sha-256", ChapAlgorithm::kSha256},
      {"sha3-256", ChapAlgorithm::kSha3_256}};
  ChapDigests d{0};
  while (true) {
    const size_t comma = list.find(',');
    std::string item(list.substr(0, comma));
    std::transform(item.begin(), item.end(), item.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    bool known = false;
    for (const auto& [name, a] : kNames) {
      if (item == name) {
        d.mask |= static_cast<uint16_t>(1u << static_cast<unsigned>(a));
        known = true;
      }
    }
    if (!known) {
      return InvalidArgument("CHAP digest \"" + item +
                             "\" is not one of MD5, SHA-1, SHA-256, SHA3-256");
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return d;
}

ChapAuthenticator::ChapAuthenticator(ChapCredentials creds, ChapDigests digests)
    : creds_(std::move(creds)), digests_(digests) {}

void ChapAuthenticator::SetChallengeForTest(uint8_t id, std::vector<uint8_t> challenge) {
  test_challenge_.emplace(id, std::move(challenge));
}

ChapAuthenticator::Outcome ChapAuthenticator::Fail(Outcome o, std::string why) {
  state_ = State::kFailed;
  error_ = std::move(why);
  return o;
}

ChapAuthenticator::Outcome ChapAuthenticator::Step(const std::vector<pdu::KeyValue>& in,
                                                   std::vector<pdu::KeyValue>* out) {
  const auto* a = Find(in, "CHAP_A");
  const auto* n = Find(in, "CHAP_N");
  const auto* r = Find(in, "CHAP_R");
  const auto* i = Find(in, "CHAP_I");
  const auto* c = Find(in, "CHAP_C");
  switch (state_) {
    case State::kFailed:
      return Outcome::kAuthFailed;
    case State::kDone:
      if (a || n || r || i || c) return Fail(Outcome::kProtocolError, "CHAP key after CHAP ended");
      return Outcome::kDone;
    case State::kWaitAlgorithm: {
      if (n || r || i || c) {
        return Fail(Outcome::kProtocolError, "CHAP_N/CHAP_R/CHAP_I/CHAP_C before CHAP_A");
      }
      if (a == nullptr) return Outcome::kContinue;  // e.g. the request that carried AuthMethod
      // RFC 7143 12.1.3: the target answers with the first algorithm of the list it supports.
      std::optional<ChapAlgorithm> chosen;
      std::string_view list = a->value;
      while (!chosen && !list.empty()) {
        const size_t comma = list.find(',');
        chosen = ParseAlgorithm(list.substr(0, comma));
        if (chosen && !digests_.Allows(*chosen)) chosen.reset();  // refused by --chap-digests
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
      if (!chosen) {
        out->push_back({"CHAP_A", "Reject"});
        return Fail(Outcome::kAuthFailed, "no supported algorithm in CHAP_A=" + a->value);
      }
      algorithm_ = *chosen;
      if (test_challenge_) {
        id_ = test_challenge_->first;
        challenge_ = test_challenge_->second;
        test_challenge_.reset();
      } else {
        // At least 16 bytes, and as long as the digest (RFC 7143 9.2.1: unpredictable challenges).
        challenge_.resize(std::max<size_t>(16, ChapDigestLength(algorithm_)));
        if (RAND_bytes(challenge_.data(), static_cast<int>(challenge_.size())) != 1 ||
            RAND_bytes(&id_, 1) != 1) {
          return Fail(Outcome::kAuthFailed, "no random bytes for the CHAP challenge");
        }
      }
      out->push_back({"CHAP_A", std::to_string(static_cast<unsigned>(algorithm_))});
      out->push_back({"CHAP_I", std::to_string(id_)});
      out->push_back({"CHAP_C", EncodeChapHex(challenge_)});
      state_ = State::kWaitResponse;
      return Outcome::kContinue;
    }
    case State::kWaitResponse: {
      if (a) return Fail(Outcome::kProtocolError, "CHAP_A sent twice");
      if (n == nullptr || r == nullptr) {
        return Fail(Outcome::kAuthFailed, "CHAP_N and CHAP_R missing after the challenge");
      }
      const auto response = DecodeChapBinary(r->value);
      const std::vector<uint8_t> expected =
          ChapResponse(algorithm_, id_, creds_.secret, challenge_);
      // Both comparisons always run, in constant time for equal lengths.
      const bool name_ok =
          n->value.size() == creds_.user.size() &&
          CRYPTO_memcmp(n->value.data(), creds_.user.data(), creds_.user.size()) == 0;
      const bool resp_ok = response && !expected.empty() && response->size() == expected.size() &&
                           CRYPTO_memcmp(response->data(), expected.data(), expected.size()) == 0;
      if (!name_ok || !resp_ok) {
        return Fail(Outcome::kAuthFailed,
                    !name_ok ? "CHAP_N does not match" : "CHAP_R does not match");
      }
      if ((i == nullptr) != (c == nullptr)) {
        return Fail(Outcome::kProtocolError, "mutual CHAP needs both CHAP_I and CHAP_C");
      }
      if (i != nullptr) {
        if (!creds_.mutual()) {
          return Fail(Outcome::kAuthFailed, "mutual CHAP asked for but not configured");
        }
        const auto id = ParseIdentifier(i->value);
        const auto challenge = DecodeChapBinary(c->value);
        if (!id || !challenge || challenge->empty() || challenge->size() > kMaxChapChallengeBytes) {
          return Fail(Outcome::kProtocolError, "malformed CHAP_I or CHAP_C");
        }
        // RFC 7143 9.2.1: a challenge that reflects ours would let the initiator use the target
        // as an oracle for its own response.
        if (*challenge == challenge_) {
          return Fail(Outcome::kAuthFailed, "initiator CHAP_C reflects the target's challenge");
        }
        const auto mine = ChapResponse(algorithm_, *id, creds_.mutual_secret, *challenge);
        if (mine.empty()) return Fail(Outcome::kAuthFailed, "digest failed");
        out->push_back({"CHAP_N", creds_.mutual_user});
        out->push_back({"CHAP_R", EncodeChapHex(mine)});
        mutual_done_ = true;
      }
      state_ = State::kDone;
      // The challenge is single-use: clear it so nothing can verify against it again.
      std::fill(challenge_.begin(), challenge_.end(), 0);
      return Outcome::kDone;
    }
  }
  return Outcome::kAuthFailed;
}

}  // namespace iscsigw::iscsi
