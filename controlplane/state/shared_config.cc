#include "controlplane/state/shared_config.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <map>

#include "controlplane/state/state_file.h"

namespace iscsigw::state {

namespace v1 = iscsigw::v1;

namespace {}  // namespace

LunKinds KindsOf(const v1::Target& t) {
  LunKinds k;
  for (const auto& l : t.luns()) {
    if (l.has_rbd()) {
      k.rbd = true;
    } else if (!k.other) {
      k.other = true;
      k.other_id = l.id();
    }
  }
  return k;
}

namespace {

const v1::Target* Find(const v1::State& st, const std::string& name) {
  for (const auto& t : st.targets()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

}  // namespace

Result<api::RbdSpec> ParseSharedConfigLocation(const std::string& where, const std::string& conf,
                                               const std::string& client_id,
                                               const std::string& keyring) {
  api::RbdSpec spec;
  const auto slash = where.find('/');
  spec.pool = where.substr(0, slash);
  if (slash != std::string::npos) spec.ns = where.substr(slash + 1);
  if (spec.pool.empty() || (slash != std::string::npos && spec.ns.empty()) ||
      spec.ns.find('/') != std::string::npos) {
    return InvalidArgument("--shared-config " + where + ": expected POOL or POOL/NAMESPACE");
  }
  spec.conf = conf;
  spec.client_id = client_id;
  spec.keyring = keyring;
  return spec;
}

std::string SharedToData(const v1::State& shared) {
  v1::State only;
  *only.mutable_targets() = shared.targets();
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(only, &out);
  return out;
}

Result<v1::State> SharedFromData(const std::string& data) {
  if (data.empty()) return v1::State();
  auto parsed = ParseStateJson(data, kSharedConfigObject);
  if (!parsed.ok()) return parsed.status();
  v1::State st = std::move(parsed).value();
  if (st.has_discovery_chap() || st.has_bootstrap() || st.snapshots_size() != 0) {
    return InvalidArgument(std::string(kSharedConfigObject) +
                           ": holds more than targets (discovery CHAP, bootstrap or snapshots)");
  }
  Normalize(&st);
  if (auto cfg = ToConfig(st); !cfg.ok()) {
    return InvalidArgument(std::string(kSharedConfigObject) + ": " + cfg.status().message());
  }
  for (const auto& t : st.targets()) {
    if (const LunKinds k = KindsOf(t); k.other) {
      return InvalidArgument(std::string(kSharedConfigObject) + ": target " + t.name() + ": LUN " +
                             std::to_string(k.other_id) + " is not rbd");
    }
  }
  return st;
}

Merged MergeShared(const v1::State& local, const v1::State& shared) {
  Merged m;
  m.state = local;
  m.state.clear_targets();
  std::set<std::string> local_wins;
  for (const auto& t : local.targets()) {
    const bool clash = Find(shared, t.name()) != nullptr;
    if (clash && !KindsOf(t).other) continue;  // the shared one replaces it
    if (clash) local_wins.insert(t.name());
    *m.state.add_targets() = t;
  }
  for (const auto& t : shared.targets()) {
    if (local_wins.count(t.name()) != 0) {
      m.skipped.push_back("shared target " + t.name() +
                          " not served here: a target of this gateway has that name and LUNs "
                          "that are not rbd");
      continue;
    }
    *m.state.add_targets() = t;
    m.shared.insert(t.name());
  }
  return m;
}

Status SplitShared(const v1::State& merged, const std::set<std::string>& shared_names,
                   const v1::State& shared_now, const v1::State& before, v1::State* local,
                   v1::State* shared) {
  *local = merged;
  local->clear_targets();
  shared->Clear();
  std::map<std::string, const v1::Target*> served;
  for (const auto& t : merged.targets()) served[t.name()] = &t;
  // The object's targets in their order: those served here as edited (or gone), the others as
  // they are.
  for (const auto& t : shared_now.targets()) {
    if (shared_names.count(t.name()) == 0) {
      *shared->add_targets() = t;
      continue;
    }
    auto it = served.find(t.name());
    if (it == served.end()) continue;  // deleted
    if (const LunKinds k = KindsOf(*it->second); k.other) {
      return InvalidArgument("target " + t.name() +
                             " is shared by the gateways (--shared-config): its LUNs must be rbd, "
                             "and LUN " +
                             std::to_string(k.other_id) + " is not");
    }
    *shared->add_targets() = *it->second;
  }
  for (const auto& t : merged.targets()) {
    if (shared_names.count(t.name()) != 0) continue;
    const LunKinds k = KindsOf(t);
    if (k.rbd && k.other) {
      if (const v1::Target* was = Find(before, t.name()); was != nullptr && SameTarget(*was, t)) {
        *local->add_targets() = t;  // as it was before --shared-config
        continue;
      }
      return InvalidArgument("target " + t.name() +
                             ": rbd LUNs and LUNs of other kinds cannot share a target with "
                             "--shared-config (rbd targets are shared by the gateways, the others "
                             "are this gateway's own); LUN " +
                             std::to_string(k.other_id) + " is not rbd");
    }
    if (!k.rbd) {
      *local->add_targets() = t;
      continue;
    }
    if (Find(shared_now, t.name()) != nullptr) {
      return AlreadyExists("target " + t.name() +
                           " exists in the shared configuration, which this gateway does not "
                           "serve under that name");
    }
    *shared->add_targets() = t;
  }
  return Status::Ok();
}

bool SameState(const v1::State& a, const v1::State& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

bool SameTarget(const v1::Target& a, const v1::Target& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace iscsigw::state
