// The state and bootstrap JSON loader (controlplane/state/state_file.h): parse, normalise and
// check a document the way iscsigwd does at start, then apply it as a bootstrap declaration to
// itself taken as the persisted state. Anything accepted becomes a configuration.
#include <cstdint>
#include <string>

#include "controlplane/state/state_file.h"

using namespace iscsigw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto state =
      state::ParseStateJson(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  if (!state.ok()) return 0;
  state::Normalize(&state.value());
  auto config = state::ToConfig(state.value());
  (void)config;
  iscsigw::v1::State declared = state.value();
  declared.clear_snapshots();
  declared.clear_bootstrap();
  iscsigw::v1::State persisted = state.value();
  if (auto merged = state::MergeBootstrap(declared, &persisted); merged.ok()) {
    state::Normalize(&persisted);
    (void)state::ToConfig(persisted);
  }
  return 0;
}
