#include "controlplane/service/lookup.h"

#include "controlplane/state/state_file.h"

namespace iscsigw::service {

v1::Target* FindTarget(v1::State* st, const std::string& name) {
  const std::string q = state::QualifyTargetName(name);
  for (auto& t : *st->mutable_targets()) {
    if (t.name() == q) return &t;
  }
  return nullptr;
}

const v1::Target* FindTarget(const v1::State& st, const std::string& name) {
  return FindTarget(const_cast<v1::State*>(&st), name);
}

v1::Lun* FindLun(v1::Target* t, uint32_t id) {
  for (auto& l : *t->mutable_luns()) {
    if (l.id() == id) return &l;
  }
  return nullptr;
}

const v1::Lun* FindLun(const v1::State& st, const std::string& target, uint32_t id) {
  const v1::Target* t = FindTarget(st, target);
  return t == nullptr ? nullptr : FindLun(const_cast<v1::Target*>(t), id);
}

v1::Snapshot* FindSnapshot(v1::State* st, const std::string& name) {
  for (auto& s : *st->mutable_snapshots()) {
    if (s.name() == name) return &s;
  }
  return nullptr;
}

const v1::Snapshot* FindSnapshot(const v1::State& st, const std::string& name) {
  return FindSnapshot(const_cast<v1::State*>(&st), name);
}

Status TargetNotFound(const std::string& name) {
  if (name.empty()) return InvalidArgument("target name is empty");
  return NotFound("target " + state::QualifyTargetName(name) + " not found");
}

std::string LunName(uint32_t id, const std::string& target) {
  return "lun " + std::to_string(id) + " of " + state::QualifyTargetName(target);
}

}  // namespace iscsigw::service
