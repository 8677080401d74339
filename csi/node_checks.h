// The checks the node service's gRPC handlers make before they queue a call (csi/node_service.h):
// paths, capabilities, portals and target names as kubelet and the controller give them. Pure
// functions; any thread may call them.
#pragma once

#include <google/protobuf/map.h>

#include <optional>
#include <string>
#include <utility>

#include "base/status.h"
#include "csi/v1/csi.pb.h"

namespace iscsigw::csi {

// A read-only access mode (SINGLE_NODE_READER_ONLY, MULTI_NODE_READER_ONLY).
bool ReadOnly(const ::csi::v1::VolumeCapability& cap);
// `key` in `first`, else in `second`; null when in neither.
const std::string* Lookup(const google::protobuf::Map<std::string, std::string>& first,
                          const google::protobuf::Map<std::string, std::string>& second,
                          const std::string& key);
// OK for block access, and for mount access with no fs_type, ext4 or xfs and any access mode
// but MULTI_NODE_MULTI_WRITER; else (or without a capability: !has_cap) INVALID_ARGUMENT.
Status CheckCapability(const ::csi::v1::VolumeCapability& cap, bool has_cap);
// HOST:PORT or [IPv6]:PORT: the host (no brackets) and the port, or nullopt. An IPv6 address
// without brackets is refused: where it ends and the port begins is a guess.
std::optional<std::pair<std::string, std::string>> SplitPortal(const std::string& portal);
// kubelet's paths are absolute; anything else would be taken relative to wherever a host command
// happens to run, and one starting with '-' as an option of it.
Status CheckPath(const std::string& field, const std::string& path);
// RFC 7143 4.2.7: an iSCSI name is iqn.YYYY-MM.reversed.domain[:anything], eui. and 16 hex
// digits, or naa. and 16 or 32; at most 223 bytes, and (after stringprep, 4.2.7.1) no upper
// case letters. The name goes onto iscsiadm's command line and into a /dev/disk/by-path name.
Status CheckTargetIqn(const std::string& name);

}  // namespace iscsigw::csi
