#include "csi/volume_model.h"

#include <arpa/inet.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace iscsigw::csi {
namespace {

using ::csi::v1::VolumeCapability;

constexpr size_t kMaxPlainVolumeName = 64;
constexpr size_t kMaxSnapshotName = 128;
constexpr std::string_view kTokenPrefix = "after:";
constexpr std::string_view kCoParameterPrefix = "csi.storage.k8s.io/";

std::string ModeName(VolumeCapability::AccessMode::Mode mode) {
  return VolumeCapability::AccessMode::Mode_Name(mode).empty()
             ? std::to_string(static_cast<int>(mode))
             : VolumeCapability::AccessMode::Mode_Name(mode);
}

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 0xf];
  }
  return out;
}

// 32 hex digits of HMAC-SHA256(key, label NUL volume_id): 128 bits, within every CHAP secret
// limit (12..255 bytes). nullopt when OpenSSL refuses.
std::optional<std::string> DeriveSecret(const std::string& key, std::string_view label,
                                        std::string_view volume_id) {
  std::string msg(label);
  msg += '\0';
  msg += volume_id;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), md, &len) == nullptr ||
      len != SHA256_DIGEST_LENGTH) {
    return std::nullopt;
  }
  return Hex(md, 16);
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return Hex(md, sizeof(md));
}

bool IsPlainVolumeName(std::string_view name) {
  if (name.empty() || name.size() > kMaxPlainVolumeName) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  // The gateway takes these as full iSCSI names, not as names under its prefix.
  return !name.starts_with("iqn.") && !name.starts_with("eui.") && !name.starts_with("naa.");
}

std::string VolumeIdForName(std::string_view name) {
  if (IsPlainVolumeName(name)) return std::string(name);
  return "vol-" + Sha256Hex(name).substr(0, 32);
}

bool IsGatewaySnapshotName(std::string_view name) {
  if (name.empty() || name.size() > kMaxSnapshotName || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string SnapshotIdForName(std::string_view name) {
  std::string id = std::string(kSnapshotIdPrefix) + std::string(name);
  if (!name.empty() && IsGatewaySnapshotName(id)) return id;
  return std::string(kSnapshotIdPrefix) + "snap-" + Sha256Hex(name);
}

bool IsCsiSnapshotId(std::string_view id) {
  return id.starts_with(kSnapshotIdPrefix) && id.size() > kSnapshotIdPrefix.size() &&
         IsGatewaySnapshotName(id);
}

std::string VolumeAlias(std::string_view name, const ::csi::v1::VolumeContentSource& source,
                        bool own_chap) {
  std::string alias = std::string(kVolumeAliasPrefix) + std::string(name);
  const std::string_view tail = own_chap ? kOwnChapAliasTag : std::string_view();
  std::string kind, id;
  if (source.has_snapshot()) {
    kind = "snapshot";
    id = source.snapshot().snapshot_id();
  } else if (source.has_volume()) {
    kind = "volume";
    id = source.volume().volume_id();
  } else {
    return alias + std::string(tail);
  }
  const std::string head = alias + " <from " + kind + " ";
  if (head.size() + id.size() + 1 + tail.size() > kMaxAliasBytes) {
    id = "sha256:" + Sha256Hex(id).substr(0, 32);
  }
  return head + id + ">" + std::string(tail);
}

std::optional<std::string> VolumeIdOfTarget(std::string_view target_iqn) {
  if (!target_iqn.starts_with(kGatewayIqnPrefix)) return std::nullopt;
  std::string_view id = target_iqn.substr(kGatewayIqnPrefix.size());
  if (id.empty() || id.find(':') != std::string_view::npos) return std::nullopt;
  return std::string(id);
}

std::string BackingPathFor(std::string_view volume_id) { return std::string(volume_id) + ".img"; }

bool IsUnspecifiedPortal(std::string_view portal) {
  std::string_view host = portal;
  if (host.starts_with('[')) {
    const size_t end = host.find(']');
    host = host.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (host.empty()) return true;
  const std::string text(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return v4.s_addr == 0;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_UNSPECIFIED(&v6)) return true;
    static constexpr unsigned char kMappedZero[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(v6.s6_addr, kMappedZero, sizeof kMappedZero) == 0;
  }
  return false;  // a DNS name
}

std::string GatewayRequestId(std::string_view kind, const google::protobuf::MessageLite& key) {
  // Deterministic serialization: the same request always hashes the same, whatever the order
  // its fields were set in.
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    (void)key.SerializeToCodedStream(&coded);
  }
  return "csi-" + std::string(kind) + "-" + Sha256Hex(bytes).substr(0, 32);
}

Result<VolumeParams> ParseVolumeParameters(
    const google::protobuf::Map<std::string, std::string>& p) {
  VolumeParams out;
  for (const auto& [key, value] : p) {
    if (key == "blockSize") {
      if (value == "512") {
        out.block_size = 512;
      } else if (value == "4096") {
        out.block_size = 4096;
      } else {
        return InvalidArgument("parameter blockSize: '" + value + "' is not 512 or 4096");
      }
    } else if (key == "provisioning") {
      if (value != "thin" && value != "thick") {
        return InvalidArgument("parameter provisioning: '" + value + "' is not thin or thick");
      }
      out.thick = value == "thick";
    } else if (key == "direct") {
      if (value != "true" && value != "false") {
        return InvalidArgument("parameter direct: '" + value + "' is not true or false");
      }
      out.direct = value == "true";
    } else if (key == "chapPerVolume") {
      if (value != "true" && value != "false") {
        return InvalidArgument("parameter chapPerVolume: '" + value + "' is not true or false");
      }
      out.chap_per_volume = value == "true";
    } else if (!key.starts_with(kCoParameterPrefix)) {
      return InvalidArgument("unknown parameter '" + key +
                             "' (known: blockSize, provisioning, direct, chapPerVolume)");
    }
  }
  return out;
}

std::optional<uint64_t> RoundUp(uint64_t bytes, uint32_t block_size) {
  const uint64_t rem = bytes % block_size;
  if (rem == 0) return bytes;
  if (bytes > std::numeric_limits<uint64_t>::max() - (block_size - rem)) return std::nullopt;
  return bytes + (block_size - rem);
}

Result<uint64_t> VolumeBytes(const ::csi::v1::CapacityRange* range, uint32_t block_size) {
  const int64_t required = range ? range->required_bytes() : 0;
  const int64_t limit = range ? range->limit_bytes() : 0;
  if (required < 0 || limit < 0) {
    return InvalidArgument("capacity_range: required_bytes " + std::to_string(required) +
                           " and limit_bytes " + std::to_string(limit) + " must not be negative");
  }
  if (limit > 0 && limit < required) {
    return InvalidArgument("capacity_range: limit_bytes " + std::to_string(limit) +
                           " is below required_bytes " + std::to_string(required));
  }
  if (required == 0) {
    if (limit == 0 || static_cast<uint64_t>(limit) >= kDefaultVolumeBytes) {
      return kDefaultVolumeBytes;
    }
    const uint64_t down = static_cast<uint64_t>(limit) / block_size * block_size;
    if (down == 0) {
      return Status(StatusCode::kOutOfRange,
                    "capacity_range: limit_bytes " + std::to_string(limit) +
                        " is less than one block of " + std::to_string(block_size) + " bytes");
    }
    return down;
  }
  const auto up = RoundUp(static_cast<uint64_t>(required), block_size);
  if (!up || (limit > 0 && *up > static_cast<uint64_t>(limit))) {
    return Status(StatusCode::kOutOfRange,
                  "capacity_range: required_bytes " + std::to_string(required) +
                      " rounded up to the block size " + std::to_string(block_size) +
                      " exceeds limit_bytes " + std::to_string(limit));
  }
  return *up;
}

bool CapacityFits(uint64_t bytes, const ::csi::v1::CapacityRange* range) {
  if (range == nullptr) return true;
  if (range->required_bytes() > 0 && bytes < static_cast<uint64_t>(range->required_bytes())) {
    return false;
  }
  return range->limit_bytes() <= 0 || bytes <= static_cast<uint64_t>(range->limit_bytes());
}

std::string UnsupportedCapability(const VolumeCapability& cap) {
  if (cap.access_type_case() == VolumeCapability::ACCESS_TYPE_NOT_SET) {
    return "volume capability without an access type (block or mount)";
  }
  const auto mode = cap.access_mode().mode();
  switch (mode) {
    case VolumeCapability::AccessMode::SINGLE_NODE_WRITER:
    case VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY:
      return "";
    default:
      return "access mode " + ModeName(mode) +
             " is not supported: a volume is a LUN that one node uses at a time "
             "(SINGLE_NODE_WRITER or SINGLE_NODE_READER_ONLY)";
  }
}

std::string UnsupportedCapability(
    const google::protobuf::RepeatedPtrField<VolumeCapability>& caps) {
  for (const auto& c : caps) {
    if (std::string why = UnsupportedCapability(c); !why.empty()) return why;
  }
  return "";
}

Result<ChapSecrets> ParseChapSecrets(const google::protobuf::Map<std::string, std::string>& s) {
  auto get = [&](const char* key) {
    auto it = s.find(key);
    return it == s.end() ? std::string() : it->second;
  };
  ChapSecrets out{get(kChapUser), get(kChapSecret), get(kChapUserIn), get(kChapSecretIn)};
  auto pair = [](const std::string& user, const std::string& secret, const char* ukey,
                 const char* skey) -> Status {
    if (user.empty() != secret.empty()) {
      return InvalidArgument(std::string("secrets: ") + (user.empty() ? skey : ukey) +
                             " is set without " + (user.empty() ? ukey : skey));
    }
    return Status::Ok();
  };
  if (Status p = pair(out.user, out.secret, kChapUser, kChapSecret); !p.ok()) return p;
  if (Status p = pair(out.user_in, out.secret_in, kChapUserIn, kChapSecretIn); !p.ok()) return p;
  if (!out.user_in.empty() && out.user.empty()) {
    return InvalidArgument(std::string("secrets: mutual CHAP (") + kChapUserIn + ") needs " +
                           kChapUser + " as well");
  }
  return out;
}

Result<ChapSecrets> ChapForVolume(const ChapSecrets& base, std::string_view volume_id) {
  ChapSecrets out = base;
  for (auto [secret, label] : {std::pair{&out.secret, "iscsigw-csi chap"},
                               std::pair{&out.secret_in, "iscsigw-csi mutual chap"}}) {
    if (secret->empty()) continue;
    auto derived = DeriveSecret(*secret, label, volume_id);
    if (!derived) {
      return Status(StatusCode::kInternal, "volume " + std::string(volume_id) +
                                               ": cannot derive its CHAP secret (HMAC-SHA256)");
    }
    *secret = *derived;
  }
  return out;
}

std::optional<std::string> CanonicalAddress(std::string_view address) {
  if (address.empty() || address.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  const std::string a(address);
  char text[INET6_ADDRSTRLEN];
  in_addr v4{};
  if (inet_pton(AF_INET, a.c_str(), &v4) == 1) {
    return std::string(inet_ntop(AF_INET, &v4, text, sizeof(text)));
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, a.c_str(), &v6) == 1) {
    return std::string(inet_ntop(AF_INET6, &v6, text, sizeof(text)));
  }
  return std::nullopt;
}

std::string NodeIdentity::ToString() const {
  std::string out = initiator;
  for (size_t i = 0; i < addresses.size(); ++i) out += (i == 0 ? "@" : ",") + addresses[i];
  return out;
}

Result<NodeIdentity> ParseNodeId(std::string_view node_id) {
  NodeIdentity out;
  const size_t at = node_id.find('@');
  out.initiator = std::string(node_id.substr(0, at));
  if (out.initiator.empty())
    return InvalidArgument("node_id '" + std::string(node_id) + "': no initiator name");
  if (at == std::string_view::npos) return out;
  std::string_view rest = node_id.substr(at + 1);
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view one = rest.substr(0, comma);
    auto canonical = CanonicalAddress(one);
    if (!canonical) {
      return InvalidArgument("node_id '" + std::string(node_id) + "': '" + std::string(one) +
                             "' is not a numeric IPv4 or IPv6 address");
    }
    out.addresses.push_back(*canonical);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  std::sort(out.addresses.begin(), out.addresses.end());
  out.addresses.erase(std::unique(out.addresses.begin(), out.addresses.end()), out.addresses.end());
  return out;
}

std::optional<std::string> PeerAddress(std::string_view peer) {
  if (peer.starts_with('[')) {
    const size_t end = peer.find(']');
    if (end == std::string_view::npos) return std::nullopt;
    return CanonicalAddress(peer.substr(1, end - 1));
  }
  const size_t colon = peer.rfind(':');
  return CanonicalAddress(peer.substr(0, colon));
}

std::string PageTokenAfter(std::string_view id) {
  return std::string(kTokenPrefix) + std::string(id);
}

std::optional<std::string> ParsePageToken(std::string_view token) {
  if (!token.starts_with(kTokenPrefix) || token.size() == kTokenPrefix.size()) return std::nullopt;
  return std::string(token.substr(kTokenPrefix.size()));
}

}  // namespace iscsigw::csi
