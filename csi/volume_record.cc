#include "csi/volume_record.h"

#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "csi/volume_model.h"

namespace iscsigw::csi {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

Status FileError(const std::string& what, const std::string& path) {
  return Internal(what + " " + path + ": " + std::strerror(errno));
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FileError("write", path);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError("open", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::Ok() : FileError("fsync", dir);
}

// The directory records live in: made 0700 when missing, and brought back to 0700 when it is not;
// a symlink or anything else that is not a directory of ours is refused.
Status PrivateDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
  if (ec) return Internal("create " + dir + ": " + ec.message());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return FileError("create", dir);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return FileError("stat", dir);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    return Internal(dir + ": not a directory of this process's user; not keeping records there");
  }
  if ((st.st_mode & 07777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) {
    return FileError("chmod 0700", dir);
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  // O_NOFOLLOW: a symlink planted where a record belongs is not read as one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return NotFound(path);
  if (fd < 0 && errno == ELOOP) return Internal(path + " is a symlink; not reading it as a record");
  if (fd < 0) return FileError("open", path);
  std::string data;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Status s = FileError("read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

constexpr char kSuffix[] = ".json";
constexpr size_t kMaxFileName = 255;  // NAME_MAX of ext4, xfs and tmpfs

const std::string& StringField(const Struct& s, const std::string& key) {
  static const std::string kEmpty;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kEmpty : it->second.string_value();
}

}  // namespace

std::string RecordStore::PathOf(const std::string& volume_id) const {
  std::string name;
  for (unsigned char c : volume_id) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      name += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      name += hex;
    }
  }
  // "." and ".." are names of their own; a leading '.' is escaped so no id makes one (and the
  // temporary files, ".tmp-*", are never taken for a record).
  if (!name.empty() && name[0] == '.') name.replace(0, 1, "%2E");
  if (name.size() + sizeof(kSuffix) - 1 > kMaxFileName) name = "+sha256-" + Sha256Hex(volume_id);
  return dir_ + "/" + name + kSuffix;
}

Status RecordStore::Save(const VolumeRecord& r) const {
  Struct s;
  auto& f = *s.mutable_fields();
  f["volumeId"].set_string_value(r.volume_id);
  f["targetIqn"].set_string_value(r.target_iqn);
  f["lun"].set_number_value(r.lun);
  auto* portals = f["portals"].mutable_list_value();
  for (const auto& p : r.portals) portals->add_values()->set_string_value(p);
  auto* addresses = f["addresses"].mutable_list_value();
  for (const auto& a : r.addresses) addresses->add_values()->set_string_value(a);
  auto* made = f["madeNodeRecords"].mutable_list_value();
  for (const auto& a : r.made_node_records) made->add_values()->set_string_value(a);
  auto* logged_in = f["loggedIn"].mutable_list_value();
  for (const auto& a : r.logged_in) logged_in->add_values()->set_string_value(a);
  f["stagingPath"].set_string_value(r.staging_path);
  f["block"].set_bool_value(r.block);
  f["fsType"].set_string_value(r.fs_type);
  f["readOnly"].set_bool_value(r.read_only);
  auto* flags = f["mountFlags"].mutable_list_value();
  for (const auto& m : r.mount_flags) flags->add_values()->set_string_value(m);
  f["device"].set_string_value(r.device);
  f["multipathMap"].set_string_value(r.multipath_map);
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  if (!google::protobuf::util::MessageToJsonString(s, &json, opts).ok()) {
    return Internal("volume " + r.volume_id + ": cannot encode its record");
  }
  if (Status dir = PrivateDir(dir_); !dir.ok()) return dir;
  const std::string path = PathOf(r.volume_id);
  // A new file of our own (O_CREAT | O_EXCL, 0600): never one that was there, nor a symlink.
  std::string tmp = dir_ + "/.tmp-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return FileError("create", tmp);
  Status s_write = WriteAll(fd, json, tmp);
  if (s_write.ok() && ::fsync(fd) != 0) s_write = FileError("fsync", tmp);
  ::close(fd);
  if (s_write.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s_write = FileError("rename to", path);
  }
  if (!s_write.ok()) {
    ::unlink(tmp.c_str());
    return s_write;
  }
  return SyncDir(dir_);
}

Result<std::optional<VolumeRecord>> RecordStore::Load(const std::string& volume_id) const {
  const std::string path = PathOf(volume_id);
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return std::optional<VolumeRecord>();
    return text.status();
  }
  auto r = Parse(path, text.value());
  if (!r.ok()) return r.status();
  if (r->volume_id != volume_id) {
    return Internal(path + ": not the record of volume " + volume_id);
  }
  return std::optional<VolumeRecord>(std::move(r.value()));
}

Result<std::vector<VolumeRecord>> RecordStore::LoadAll() const {
  std::vector<VolumeRecord> all;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir_, ec);
  if (ec == std::errc::no_such_file_or_directory) return all;
  if (ec) return Internal("list " + dir_ + ": " + ec.message());
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with('.') || !name.ends_with(kSuffix)) continue;  // temporary files
    const std::string path = it->path().string();
    auto text = ReadFile(path);
    if (!text.ok() && text.status().code() == StatusCode::kNotFound) continue;  // just removed
    if (!text.ok()) return text.status();
    auto r = Parse(path, text.value());
    if (!r.ok()) return r.status();
    all.push_back(std::move(r.value()));
  }
  if (ec) return Internal("list " + dir_ + ": " + ec.message());
  return all;
}

Result<VolumeRecord> RecordStore::Parse(const std::string& path, const std::string& text) {
  Struct s;
  if (!google::protobuf::util::JsonStringToMessage(text, &s).ok()) {
    return Internal(path + ": not a volume record (invalid JSON)");
  }
  VolumeRecord r;
  r.volume_id = StringField(s, "volumeId");
  r.target_iqn = StringField(s, "targetIqn");
  if (auto it = s.fields().find("lun"); it != s.fields().end()) {
    r.lun = static_cast<int>(it->second.number_value());
  }
  if (auto it = s.fields().find("portals"); it != s.fields().end()) {
    for (const Value& v : it->second.list_value().values()) r.portals.push_back(v.string_value());
  }
  if (auto it = s.fields().find("addresses"); it != s.fields().end()) {
    for (const Value& v : it->second.list_value().values()) {
      r.addresses.push_back(v.string_value());
    }
  } else {
    r.addresses = r.portals;
  }
  auto strings = [&](const char* key, std::vector<std::string>* out) {
    auto it = s.fields().find(key);
    if (it == s.fields().end()) {
      *out = r.addresses;
      return;
    }
    for (const Value& v : it->second.list_value().values()) out->push_back(v.string_value());
  };
  strings("madeNodeRecords", &r.made_node_records);
  strings("loggedIn", &r.logged_in);
  r.staging_path = StringField(s, "stagingPath");
  if (auto it = s.fields().find("block"); it != s.fields().end()) r.block = it->second.bool_value();
  r.fs_type = StringField(s, "fsType");
  if (auto it = s.fields().find("readOnly"); it != s.fields().end()) {
    r.read_only = it->second.bool_value();
    if (auto m = s.fields().find("mountFlags"); m != s.fields().end()) {
      for (const Value& v : m->second.list_value().values()) {
        r.mount_flags.push_back(v.string_value());
      }
    }
  } else {
    r.access_known = false;
  }
  r.device = StringField(s, "device");
  r.multipath_map = StringField(s, "multipathMap");
  if (r.volume_id.empty() || r.target_iqn.empty()) {
    return Internal(path + ": not a volume record (no volumeId or targetIqn)");
  }
  return r;
}

Status RecordStore::Remove(const std::string& volume_id) const {
  const std::string path = PathOf(volume_id);
  if (::unlink(path.c_str()) != 0) {
    if (errno != ENOENT) return FileError("remove", path);
    return Status::Ok();
  }
  // The records outlive the plugin and the node's crashes: a removal lost to one would bring
  // back a volume that is no longer staged, and refuse its next stage as something else.
  return SyncDir(dir_);
}

}  // namespace iscsigw::csi
