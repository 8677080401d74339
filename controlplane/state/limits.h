// Upper bounds on the desired state the control plane accepts: how many targets, LUNs per target
// and ACL entries per target, and the shape of the strings a request or a state file may carry.
// Every change goes through StateStore::Update, which refuses one that would grow a count past
// its limit with RESOURCE_EXHAUSTED; the gRPC service checks the same limits first, cheaply, so a
// flood of creates beyond a limit never copies the state. A state file that is already over a
// limit (a limit lowered by a flag) still loads: it may shrink, but not grow.
//
// Why these numbers (docs/reference/api.md, "Limits", says the same for operators):
//  - LUNs per target: 256. LUN ids are 0..255, SAM peripheral device addressing, which the SCSI
//    engine keeps as a 256-entry table (dataplane/scsi/engine.h kMaxLuns); it cannot be raised.
//  - Targets: 4096. Every change rewrites and fsyncs the whole state file and republishes the
//    data plane's snapshot, so a change costs time linear in the number of targets; at 4096
//    targets that is a few milliseconds, still well inside an interactive call.
//  - ACL entries per target: 4096, with at most 8 sources each, so that the largest target
//    (4096 entries of 223-byte names with 8 IPv6 CIDRs, 256 file LUNs with 4095-byte paths) fits in
//    one 4 MiB gRPC message (controlplane/service/server.h kMaxRequestBytes) either way.
//  - CHAP: one credential set per target plus one for discovery, so bounded by the targets.
//
// Threading: plain values and pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "iscsigw/v1/state.pb.h"

namespace iscsigw::state {

inline constexpr uint32_t kMaxLunsPerTargetCeiling = 256;  // LUN ids 0..255
inline constexpr uint32_t kDefaultMaxTargets = 4096;
inline constexpr uint32_t kDefaultMaxLunsPerTarget = kMaxLunsPerTargetCeiling;
inline constexpr uint32_t kDefaultMaxAclEntriesPerTarget = 4096;

// Fixed shape limits, checked by ToConfig (state file, bootstrap and every change).
inline constexpr size_t kMaxSourcesPerAclEntry = 8;
inline constexpr size_t kMaxAliasBytes = 255;  // RFC 7143 13.6: TargetAlias, a 255-byte text value
inline constexpr size_t kMaxPathBytes = 4095;  // PATH_MAX less the terminating NUL

struct Limits {
  uint32_t max_targets = kDefaultMaxTargets;                             // --max-targets
  uint32_t max_luns_per_target = kDefaultMaxLunsPerTarget;               // --max-luns-per-target
  uint32_t max_acl_entries_per_target = kDefaultMaxAclEntriesPerTarget;  // --max-acl-entries
};

// Room for one more target, LUN of `target`, or ACL entry of `target` in a state that has it
// (RESOURCE_EXHAUSTED naming the limit and its flag otherwise).
Status RoomForTarget(const iscsigw::v1::State& state, const Limits& limits);
Status RoomForLun(const iscsigw::v1::Target& target, const Limits& limits);
Status RoomForAclEntry(const iscsigw::v1::Target& target, const Limits& limits);

// Refuses `next` when one of its counts is above its limit and above the same count in
// `previous`: a change may not grow past a limit, but a state already over one may shrink.
Status CheckLimits(const iscsigw::v1::State& next, const iscsigw::v1::State& previous,
                   const Limits& limits);

}  // namespace iscsigw::state
