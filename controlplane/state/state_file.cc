#include "controlplane/state/state_file.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

#include "controlplane/state/limits.h"
#include "controlplane/state/text_check.h"

namespace iscsigw::state {

Result<iscsigw::v1::State> ParseStateJson(const std::string& json, const std::string& origin) {
  iscsigw::v1::State st;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto s = google::protobuf::util::JsonStringToMessage(json, &st, opts);
  if (!s.ok()) {
    return InvalidArgument(origin + ": " + std::string(s.message()));
  }
  // JSON escapes (\u0000, \u001b) reach string fields that the binary wire format would carry
  // only as themselves: the same rule for both.
  if (Status t = CheckTextFields(st); !t.ok()) return InvalidArgument(origin + ": " + t.message());
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
    if (ts.alias.size() > kMaxAliasBytes) {
      return InvalidArgument("target " + ts.name + ": alias is longer than " +
                             std::to_string(kMaxAliasBytes) + " bytes");
    }
    ts.allow_any_initiator = t.allow_any_initiator();
    for (const auto& name : t.initiators()) ts.acl.push_back({name, {}});
    for (const auto& e : t.acl()) {
      ts.acl.push_back({e.initiator(), {e.sources().begin(), e.sources().end()}});
    }
    for (const auto& e : ts.acl) {
      if (Status s = api::ValidateAclEntry(ts.name, e); !s.ok()) return s;
      if (e.sources.size() > kMaxSourcesPerAclEntry) {
        return InvalidArgument("acl entry " + e.initiator + " of " + ts.name + ": " +
                               std::to_string(e.sources.size()) + " sources; at most " +
                               std::to_string(kMaxSourcesPerAclEntry));
      }
    }
    ts.chap = ToChap(t.chap());
    if (Status s = api::ValidateChapCredentials(ts.chap, "target " + ts.name + ": "); !s.ok()) {
      return s;
    }
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
          if (ls.path.size() > kMaxPathBytes) {
            return InvalidArgument("lun " + std::to_string(l.id()) + " of " + ts.name +
                                   ": file.path is longer than " + std::to_string(kMaxPathBytes) +
                                   " bytes");
          }
          ls.create = l.file().create();
          ls.thick = l.file().thick();
          ls.direct = l.file().direct();
          break;
        default:
          return InvalidArgument("lun " + std::to_string(l.id()) + " of " + ts.name +
                                 ": no backing (ram, null or file)");
      }
      if (l.has_fault()) {
        if (Status s = ToFaultSpec(l.fault(),
                                   "lun " + std::to_string(l.id()) + " of " + ts.name + ": fault.",
                                   &ls.fault);
            !s.ok()) {
          return s;
        }
      }
      // SPC-4 7.8.11: the unit serial number is ASCII; the VPD page carries it as it is.
      for (unsigned char c : ls.serial) {
        if (c < 0x20 || c > 0x7e) {
          return InvalidArgument("lun " + std::to_string(l.id()) + " of " + ts.name +
                                 ": serial must be printable ASCII");
        }
      }
      if (Status s = api::ValidateLun(ts.name, ls); !s.ok()) return s;
      ts.luns.push_back(std::move(ls));
    }
    cfg.targets.push_back(std::move(ts));
  }
  cfg.discovery_chap = ToChap(state.discovery_chap());
  if (Status s = api::ValidateChapCredentials(cfg.discovery_chap, "discovery: "); !s.ok()) {
    return s;
  }
  return cfg;
}

Status ToFaultSpec(const iscsigw::v1::FaultInjection& f, const std::string& who,
                   backing::FaultSpec* out) {
  out->delay = std::chrono::milliseconds(f.delay_ms());
  if (f.delay_ms() > 60000)
    return InvalidArgument(who + "delay_ms " + std::to_string(f.delay_ms()) + " is above 60000");
  if (!f.error().empty()) {
    out->error = backing::FaultErrnoFromName(f.error());
    if (out->error == 0) {
      return InvalidArgument(who + "error " + f.error() + " is not EIO, ENOSPC or EROFS");
    }
  }
  if (f.ops_size() > 0) {
    out->reads = out->writes = out->flushes = false;
    for (const auto& op : f.ops()) {
      if (op == "read") {
        out->reads = true;
      } else if (op == "write") {
        out->writes = true;
      } else if (op == "flush") {
        out->flushes = true;
      } else {
        return InvalidArgument(who + "ops: " + op + " is not read, write or flush");
      }
    }
  }
  out->after_ops = f.after_ops();
  if (f.probability() < 0 || f.probability() > 1) {
    return InvalidArgument(who + "probability " + std::to_string(f.probability()) +
                           " is outside [0, 1]");
  }
  out->probability = f.probability() == 0 ? 1.0 : f.probability();
  return Status::Ok();
}

api::ChapCredentials ToChap(const iscsigw::v1::ChapConfig& c) {
  return api::ChapCredentials{c.user(), c.secret(), c.mutual_user(), c.mutual_secret()};
}

void Normalize(iscsigw::v1::State* state) {
  for (auto& t : *state->mutable_targets()) {
    t.set_name(QualifyTargetName(t.name()));
    for (const auto& name : t.initiators()) {
      bool have = false;
      for (const auto& e : t.acl()) have = have || e.initiator() == name;
      if (!have) t.add_acl()->set_initiator(name);
    }
    t.clear_initiators();
    for (auto& l : *t.mutable_luns()) {
      if (l.block_size() == 0) l.set_block_size(512);
    }
    // Output-only flags are never stored; an all-empty CHAP block is no CHAP.
    if (t.has_chap()) {
      t.mutable_chap()->clear_secret_set();
      t.mutable_chap()->clear_mutual_secret_set();
      if (t.chap().ByteSizeLong() == 0) t.clear_chap();
    }
  }
  if (state->has_discovery_chap()) {
    state->mutable_discovery_chap()->clear_secret_set();
    state->mutable_discovery_chap()->clear_mutual_secret_set();
    if (state->discovery_chap().ByteSizeLong() == 0) state->clear_discovery_chap();
  }
}

void MergeBootstrap(const iscsigw::v1::State& bootstrap, iscsigw::v1::State* into) {
  if (!into->has_discovery_chap() || into->discovery_chap().user().empty()) {
    if (bootstrap.has_discovery_chap())
      *into->mutable_discovery_chap() = bootstrap.discovery_chap();
  }
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
