#include "dataplane/api/apply_plan.h"

#include <algorithm>

#include "base/log.h"
#include "dataplane/api/lun_reopen.h"
#include "dataplane/iscsi/chap.h"

namespace iscsigw::api {

namespace {

// A target whose name is valid: its LUNs, its ACL and its CHAP credentials.
Status ValidateTargetContents(const TargetSpec& t, const BackingPolicy& backing) {
  std::set<uint32_t> ids;
  for (const auto& l : t.luns) {
    if (Status s = ValidateLun(t.name, l); !s.ok()) return s;
    if (Status s = backing.Check(l, "lun " + std::to_string(l.id) + " of " + t.name + ": ");
        !s.ok()) {
      return s;
    }
    if (!ids.insert(l.id).second) {
      return AlreadyExists("lun " + std::to_string(l.id) + " of " + t.name + " is listed twice");
    }
  }
  for (const auto& e : t.acl) {
    if (Status s = ValidateAclEntry(t.name, e); !s.ok()) return s;
  }
  return iscsi::ValidateChapCredentials(t.chap, "target " + t.name + ": ");
}

}  // namespace

Status ValidateConfig(const Config& config, const BackingPolicy& backing,
                      Dataplane::ApplyMode mode) {
  std::set<std::string> names;
  for (const auto& t : config.targets) {
    if (Status s = ValidateIscsiName(t.name); !s.ok()) {
      return InvalidArgument("target " + t.name + ": " + s.message());
    }
    if (!names.insert(t.name).second) return AlreadyExists("target " + t.name + " is listed twice");
    if (Status s = ValidateTargetContents(t, backing); !s.ok()) return s;
  }
  if (Status s = iscsi::ValidateChapCredentials(config.discovery_chap, "discovery: "); !s.ok()) {
    return s;
  }
  std::vector<std::pair<std::string, const ChapCredentials*>> sets;
  sets.reserve(config.targets.size() + 1);
  for (const auto& t : config.targets) sets.emplace_back("target " + t.name, &t.chap);
  sets.emplace_back("discovery", &config.discovery_chap);
  if (Status s = iscsi::ValidateMutualSecretsApart(sets); !s.ok()) {
    // A change is refused. A configuration the daemon starts with was accepted before this check
    // existed: it still starts, loudly, so that the secret can be changed through the API.
    if (mode == Dataplane::ApplyMode::kStrict) return s;
    log::Iscsi().error("configuration: {}", s.message());
  }
  return Status::Ok();
}

ApplyPlan PlanApply(const std::map<LunKey, LiveLun>& live, const Config& config) {
  ApplyPlan plan;
  std::set<LunKey> listed;
  for (const auto& t : config.targets) {
    TargetPlan tp;
    tp.name = t.name;
    std::vector<LunSpec> luns = t.luns;
    std::sort(luns.begin(), luns.end(), [](auto& a, auto& b) { return a.id < b.id; });
    for (const auto& l : luns) {
      const LunKey key{t.name, l.id};
      listed.insert(key);
      LunPlan lp;
      lp.spec = l;
      auto old = live.find(key);
      if (old != live.end() && IsReopen(old->second.spec, l)) {
        // The same LUN: its state stays. Other store settings reopen its store in place; a
        // larger size grows it, after the reopen.
        lp.reopen_to = l;
        lp.reopen_to.size_bytes = old->second.spec.size_bytes;
        lp.action = !SameBacking(old->second.spec, lp.reopen_to) || old->second.left_closed
                        ? LunPlan::Action::kReopen
                        : LunPlan::Action::kKeep;
        lp.grow = l.size_bytes > old->second.spec.size_bytes;
      } else {
        lp.action = LunPlan::Action::kOpen;
        lp.replaces = old != live.end();
        if (!lp.replaces) {
          tp.inventory_changed = true;
          tp.added.insert(l.id);
        }
      }
      tp.luns.push_back(std::move(lp));
    }
    for (const auto& [key, lun] : live) {
      if (key.first == t.name && !listed.count(key)) tp.inventory_changed = true;  // removed
    }
    plan.targets.push_back(std::move(tp));
  }
  for (const auto& [key, lun] : live) {
    if (!listed.count(key)) plan.removed.push_back(key);
  }
  return plan;
}

}  // namespace iscsigw::api
