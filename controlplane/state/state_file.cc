#include "controlplane/state/state_file.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

namespace iscsigw::state {

Result<iscsigw::v1::State> ParseStateJson(const std::string& json, const std::string& origin) {
  iscsigw::v1::State st;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto s = google::protobuf::util::JsonStringToMessage(json, &st, opts);
  if (!s.ok()) {
    return InvalidArgument(origin + ": " + std::string(s.message()));
  }
  return st;
}

Result<iscsigw::v1::State> LoadStateFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(path + ": read error");
  return ParseStateJson(ss.str(), path);
}

std::string QualifyTargetName(const std::string& name) {
  if (name.rfind("iqn.", 0) == 0 || name.rfind("eui.", 0) == 0 || name.rfind("naa.", 0) == 0) {
    return name;
  }
  return kDefaultIqnPrefix + name;
}

Result<api::Config> ToConfig(const iscsigw::v1::State& state) {
  api::Config cfg;
  for (int i = 0; i < state.targets_size(); ++i) {
    const auto& t = state.targets(i);
    api::TargetSpec ts;
    ts.name = QualifyTargetName(t.name());
    if (t.name().empty()) {
      return InvalidArgument("targets[" + std::to_string(i) + "].name is empty");
    }
    if (Status s = api::ValidateIscsiName(ts.name); !s.ok()) {
      return InvalidArgument("targets[" + std::to_string(i) + "].name: " + s.message());
    }
    ts.alias = t.alias();
    ts.allow_any_initiator = t.allow_any_initiator();
    ts.initiators.assign(t.initiators().begin(), t.initiators().end());
    for (int j = 0; j < t.luns_size(); ++j) {
      const auto& l = t.luns(j);
      api::LunSpec ls;
      ls.id = l.id();
      ls.size_bytes = l.size_bytes();
      ls.block_size = l.block_size() ? l.block_size() : 512;
      ls.read_only = l.read_only();
      ls.serial = l.serial();
      ls.device_id = l.device_id();
      switch (l.backing_case()) {
        case iscsigw::v1::Lun::kRam:
          ls.backing = api::BackingKind::kRam;
          break;
        case iscsigw::v1::Lun::kNull:
          ls.backing = api::BackingKind::kNull;
          break;
        case iscsigw::v1::Lun::kFile:
          ls.backing = api::BackingKind::kFile;
          ls.path = l.file().path();
          ls.create = l.file().create();
          break;
        default:
          return InvalidArgument("lun " + std::to_string(l.id()) + " of " + ts.name +
                                 ": no backing (ram, null or file)");
      }
      if (Status s = api::ValidateLun(ts.name, ls); !s.ok()) return s;
      ts.luns.push_back(std::move(ls));
    }
    cfg.targets.push_back(std::move(ts));
  }
  return cfg;
}

void MergeBootstrap(const iscsigw::v1::State& bootstrap, iscsigw::v1::State* into) {
  for (const auto& bt : bootstrap.targets()) {
    const std::string name = QualifyTargetName(bt.name());
    iscsigw::v1::Target* existing = nullptr;
    for (auto& t : *into->mutable_targets()) {
      if (QualifyTargetName(t.name()) == name) existing = &t;
    }
    if (existing == nullptr) {
      *into->add_targets() = bt;
      continue;
    }
    for (const auto& bl : bt.luns()) {
      bool have = false;
      for (const auto& l : existing->luns()) have = have || l.id() == bl.id();
      if (!have) *existing->add_luns() = bl;
    }
  }
}

}  // namespace iscsigw::state
