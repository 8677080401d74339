// The desired-state file: protobuf JSON (proto/iscsigw/v1/state.proto) read from disk and turned
// into the data plane's Config. Used for --bootstrap now and for <state-dir>/state.json by the
// control plane. Errors name the file and the field. Any thread; no shared state.
#pragma once

#include <string>

#include "dataplane/api/dataplane.h"
#include "dataplane/base/status.h"
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
// A LUN's test-only fault injection; `who` prefixes errors ("lun 0 of iqn...: fault.").
Status ToFaultSpec(const iscsigw::v1::FaultInjection& fault, const std::string& who,
                   backing::FaultSpec* out);

// Adds to `into` every target of `bootstrap` that it does not have yet, and every LUN of an
// existing target that it does not have yet (the bootstrap is idempotent, DESIGN.md).
void MergeBootstrap(const iscsigw::v1::State& bootstrap, iscsigw::v1::State* into);

}  // namespace iscsigw::state
