#include "csi/node_checks.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <string_view>

namespace iscsigw::csi {

using ::csi::v1::VolumeCapability;

bool ReadOnly(const VolumeCapability& cap) {
  const auto mode = cap.access_mode().mode();
  return mode == VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY ||
         mode == VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY;
}

const std::string* Lookup(const google::protobuf::Map<std::string, std::string>& first,
                          const google::protobuf::Map<std::string, std::string>& second,
                          const std::string& key) {
  if (auto it = first.find(key); it != first.end()) return &it->second;
  if (auto it = second.find(key); it != second.end()) return &it->second;
  return nullptr;
}

Status CheckCapability(const VolumeCapability& cap, bool has_cap) {
  if (!has_cap) return InvalidArgument("volume_capability is required");
  if (cap.has_mount()) {
    const std::string& fs = cap.mount().fs_type();
    if (!fs.empty() && fs != "ext4" && fs != "xfs") {
      return InvalidArgument("volume_capability.mount.fs_type " + fs +
                             " is not supported (ext4 or xfs)");
    }
    if (cap.access_mode().mode() == VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER) {
      return InvalidArgument(
          "volume_capability: MULTI_NODE_MULTI_WRITER needs block access; ext4 and xfs cannot "
          "be mounted by several nodes at once");
    }
    return Status::Ok();
  }
  if (cap.has_block()) return Status::Ok();
  return InvalidArgument("volume_capability: neither block nor mount access");
}

std::optional<std::pair<std::string, std::string>> SplitPortal(const std::string& portal) {
  std::string host, port;
  if (portal.starts_with('[')) {
    const auto close = portal.find(']');
    if (close == std::string::npos || close == 1 || portal.substr(close + 1, 1) != ":") {
      return std::nullopt;
    }
    host = portal.substr(1, close - 1);
    port = portal.substr(close + 2);
  } else {
    const auto colon = portal.rfind(':');
    if (colon == std::string::npos || colon == 0) return std::nullopt;
    host = portal.substr(0, colon);
    port = portal.substr(colon + 1);
    if (host.find(':') != std::string::npos) return std::nullopt;
  }
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) == 0 ||
      std::stoi(port) > 65535) {
    return std::nullopt;
  }
  return std::pair{host, port};
}

Status CheckPath(const std::string& field, const std::string& path) {
  if (path.empty()) return InvalidArgument(field + " is required");
  if (path.front() != '/') return InvalidArgument(field + " " + path + " is not an absolute path");
  if (path.find('\0') != std::string::npos) return InvalidArgument(field + " holds a NUL byte");
  return Status::Ok();
}

Status CheckTargetIqn(const std::string& name) {
  const std::string field = "volume_context.targetIqn " + name;
  if (name.size() > 223) return InvalidArgument(field + " is longer than 223 bytes");
  for (unsigned char c : name) {
    if (!std::islower(c) && !std::isdigit(c) && c != '.' && c != '-' && c != ':') {
      return InvalidArgument(field + ": character '" + std::string(1, static_cast<char>(c)) +
                             "' is not allowed (lower-case letters, digits, '.', '-', ':')");
    }
  }
  auto digits = [&](size_t from, size_t n) {
    for (size_t i = from; i < from + n; ++i) {
      if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return false;
    }
    return true;
  };
  if (name.starts_with("iqn.")) {
    // iqn.YYYY-MM. then at least one character of the naming authority.
    if (!digits(4, 4) || name[8] != '-' || !digits(9, 2) || name.size() < 13 || name[11] != '.') {
      return InvalidArgument(field + ": an iqn. name is iqn.YYYY-MM.reversed.domain[:id]");
    }
    return Status::Ok();
  }
  auto hex = [&](std::initializer_list<size_t> lengths) {
    const std::string_view tail = std::string_view(name).substr(4);
    if (std::find(lengths.begin(), lengths.end(), tail.size()) == lengths.end()) return false;
    return tail.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  };
  if (name.starts_with("eui.")) {
    if (hex({16})) return Status::Ok();
    return InvalidArgument(field + ": an eui. name is eui. and 16 hex digits");
  }
  if (name.starts_with("naa.")) {
    if (hex({16, 32})) return Status::Ok();
    return InvalidArgument(field + ": a naa. name is naa. and 16 or 32 hex digits");
  }
  return InvalidArgument(field + " is not an iSCSI name (iqn., eui. or naa.)");
}

}  // namespace iscsigw::csi
