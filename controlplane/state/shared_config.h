// The configuration that several gateways share (--shared-config): the targets whose LUNs are rbd
// images, kept in one RADOS object that every gateway reads and watches (kSharedConfigObject in
// the pool and namespace the flag names), so that a target, LUN, ACL or CHAP change made through
// one gateway's API is served by all of them. Everything else (targets with ram, null or file
// LUNs, discovery CHAP, the bootstrap record, snapshots) stays in the gateway's state file.
//
// Which targets are shared: those the object has, and a target of this gateway once it has LUNs
// and all of them are rbd (it then moves into the object). A shared target stays shared when its
// LUNs are deleted, until the target is. A target may not mix rbd and other LUNs, and a shared one
// takes only rbd LUNs.
//
// A local target named like a shared one: when it has ram, null or file LUNs it stays, and this
// gateway does not serve the shared one (an error in the log); otherwise the shared one replaces
// it (its local copy goes at the next change).
//
// Pure functions; StateStore (state_store.h) reads, writes and watches the object.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "dataplane/api/dataplane.h"
#include "iscsigw/v1/state.pb.h"

namespace iscsigw::state {

inline constexpr const char* kSharedConfigObject = "iscsigw_config";

// What kinds of LUNs a target has: rbd, others (the first of which is other_id), or none.
struct LunKinds {
  bool rbd = false;
  bool other = false;
  uint32_t other_id = 0;
};
LunKinds KindsOf(const iscsigw::v1::Target& t);

// Where the shared configuration lives: "POOL" or "POOL/NAMESPACE" (--shared-config), with the
// cluster's conf file, cephx client id and keyring paths (empty: librados' defaults).
Result<api::RbdSpec> ParseSharedConfigLocation(const std::string& where, const std::string& conf,
                                               const std::string& client_id,
                                               const std::string& keyring);

// The object's data: the shared targets as protobuf JSON (secrets included: the object is as
// secret as the state file), "{}" when there is none; "" is an object that was removed (or never
// written). Parsed data is normalised and checked (ToConfig).
std::string SharedToData(const iscsigw::v1::State& shared);
Result<iscsigw::v1::State> SharedFromData(const std::string& data);

// What a gateway serves: its local state with the shared targets.
struct Merged {
  iscsigw::v1::State state;          // local targets first, then the shared ones
  std::set<std::string> shared;      // names of the targets in `state` that are shared
  std::vector<std::string> skipped;  // one line per shared target not served (a name clash)
};
Merged MergeShared(const iscsigw::v1::State& local, const iscsigw::v1::State& shared);

// Splits an edited merged state (`shared_names` from the Merged it was edited from, `before` the
// state before the edit) into what the state file keeps and what the object holds. `shared_now`
// is the object's current content: its targets this gateway does not serve (name clashes) are kept
// as they are. Errors name the target (INVALID_ARGUMENT for mixed LUNs, ALREADY_EXISTS for a
// clash); a target that mixed rbd and other LUNs before --shared-config, unchanged, stays local.
Status SplitShared(const iscsigw::v1::State& merged, const std::set<std::string>& shared_names,
                   const iscsigw::v1::State& shared_now, const iscsigw::v1::State& before,
                   iscsigw::v1::State* local, iscsigw::v1::State* shared);

bool SameState(const iscsigw::v1::State& a, const iscsigw::v1::State& b);
bool SameTarget(const iscsigw::v1::Target& a, const iscsigw::v1::Target& b);

}  // namespace iscsigw::state
