#include "controlplane/state/state_file.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <fstream>
#include <set>
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
      ls.physical_block_size = l.physical_block_size();
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
        case iscsigw::v1::Lun::kRbd: {
          ls.backing = api::BackingKind::kRbd;
          const auto& r = l.rbd();
          ls.rbd = ToRbdSpec(r);
          ls.create = r.create();
          for (const std::string* path : {&r.conf(), &r.keyring()}) {
            if (path->size() > kMaxPathBytes) {
              return InvalidArgument("lun " + std::to_string(l.id()) + " of " + ts.name + ": rbd." +
                                     (path == &r.conf() ? "conf" : "keyring") + " is longer than " +
                                     std::to_string(kMaxPathBytes) + " bytes");
            }
          }
          break;
        }
        default:
          return InvalidArgument("lun " + std::to_string(l.id()) + " of " + ts.name +
                                 ": no backing (ram, null, file or rbd)");
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
  // Written so that NaN is refused too: it compares unequal to itself, so a declaration holding
  // it would count as changed at every start (MergeBootstrap).
  if (!(f.probability() >= 0 && f.probability() <= 1)) {
    return InvalidArgument(who + "probability " + std::to_string(f.probability()) +
                           " is outside [0, 1]");
  }
  out->probability = f.probability() == 0 ? 1.0 : f.probability();
  if (f.offset() > UINT64_MAX - f.length()) {
    return InvalidArgument(who + "offset " + std::to_string(f.offset()) + " + length " +
                           std::to_string(f.length()) + " overflows");
  }
  out->offset = f.offset();
  out->length = f.length();
  out->max_faults = f.max_faults();
  return Status::Ok();
}

api::ChapCredentials ToChap(const iscsigw::v1::ChapConfig& c) {
  return api::ChapCredentials{c.user(), c.secret(), c.mutual_user(), c.mutual_secret()};
}

api::RbdSpec ToRbdSpec(const iscsigw::v1::RbdBacking& r) {
  return api::RbdSpec{r.pool(), r.image(), r.namespace_(), r.conf(), r.client_id(), r.keyring()};
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
      // A physical block the size of the logical one is the default: one form, so that a
      // declaration saying it equals a LUN that left it out.
      if (l.physical_block_size() == l.block_size()) l.clear_physical_block_size();
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

namespace {

using google::protobuf::util::MessageDifferencer;

std::string BackingName(const iscsigw::v1::Lun& l) {
  if (l.has_file()) return "file " + l.file().path() + (l.file().direct() ? " (direct)" : "");
  if (l.has_rbd()) {
    return "rbd " + l.rbd().pool() + "/" +
           (l.rbd().namespace_().empty() ? "" : l.rbd().namespace_() + "/") + l.rbd().image();
  }
  if (l.has_null()) return "null";
  if (l.has_ram()) return "ram";
  return "none";
}

// Brings the existing LUN `have` to its declaration `want` where that can be done in place.
Status UpdateDeclaredLun(const iscsigw::v1::Lun& want, const std::string& who,
                         iscsigw::v1::Lun* have) {
  const std::string delete_first = "; delete the LUN through the API to declare it anew";
  if (BackingName(want) != BackingName(*have)) {
    return FailedPrecondition(who + ": backing " + BackingName(*have) + " cannot become " +
                              BackingName(want) + delete_first);
  }
  if (want.block_size() != have->block_size()) {
    return FailedPrecondition(who + ": block_size " + std::to_string(have->block_size()) +
                              " cannot become " + std::to_string(want.block_size()) + delete_first);
  }
  if (want.physical_block_size() != have->physical_block_size()) {
    return FailedPrecondition(who + ": physical_block_size " +
                              std::to_string(have->physical_block_size()) + " cannot become " +
                              std::to_string(want.physical_block_size()) + delete_first);
  }
  if (!want.serial().empty() && want.serial() != have->serial()) {
    return FailedPrecondition(who + ": serial " + have->serial() + " cannot become " +
                              want.serial() + delete_first);
  }
  if (want.device_id() != 0 && want.device_id() != have->device_id()) {
    return FailedPrecondition(who + ": device_id cannot change" + delete_first);
  }
  if (want.size_bytes() != 0) {
    if (want.size_bytes() < have->size_bytes()) {
      return FailedPrecondition(who + ": size_bytes " + std::to_string(have->size_bytes()) +
                                " cannot shrink to " + std::to_string(want.size_bytes()));
    }
    have->set_size_bytes(want.size_bytes());
  }
  have->set_read_only(want.read_only());
  *have->mutable_fault() = want.fault();
  if (!want.has_fault()) have->clear_fault();
  return Status::Ok();
}

Status UpdateDeclaredTarget(const iscsigw::v1::Target& want, const iscsigw::v1::Target* before,
                            iscsigw::v1::Target* have, std::vector<std::string>* lines) {
  have->set_alias(want.alias());
  have->set_allow_any_initiator(want.allow_any_initiator());
  if (want.has_chap()) {
    *have->mutable_chap() = want.chap();
  } else {
    have->clear_chap();
  }
  auto* acl = have->mutable_acl();
  auto find_entry = [&](const std::string& initiator) -> int {
    for (int i = 0; i < acl->size(); ++i) {
      if (acl->Get(i).initiator() == initiator) return i;
    }
    return -1;
  };
  if (before != nullptr) {
    for (const auto& old : before->acl()) {
      bool still = false;
      for (const auto& e : want.acl()) still = still || e.initiator() == old.initiator();
      if (int i = find_entry(old.initiator()); !still && i >= 0) {
        acl->DeleteSubrange(i, 1);
        lines->push_back("target " + want.name() + ": ACL entry " + old.initiator() +
                         " removed (no longer declared)");
      }
    }
  }
  for (const auto& e : want.acl()) {
    if (int i = find_entry(e.initiator()); i >= 0) {
      *acl->Mutable(i) = e;
    } else {
      *acl->Add() = e;
    }
  }
  for (const auto& wl : want.luns()) {
    const std::string who = "lun " + std::to_string(wl.id()) + " of " + want.name();
    iscsigw::v1::Lun* hl = nullptr;
    for (auto& l : *have->mutable_luns()) {
      if (l.id() == wl.id()) hl = &l;
    }
    if (hl == nullptr) {
      *have->add_luns() = wl;
      lines->push_back(who + " created (declared)");
      continue;
    }
    if (Status s = UpdateDeclaredLun(wl, who, hl); !s.ok()) return s;
  }
  if (before != nullptr) {
    for (const auto& old : before->luns()) {
      bool still = false;
      for (const auto& l : want.luns()) still = still || l.id() == old.id();
      if (!still) {
        lines->push_back("lun " + std::to_string(old.id()) + " of " + want.name() +
                         " is no longer declared; left as it is (delete it through the API)");
      }
    }
  }
  lines->push_back("target " + want.name() + " updated to its new declaration");
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> MergeBootstrap(const iscsigw::v1::State& bootstrap,
                                                iscsigw::v1::State* into) {
  if (bootstrap.snapshots_size() > 0 || bootstrap.has_bootstrap()) {
    return InvalidArgument(
        "snapshots and bootstrap are kept by the gateway; a bootstrap file "
        "cannot set them");
  }
  iscsigw::v1::State decl = bootstrap;
  Normalize(&decl);
  for (const auto& t : decl.targets()) {
    for (const auto& l : t.luns()) {
      const char* output_only = l.has_file() && l.file().created() ? "file.created"
                                : l.has_rbd() && l.rbd().created() ? "rbd.created"
                                : !l.offline_reason().empty()      ? "offline_reason"
                                : !l.access_state().empty()        ? "access_state"
                                                                   : nullptr;
      if (output_only != nullptr) {
        return InvalidArgument("lun " + std::to_string(l.id()) + " of " + t.name() + ": " +
                               output_only + " is set by the gateway, not by a bootstrap file");
      }
    }
  }
  std::vector<std::string> lines;
  auto* record = into->mutable_bootstrap();

  const bool chap_declared = decl.has_discovery_chap();
  if (chap_declared != record->discovery_chap_declared() ||
      !MessageDifferencer::Equals(decl.discovery_chap(), record->discovery_chap())) {
    if (chap_declared) {
      *into->mutable_discovery_chap() = decl.discovery_chap();
      lines.push_back("discovery CHAP set (declared)");
    } else if (MessageDifferencer::Equals(into->discovery_chap(), record->discovery_chap())) {
      into->clear_discovery_chap();
      lines.push_back("discovery CHAP cleared (no longer declared)");
    }
    record->set_discovery_chap_declared(chap_declared);
    *record->mutable_discovery_chap() = decl.discovery_chap();
    if (!chap_declared) record->clear_discovery_chap();
  }

  std::set<std::string> declared;
  for (const auto& want : decl.targets()) {
    declared.insert(want.name());
    const auto it = record->targets().find(want.name());
    const iscsigw::v1::Target* before = it == record->targets().end() ? nullptr : &it->second;
    if (before != nullptr && MessageDifferencer::Equals(*before, want)) continue;
    iscsigw::v1::Target* have = nullptr;
    for (auto& t : *into->mutable_targets()) {
      if (t.name() == want.name()) have = &t;
    }
    if (have == nullptr) {
      *into->add_targets() = want;
      lines.push_back("target " + want.name() + " created (declared)");
    } else if (Status s = UpdateDeclaredTarget(want, before, have, &lines); !s.ok()) {
      return s;
    }
    (*record->mutable_targets())[want.name()] = want;
  }
  std::vector<std::string> dropped;
  for (const auto& [name, _] : record->targets()) {
    if (declared.count(name) == 0) dropped.push_back(name);
  }
  for (const auto& name : dropped) {
    record->mutable_targets()->erase(name);
    lines.push_back("target " + name +
                    " is no longer declared; left as it is (delete it through the API)");
  }
  return lines;
}

}  // namespace iscsigw::state
