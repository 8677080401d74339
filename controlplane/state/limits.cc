#include "controlplane/state/limits.h"

#include <map>

namespace iscsigw::state {

namespace {

Status TooManyTargets(const Limits& limits) {
  return Status(StatusCode::kResourceExhausted, "targets: the gateway already has " +
                                                    std::to_string(limits.max_targets) +
                                                    " targets, the limit (--max-targets)");
}

Status TooManyLuns(const std::string& target, const Limits& limits) {
  return Status(StatusCode::kResourceExhausted,
                "target " + target + ": already has " + std::to_string(limits.max_luns_per_target) +
                    " LUNs, the limit per target (--max-luns-per-target)");
}

Status TooManyAclEntries(const std::string& target, const Limits& limits) {
  return Status(StatusCode::kResourceExhausted,
                "acl of " + target + ": already has " +
                    std::to_string(limits.max_acl_entries_per_target) +
                    " entries, the limit per target (--max-acl-entries)");
}

}  // namespace

Status RoomForTarget(const iscsigw::v1::State& state, const Limits& limits) {
  if (static_cast<uint32_t>(state.targets_size()) >= limits.max_targets) {
    return TooManyTargets(limits);
  }
  return Status::Ok();
}

Status RoomForLun(const iscsigw::v1::Target& target, const Limits& limits) {
  if (static_cast<uint32_t>(target.luns_size()) >= limits.max_luns_per_target) {
    return TooManyLuns(target.name(), limits);
  }
  return Status::Ok();
}

Status RoomForAclEntry(const iscsigw::v1::Target& target, const Limits& limits) {
  if (static_cast<uint32_t>(target.acl_size()) >= limits.max_acl_entries_per_target) {
    return TooManyAclEntries(target.name(), limits);
  }
  return Status::Ok();
}

Status CheckLimits(const iscsigw::v1::State& next, const iscsigw::v1::State& previous,
                   const Limits& limits) {
  if (static_cast<uint32_t>(next.targets_size()) > limits.max_targets &&
      next.targets_size() > previous.targets_size()) {
    return TooManyTargets(limits);
  }
  // The previous counts are looked up only for a target over a limit, which is rare.
  std::map<std::string, const iscsigw::v1::Target*> before;
  auto previous_of = [&](const std::string& name) -> const iscsigw::v1::Target* {
    if (before.empty()) {
      for (const auto& t : previous.targets()) before.emplace(t.name(), &t);
    }
    auto it = before.find(name);
    return it == before.end() ? nullptr : it->second;
  };
  for (const auto& t : next.targets()) {
    if (static_cast<uint32_t>(t.luns_size()) > limits.max_luns_per_target) {
      const auto* p = previous_of(t.name());
      if (p == nullptr || t.luns_size() > p->luns_size()) return TooManyLuns(t.name(), limits);
    }
    if (static_cast<uint32_t>(t.acl_size()) > limits.max_acl_entries_per_target) {
      const auto* p = previous_of(t.name());
      if (p == nullptr || t.acl_size() > p->acl_size()) return TooManyAclEntries(t.name(), limits);
    }
  }
  return Status::Ok();
}

}  // namespace iscsigw::state
