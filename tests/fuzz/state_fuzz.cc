// The state and bootstrap JSON loader (controlplane/state/state_file.h): parse, normalise and
// check a document the way iscsigwd does at start, then apply it as a bootstrap declaration to
// itself taken as the persisted state (the input's bootstrap record is the one of the last start).
//
// Oracles, beyond the sanitizers:
//   - Normalize is idempotent: the form the control plane keeps and persists is a fixed point;
//   - persistence: a normalised state that ToConfig accepts, written as the daemon writes
//     state.json (StateToJson) and read back as LoadStateDir reads it (ParseStateJson, Normalize,
//     ToConfig), is accepted and is the same state;
//   - restart with an unchanged bootstrap (MergeBootstrap): once a declaration has been merged
//     (then normalised, as iscsigwd does), merging it again changes nothing and reports nothing,
//     also after the API changed the targets and the discovery CHAP in between: "a target whose
//     declaration did not change is left exactly as the API left it".
// States are compared by their deterministic serialization, so that a NaN fault probability
// equals itself.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cstdint>
#include <set>
#include <string>

#include "controlplane/state/state_file.h"
#include "controlplane/state/state_store.h"
#include "tests/fuzz/fuzz_input.h"

using namespace iscsigw;

namespace {

std::string Bytes(const iscsigw::v1::State& s) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!s.SerializeToCodedStream(&coded)) fuzz::Violated("a state does not serialize");
  }
  return out;
}

// What Dataplane::Apply refuses after ToConfig has accepted: a target or a LUN listed twice. A
// bootstrap like that never starts a daemon, so its merges are not held to the restart rule.
bool ListsSomethingTwice(const iscsigw::v1::State& s) {
  std::set<std::string> names;
  for (const auto& t : s.targets()) {
    if (!names.insert(t.name()).second) return true;
    std::set<uint32_t> ids;
    for (const auto& l : t.luns()) {
      if (!ids.insert(l.id()).second) return true;
    }
  }
  return false;
}

void CheckPersistRoundTrip(const iscsigw::v1::State& normal) {
  auto back = state::ParseStateJson(state::StateToJson(normal), "state.json");
  if (!back.ok()) fuzz::Violated("state.json as written does not parse");
  state::Normalize(&back.value());
  if (!state::ToConfig(back.value()).ok()) fuzz::Violated("state.json as written is refused");
  if (Bytes(back.value()) != Bytes(normal))
    fuzz::Violated("state.json reads back as another state");
}

// Merges `decl` into `into` and aborts unless that changed and reported nothing.
void MustMergeAsNoChange(const iscsigw::v1::State& decl, iscsigw::v1::State into) {
  const std::string before = Bytes(into);
  auto lines = state::MergeBootstrap(decl, &into);
  if (!lines.ok() || !lines.value().empty())
    fuzz::Violated("an unchanged bootstrap reports a change");
  if (Bytes(into) != before) fuzz::Violated("an unchanged bootstrap changes the state");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto state =
      state::ParseStateJson(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  if (!state.ok()) return 0;
  iscsigw::v1::State& normal = state.value();
  state::Normalize(&normal);
  {
    iscsigw::v1::State twice = normal;
    state::Normalize(&twice);
    if (Bytes(twice) != Bytes(normal)) fuzz::Violated("Normalize is not idempotent");
  }
  if (!state::ToConfig(normal).ok()) return 0;
  CheckPersistRoundTrip(normal);

  // The input as a bootstrap file (which may not set snapshots or the record), checked as
  // iscsigwd checks one before merging it.
  iscsigw::v1::State declared = normal;
  declared.clear_snapshots();
  declared.clear_bootstrap();
  if (ListsSomethingTwice(declared)) return 0;
  iscsigw::v1::State persisted = normal;
  auto merged = state::MergeBootstrap(declared, &persisted);
  if (!merged.ok()) return 0;  // a declared change that cannot be made: the daemon stops
  state::Normalize(&persisted);
  if (!state::ToConfig(persisted).ok()) return 0;
  CheckPersistRoundTrip(persisted);

  // The next start, with the same bootstrap file.
  MustMergeAsNoChange(declared, persisted);
  // The same, after the API deleted the first target, reordered the others and changed the
  // discovery CHAP.
  iscsigw::v1::State edited = persisted;
  auto* targets = edited.mutable_targets();
  if (!targets->empty()) targets->DeleteSubrange(0, 1);
  for (int i = 0, j = targets->size() - 1; i < j; ++i, --j) targets->SwapElements(i, j);
  if (edited.has_discovery_chap()) {
    edited.clear_discovery_chap();
  } else {
    edited.mutable_discovery_chap()->set_user("set-through-the-api");
  }
  MustMergeAsNoChange(declared, edited);
  return 0;
}
