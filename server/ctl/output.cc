#include "server/ctl/output.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>

namespace iscsigw::ctl {

namespace v1 = iscsigw::v1;

void Table::Print() const {
  std::vector<size_t> w;
  for (const auto& r : rows_) {
    w.resize(std::max(w.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  }
  for (const auto& r : rows_) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string HumanSize(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t v = b;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + units[u];
}

std::string Backing(const v1::Lun& l) {
  switch (l.backing_case()) {
    case v1::Lun::kRam:
      return "ram";
    case v1::Lun::kNull:
      return "null";
    case v1::Lun::kFile:
      return "file:" + l.file().path() + (l.file().direct() ? " (direct)" : "");
    case v1::Lun::kRbd:
      return "rbd:" + l.rbd().pool() + "/" +
             (l.rbd().namespace_().empty() ? "" : l.rbd().namespace_() + "/") + l.rbd().image();
    default:
      return "?";
  }
}

std::string Join(const google::protobuf::RepeatedPtrField<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

void PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  std::printf("%s", out.c_str());
  if (out.empty() || out.back() != '\n') std::printf("\n");
}

void PrintLuns(const std::string& target, const google::protobuf::RepeatedPtrField<v1::Lun>& luns) {
  Table t({"TARGET", "LUN", "BACKING", "SIZE", "BLOCK", "RO", "STATE", "ALUA", "SERIAL"});
  for (const auto& l : luns) {
    t.Add({target, std::to_string(l.id()), Backing(l), HumanSize(l.size_bytes()),
           l.physical_block_size() > l.block_size()
               ? std::to_string(l.block_size()) + "/" + std::to_string(l.physical_block_size())
               : std::to_string(l.block_size()),
           l.read_only() ? "yes" : "no", l.offline_reason().empty() ? "online" : "offline",
           l.access_state() == "active/non-optimized" ? "non-optimized"
           : l.access_state().empty()                 ? "-"
                                                      : "optimized",
           l.serial()});
  }
  t.Print();
  for (const auto& l : luns) {
    if (!l.offline_reason().empty()) {
      std::printf("lun %u offline: %s\n", l.id(), l.offline_reason().c_str());
    }
  }
}

void PrintTarget(const v1::Target& t) {
  std::printf("name:        %s\n", t.name().c_str());
  if (!t.alias().empty()) std::printf("alias:       %s\n", t.alias().c_str());
  std::printf("allow any:   %s\n", t.allow_any_initiator() ? "yes" : "no");
  std::printf(
      "chap:        %s\n",
      t.chap().user().empty()
          ? "none"
          : (t.chap().user() + (t.chap().mutual_user().empty() ? "" : " (mutual)")).c_str());
  std::printf("acl:         %d entr%s\n", t.acl_size(), t.acl_size() == 1 ? "y" : "ies");
  for (const auto& e : t.acl()) {
    std::printf("  %s%s%s\n", e.initiator().c_str(), e.sources_size() ? " from " : "",
                Join(e.sources(), ",").c_str());
  }
  std::printf("luns:        %d\n", t.luns_size());
  if (t.luns_size()) PrintLuns(t.name(), t.luns());
}

}  // namespace iscsigw::ctl
