// The desired-state file: protobuf JSON (proto/iscsigw/v1/state.proto) read from disk and turned
// into the data plane's Config. Used for --bootstrap now and for <state-dir>/state.json by the
// control plane. Errors name the file and the field. Any thread; no shared state.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "dataplane/api/dataplane.h"
#include "iscsigw/v1/state.pb.h"

namespace iscsigw::state {

inline constexpr const char* kDefaultIqnPrefix = "iqn.2026-11.io.iscsigw:";

// Parses protobuf JSON; unknown fields are errors (a misspelt key must not be silently dropped).
Result<iscsigw::v1::State> ParseStateJson(const std::string& json, const std::string& origin);
Result<iscsigw::v1::State> LoadStateFile(const std::string& path);

// A short target name gets the default prefix; a full iqn./eui./naa. name is kept.
std::string QualifyTargetName(const std::string& name);

// Converts and validates (names, LUN ids, sizes, block sizes); the message names the field.
Result<api::Config> ToConfig(const iscsigw::v1::State& state);

// Fully qualified target names, the `initiators` shorthand folded into `acl`, block size 0 made
// 512: the form the control plane keeps and persists.
void Normalize(iscsigw::v1::State* state);

api::ChapCredentials ToChap(const iscsigw::v1::ChapConfig& chap);
// Where an rbd backing's image lives, for the data plane.
api::RbdSpec ToRbdSpec(const iscsigw::v1::RbdBacking& rbd);
// A LUN's test-only fault injection; `who` prefixes errors ("lun 0 of iqn...: fault.").
Status ToFaultSpec(const iscsigw::v1::FaultInjection& fault, const std::string& who,
                   backing::FaultSpec* out);

// Applies a --bootstrap file to the persisted state `into` as a declaration:
// - a target whose declaration is new, or differs from the one recorded in into->bootstrap() at
//   the last start, is created when missing and otherwise updated to it: alias,
//   allow_any_initiator and CHAP as declared; declared ACL entries added or replaced, entries the
//   previous declaration had and this one dropped removed; declared LUNs created when missing and
//   otherwise grown, switched read-only or not as declared;
// - a target whose declaration did not change is left exactly as the API left it, deleted
//   included: nothing is resurrected until the declaration itself changes;
// - what the API made and no declaration names is never touched, and something no longer
//   declared (a target, a LUN) stays as it is: deleting data is the API's business;
// - discovery CHAP follows the same rule.
// The record is updated. Returns one line per change, for the log. A declared change that cannot
// be made to what exists (another backing or path, block size, serial or device id; a smaller
// size) is an error naming the target, the LUN and the field, and `into` is then unspecified.
// A bootstrap may not set snapshots, the record, FileBacking.created or RbdBacking.created.
Result<std::vector<std::string>> MergeBootstrap(const iscsigw::v1::State& bootstrap,
                                                iscsigw::v1::State* into);

}  // namespace iscsigw::state
