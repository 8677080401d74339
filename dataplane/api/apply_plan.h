// The deciding half of Dataplane::Apply: whether a whole configuration may be applied, and what
// applying it does to each LUN, as plain data. Dataplane::Apply then opens the stores the plan
// names and publishes the result, or publishes nothing (docs/live-lun-changes.md).
//
// Pure functions: no store is opened, no lock taken, nothing logged but the one warning
// ValidateConfig gives for an accepted startup configuration. Any thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "dataplane/api/dataplane.h"

namespace iscsigw::api {

// Checks a whole configuration before anything of it reaches a store or a cluster: every target's
// name, ACL and CHAP credentials, every LUN (ValidateLun, then `backing`), no target or LUN listed
// twice, and discovery's CHAP credentials. Mutual CHAP secrets shared between targets are refused
// in kStrict and only logged in kStartup (a configuration accepted before that check existed).
// The message names the target, LUN and field.
Status ValidateConfig(const Config& config, const BackingPolicy& backing,
                      Dataplane::ApplyMode mode);

// A LUN by target name and LUN id.
using LunKey = std::pair<std::string, uint32_t>;

// A LUN the data plane serves now, as the plan needs to see it.
struct LiveLun {
  LunSpec spec;              // what its store is now
  bool left_closed = false;  // its store left closed by a reopen that opened nothing (LeftClosed)
};

// What applying the configuration does to one LUN it lists.
struct LunPlan {
  enum class Action {
    kKeep,    // the same LUN and store (maybe grown)
    kReopen,  // the same LUN, its store reopened in place with other settings (lun_reopen.h)
    kOpen,    // a new logical unit with a new store: none had the id, or another backing had it
  };
  LunSpec spec;  // as the configuration lists it
  Action action = Action::kOpen;
  // kOpen: whether a LUN of another backing, block size, serial or device id had the id; it goes.
  bool replaces = false;
  // kKeep and kReopen: spec.size_bytes is larger than the store's; it grows after the reopen.
  bool grow = false;
  // kReopen: what the store is reopened with: spec at the store's present size.
  LunSpec reopen_to;
};

struct TargetPlan {
  std::string name;
  std::vector<LunPlan> luns;  // by LUN id
  // LUNs added or removed: REPORTED LUNS DATA HAS CHANGED (3Fh/0Eh) for the LUNs in `added`'s
  // complement. A LUN replaced by another of the same id does not count.
  bool inventory_changed = false;
  std::set<uint32_t> added;
};

struct ApplyPlan {
  std::vector<TargetPlan> targets;  // in the configuration's order
  std::vector<LunKey> removed;      // live LUNs the configuration no longer lists, by key
};

// What applying `config` (validated) does to the LUNs in `live`.
ApplyPlan PlanApply(const std::map<LunKey, LiveLun>& live, const Config& config);

}  // namespace iscsigw::api
