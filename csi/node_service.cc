#include "csi/node_service.h"

#include <fcntl.h>
#include <grpcpp/alarm.h>
#include <linux/fs.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include "csi/volume_model.h"
#include "base/log.h"
#include "rpc/grpc_util.h"

namespace iscsigw::csi {

using ::csi::v1::NodeServiceCapability;
using ::csi::v1::VolumeCapability;
using ::csi::v1::VolumeUsage;
using Clock = std::chrono::steady_clock;

namespace {

// open-iscsi's exit codes (include/iscsi_err.h) that mean "already so".
constexpr int kIscsiErrSessExists = 15;   // login: the session is already logged in
constexpr int kIscsiErrNoObjsFound = 21;  // logout, delete, session list: nothing there

constexpr std::chrono::milliseconds kLoginTimeout{150'000};
constexpr std::chrono::milliseconds kLongTimeout{600'000};  // mkfs, resize2fs on a big volume

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  return std::string(s);
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto at = s.find(sep);
    std::string part = Trim(s.substr(0, at));
    if (!part.empty()) out.push_back(std::move(part));
    if (at == std::string_view::npos) break;
    s.remove_prefix(at + 1);
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

std::string Dirname(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool ReadOnly(const VolumeCapability& cap) {
  const auto mode = cap.access_mode().mode();
  return mode == VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY ||
         mode == VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY;
}

const std::string* Lookup(const google::protobuf::Map<std::string, std::string>& first,
                          const google::protobuf::Map<std::string, std::string>& second,
                          const std::string& key) {
  if (auto it = first.find(key); it != first.end()) return &it->second;
  if (auto it = second.find(key); it != second.end()) return &it->second;
  return nullptr;
}

Status CheckCapability(const VolumeCapability& cap, bool has_cap) {
  if (!has_cap) return InvalidArgument("volume_capability is required");
  if (cap.has_mount()) {
    const std::string& fs = cap.mount().fs_type();
    if (!fs.empty() && fs != "ext4" && fs != "xfs") {
      return InvalidArgument("volume_capability.mount.fs_type " + fs +
                             " is not supported (ext4 or xfs)");
    }
    if (cap.access_mode().mode() == VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER) {
      return InvalidArgument(
          "volume_capability: MULTI_NODE_MULTI_WRITER needs block access; ext4 and xfs cannot "
          "be mounted by several nodes at once");
    }
    return Status::Ok();
  }
  if (cap.has_block()) return Status::Ok();
  return InvalidArgument("volume_capability: neither block nor mount access");
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// HOST:PORT or [IPv6]:PORT: the host (no brackets) and the port, or nullopt. An IPv6 address
// without brackets is refused: where it ends and the port begins is a guess.
std::optional<std::pair<std::string, std::string>> SplitPortal(const std::string& portal) {
  std::string host, port;
  if (portal.starts_with('[')) {
    const auto close = portal.find(']');
    if (close == std::string::npos || close == 1 || portal.substr(close + 1, 1) != ":") {
      return std::nullopt;
    }
    host = portal.substr(1, close - 1);
    port = portal.substr(close + 2);
  } else {
    const auto colon = portal.rfind(':');
    if (colon == std::string::npos || colon == 0) return std::nullopt;
    host = portal.substr(0, colon);
    port = portal.substr(colon + 1);
    if (host.find(':') != std::string::npos) return std::nullopt;
  }
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) == 0 ||
      std::stoi(port) > 65535) {
    return std::nullopt;
  }
  return std::pair{host, port};
}

// The by-path link of a LUN behind `address` (IP:PORT or [IPv6]:PORT). udev's path_id names it
// after the session's persistent_address, which is the address as iscsiadm was given it, without
// brackets: ip-10.0.2.2:3260-iscsi-IQN-lun-0, ip-fd00::2:3260-iscsi-IQN-lun-0.
std::string ByPath(const std::string& address, const std::string& iqn, int lun) {
  std::string addr = address;
  if (addr.starts_with('[')) {
    const auto close = addr.find(']');
    addr = addr.substr(1, close - 1) + addr.substr(close + 1);
  }
  return "/dev/disk/by-path/ip-" + addr + "-iscsi-" + iqn + "-lun-" + std::to_string(lun);
}

// kubelet's paths are absolute; anything else would be taken relative to wherever a host command
// happens to run, and one starting with '-' as an option of it.
Status CheckPath(const std::string& field, const std::string& path) {
  if (path.empty()) return InvalidArgument(field + " is required");
  if (path.front() != '/') return InvalidArgument(field + " " + path + " is not an absolute path");
  if (path.find('\0') != std::string::npos) return InvalidArgument(field + " holds a NUL byte");
  return Status::Ok();
}

// RFC 7143 4.2.7: an iSCSI name is iqn.YYYY-MM.reversed.domain[:anything], eui. and 16 hex
// digits, or naa. and 16 or 32; at most 223 bytes, and (after stringprep, 4.2.7.1) no upper
// case letters. The name goes onto iscsiadm's command line and into a /dev/disk/by-path name.
Status CheckTargetIqn(const std::string& name) {
  const std::string field = "volume_context.targetIqn " + name;
  if (name.size() > 223) return InvalidArgument(field + " is longer than 223 bytes");
  for (unsigned char c : name) {
    if (!std::islower(c) && !std::isdigit(c) && c != '.' && c != '-' && c != ':') {
      return InvalidArgument(field + ": character '" + std::string(1, static_cast<char>(c)) +
                             "' is not allowed (lower-case letters, digits, '.', '-', ':')");
    }
  }
  auto digits = [&](size_t from, size_t n) {
    for (size_t i = from; i < from + n; ++i) {
      if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return false;
    }
    return true;
  };
  if (name.starts_with("iqn.")) {
    // iqn.YYYY-MM. then at least one character of the naming authority.
    if (!digits(4, 4) || name[8] != '-' || !digits(9, 2) || name.size() < 13 || name[11] != '.') {
      return InvalidArgument(field + ": an iqn. name is iqn.YYYY-MM.reversed.domain[:id]");
    }
    return Status::Ok();
  }
  auto hex = [&](std::initializer_list<size_t> lengths) {
    const std::string_view tail = std::string_view(name).substr(4);
    if (std::find(lengths.begin(), lengths.end(), tail.size()) == lengths.end()) return false;
    return tail.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  };
  if (name.starts_with("eui.")) {
    if (hex({16})) return Status::Ok();
    return InvalidArgument(field + ": an eui. name is eui. and 16 hex digits");
  }
  if (name.starts_with("naa.")) {
    if (hex({16, 32})) return Status::Ok();
    return InvalidArgument(field + ": a naa. name is naa. and 16 or 32 hex digits");
  }
  return InvalidArgument(field + " is not an iSCSI name (iqn., eui. or naa.)");
}

}  // namespace

std::string RedactedCommandLine(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (!out.empty()) out += ' ';
    // ... -n KEY -v VALUE, KEY naming a password: VALUE never leaves this process.
    const bool secret = i >= 3 && argv[i - 1] == "-v" && argv[i - 3] == "-n" &&
                        argv[i - 2].find("password") != std::string::npos;
    out += secret ? "<redacted>" : argv[i];
  }
  return out;
}

// Holds one target's session decisions for the life of a scope; other targets go on.
class NodeService::TargetLock {
 public:
  TargetLock(NodeService& node, std::string iqn) : node_(node), iqn_(std::move(iqn)) {
    std::unique_lock lock(node_.targets_mu_);
    node_.targets_cv_.wait(lock, [&] { return !node_.busy_targets_.contains(iqn_); });
    node_.busy_targets_.insert(iqn_);
  }
  ~TargetLock() {
    std::lock_guard lock(node_.targets_mu_);
    node_.busy_targets_.erase(iqn_);
    node_.targets_cv_.notify_all();
  }
  TargetLock(const TargetLock&) = delete;
  TargetLock& operator=(const TargetLock&) = delete;

 private:
  NodeService& node_;
  const std::string iqn_;
};

// The host commands the RPCs are made of. Every one goes through HostExec, is logged at debug
// with its secrets redacted, and fails with a message naming the (redacted) command and what it
// printed on stderr.
class NodeService::Host {
 public:
  Host(HostExec& exec, const NodeOptions& options) : exec_(exec), options_(options) {}

  Result<ExecResult> Run(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(30'000)) {
    ExecOptions o;
    o.timeout = timeout;
    const auto start = Clock::now();
    auto r = exec_.Run(argv, o);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (!r.ok()) {
      log::Ctl().debug("host: {}: {}", RedactedCommandLine(argv), r.status().message());
      return Internal(RedactedCommandLine(argv) + ": " + r.status().message());
    }
    log::Ctl().debug("host: {} ({}, {} ms)", RedactedCommandLine(argv), r->Describe(), ms);
    return r;
  }

  // Runs argv; an exit code outside `ok_codes` is an INTERNAL error naming the command.
  Result<ExecResult> Check(const std::vector<std::string>& argv, std::set<int> ok_codes = {0},
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(30'000)) {
    auto r = Run(argv, timeout);
    if (!r.ok()) return r.status();
    if (r->timed_out || !ok_codes.contains(r->exit_code)) {
      return Internal(RedactedCommandLine(argv) + ": " + r->Describe());
    }
    return r;
  }

  // The portals (HOST:PORT) with a session logged in to `iqn`.
  Result<std::set<std::string>> SessionPortals(const std::string& iqn) {
    auto r = Check({"iscsiadm", "-m", "session"}, {0, kIscsiErrNoObjsFound});
    if (!r.ok()) return r.status();
    std::set<std::string> portals;
    // "tcp: [1] 10.0.2.2:3260,1 iqn.2026-11.io.iscsigw:pvc-1 (non-flash)"
    std::istringstream lines(r->exit_code == 0 ? r->stdout_data : "");
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream words(line);
      std::string transport, sid, portal, target;
      if (!(words >> transport >> sid >> portal >> target) || target != iqn) continue;
      portals.insert(portal.substr(0, portal.find(',')));
    }
    return portals;
  }

  // Whether open-iscsi has a node record for `iqn` at `portal`.
  Result<bool> NodeRecordExists(const std::string& iqn, const std::string& portal) {
    auto r = Check({"iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "show"},
                   {0, kIscsiErrNoObjsFound});
    if (!r.ok()) return r.status();
    return r->exit_code == 0;
  }

  // new_record: make the node record (`-o new`, startup manual); else it is someone else's and
  // only gets the volume's CHAP settings, which the login needs.
  Status Login(const std::string& iqn, const std::string& portal, const ChapSecrets& chap,
               bool new_record) {
    const std::vector<std::string> node = {"iscsiadm", "-m", "node", "-T", iqn, "-p", portal};
    auto with = [&](std::initializer_list<std::string> more) {
      std::vector<std::string> argv = node;
      argv.insert(argv.end(), more);
      return argv;
    };
    auto update = [&](const std::string& key, const std::string& value) {
      return Check(with({"-o", "update", "-n", key, "-v", value})).status();
    };
    if (new_record) {
      if (auto r = Check(with({"-o", "new"})); !r.ok()) return r.status();
      if (Status s = update("node.startup", "manual"); !s.ok()) return s;
    }
    if (chap.enabled()) {
      if (Status s = update("node.session.auth.authmethod", "CHAP"); !s.ok()) return s;
      if (Status s = update(kChapUser, chap.user); !s.ok()) return s;
      if (Status s = update(kChapSecret, chap.secret); !s.ok()) return s;
      if (!chap.user_in.empty()) {
        if (Status s = update(kChapUserIn, chap.user_in); !s.ok()) return s;
        if (Status s = update(kChapSecretIn, chap.secret_in); !s.ok()) return s;
      }
    }
    return Check(with({"--login"}), {0, kIscsiErrSessExists}, kLoginTimeout).status();
  }

  Status Logout(const std::string& iqn, const std::string& portal) {
    return Check({"iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "--logout"},
                 {0, kIscsiErrNoObjsFound}, kLoginTimeout)
        .status();
  }

  Status DeleteNodeRecord(const std::string& iqn, const std::string& portal) {
    return Check({"iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "delete"},
                 {0, kIscsiErrNoObjsFound})
        .status();
  }

  // What `path` resolves to once it exists (readlink -e), polled until the deadline.
  Result<std::string> WaitFor(const std::string& path, Clock::time_point deadline) {
    for (;;) {
      auto r = Run({"readlink", "-e", path});
      if (!r.ok()) return r.status();
      if (r->ok() && !Trim(r->stdout_data).empty()) return Trim(r->stdout_data);
      if (Clock::now() >= deadline) {
        return Internal(path + " did not appear within " +
                        std::to_string(options_.attach_timeout.count() / 1000) + " s of the login");
      }
      std::this_thread::sleep_for(options_.poll_interval);
    }
  }

  // The dm-multipath map multipathd made over `paths` (/dev/sdX): its name, polled for.
  Result<std::string> WaitForMap(const std::vector<std::string>& paths,
                                 Clock::time_point deadline) {
    const std::string sd = paths.front().substr(paths.front().rfind('/') + 1);
    for (;;) {
      auto r = Run({"ls", "/sys/block/" + sd + "/holders"});
      if (!r.ok()) return r.status();
      for (const auto& holder : Split(r->ok() ? r->stdout_data : "", '\n')) {
        if (!holder.starts_with("dm-")) continue;
        auto name = Run({"cat", "/sys/block/" + holder + "/dm/name"});
        if (!name.ok()) return name.status();
        if (name->ok() && !Trim(name->stdout_data).empty()) return Trim(name->stdout_data);
      }
      if (Clock::now() >= deadline) {
        return Internal("no multipath map over " + Join(paths, ", ") + " within " +
                        std::to_string(options_.attach_timeout.count() / 1000) +
                        " s (is multipathd running on the node?)");
      }
      std::this_thread::sleep_for(options_.poll_interval);
    }
  }

  struct Mount {
    std::string source;  // findmnt's SOURCE: /dev/sdb, or /dev/sdb[/dir] for a bind of a dir
    bool read_only = false;
    std::string Describe() const { return source + (read_only ? " (ro)" : " (rw)"); }
  };

  // What is mounted at `path` (the last mount, when several are stacked), or nullopt.
  // The path is the argument of --mountpoint, which findmnt never reads as an option; after
  // `--` it would be a positional one, matched against sources as well.
  Result<std::optional<Mount>> MountedAt(const std::string& path) {
    auto r = Check({"findmnt", "-n", "-o", "SOURCE,OPTIONS", "--mountpoint", path}, {0, 1});
    if (!r.ok()) return r.status();
    const auto lines = Split(r->exit_code == 0 ? r->stdout_data : "", '\n');
    if (lines.empty()) return std::optional<Mount>();
    std::istringstream words(lines.back());
    Mount m;
    std::string options;
    words >> m.source >> options;
    m.read_only = Contains(Split(options, ','), "ro");
    return std::optional<Mount>(std::move(m));
  }

  // Whether `a` and `b` are (or lead to) the same device node: their major:minor.
  Result<bool> SameDevice(const std::string& a, const std::string& b) {
    auto numbers = [&](const std::string& path) -> Result<std::string> {
      auto r = Check({"stat", "-L", "-c", "%t:%T", "--", path});
      if (!r.ok()) return r.status();
      return Trim(r->stdout_data);
    };
    auto na = numbers(a);
    if (!na.ok()) return na.status();
    auto nb = numbers(b);
    if (!nb.ok()) return nb.status();
    return !na->empty() && na.value() == nb.value();
  }

  // blkid -p: the file system on `device` ("" when it has none). A partition table or a
  // signature blkid cannot settle counts as "something": never formatted over.
  Result<std::string> FileSystemOn(const std::string& device) {
    const std::vector<std::string> argv = {"blkid", "-p", "-o", "export", device};
    auto r = Check(argv, {0, 2});
    if (!r.ok()) return r.status();
    if (r->exit_code == 2) {
      // Exit 2 is "nothing found" and also "could not open or read the device"; only the
      // latter says something on stderr. A device we could not read is not a blank one.
      if (!Trim(r->stderr_data).empty()) {
        return Internal(RedactedCommandLine(argv) + ": " + r->Describe());
      }
      return std::string();
    }
    std::string type, pttype;
    for (const auto& line : Split(r->stdout_data, '\n')) {
      if (line.starts_with("TYPE=")) type = line.substr(5);
      if (line.starts_with("PTTYPE=")) pttype = line.substr(7);
    }
    if (!type.empty()) return type;
    if (!pttype.empty()) {
      return FailedPrecondition(device + " holds a " + pttype +
                                " partition table and no file system; not formatting it");
    }
    return FailedPrecondition(device +
                              ": blkid -p found a signature it cannot name; not "
                              "formatting it");
  }

  struct FileSystemSize {
    int64_t bytes = 0;
    int64_t block = 0;
  };

  // The size of the file system on `device`, mounted at `mount`, as its superblock says:
  // dumpe2fs -h (ext4: Block count, Block size), xfs_info (its data section: blocks, bsize).
  Result<FileSystemSize> SizeOfFileSystem(const std::string& fs_type, const std::string& device,
                                          const std::string& mount) {
    const bool xfs = fs_type == "xfs";
    const std::vector<std::string> argv = xfs ? std::vector<std::string>{"xfs_info", mount}
                                              : std::vector<std::string>{"dumpe2fs", "-h", device};
    auto r = Check(argv);
    if (!r.ok()) return r.status();
    auto number_after = [](const std::string& line, const std::string& key) -> int64_t {
      const auto at = line.find(key);
      if (at == std::string::npos) return 0;
      const auto from = line.find_first_not_of(' ', at + key.size());
      if (from == std::string::npos) return 0;
      int64_t n = 0;
      for (size_t i = from; i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]));
           ++i) {
        if (n > (INT64_MAX - 9) / 10) return 0;
        n = n * 10 + (line[i] - '0');
      }
      return n;
    };
    int64_t blocks = 0, block = 0;
    for (const auto& line : Split(r->stdout_data, '\n')) {
      if (xfs && line.starts_with("data ")) {
        // "data     =                       bsize=4096   blocks=65536, imaxpct=25"
        blocks = number_after(line, "blocks=");
        block = number_after(line, "bsize=");
      } else if (!xfs && line.starts_with("Block count:")) {
        blocks = number_after(line, "Block count:");
      } else if (!xfs && line.starts_with("Block size:")) {
        block = number_after(line, "Block size:");
      }
    }
    if (blocks <= 0 || block <= 0 || blocks > INT64_MAX / block) {
      return Internal(RedactedCommandLine(argv) + ": no block count and block size in its output");
    }
    return FileSystemSize{blocks * block, block};
  }

  // Grows the file system to its device: resize2fs on the device (ext4, online), xfs_growfs -d
  // on its mount point (xfs grows only mounted).
  Status GrowFileSystem(const std::string& fs_type, const std::string& device,
                        const std::string& mount) {
    const std::vector<std::string> argv = fs_type == "xfs"
                                              ? std::vector<std::string>{"xfs_growfs", "-d", mount}
                                              : std::vector<std::string>{"resize2fs", device};
    return Check(argv, {0}, kLongTimeout).status();
  }

  Result<int64_t> SizeOf(const std::string& device) {
    auto r = Check({"blockdev", "--getsize64", device});
    if (!r.ok()) return r.status();
    try {
      return static_cast<int64_t>(std::stoll(Trim(r->stdout_data)));
    } catch (const std::exception&) {
      return Internal("blockdev --getsize64 " + device + ": unexpected output");
    }
  }

 private:
  HostExec& exec_;
  const NodeOptions& options_;
};

NodeService::NodeService(NodeOptions options)
    : options_(std::move(options)),
      exec_(options_.host_exec ? options_.host_exec : MakeHostExec(options_.host_exec_mode)),
      records_(options_.state_dir + "/volumes"),
      host_(std::make_unique<Host>(*exec_, options_)),
      stat_volume_(options_.stat_volume ? options_.stat_volume : StatVolumePath),
      resolve_host_(options_.resolve_host ? options_.resolve_host : ResolveHost),
      stats_probes_(std::make_shared<std::atomic<size_t>>(0)),
      queue_(options_.workers, options_.max_queued, options_.max_queued_per_volume) {}

NodeService::~NodeService() = default;

void NodeService::Queue(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                        const std::string& key, std::function<grpc::Status()> work) {
  const auto deadline = ctx->deadline();
  // ctx stays valid until the reactor is finished, and the job finishes it.
  auto job = [ctx, reactor, deadline, key, work = std::move(work)](bool cancelled) {
    if (cancelled) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the node plugin is stopping"));
      return;
    }
    if (ctx->IsCancelled()) {
      // The caller went away, or the server is shutting down and gave up on the call: a mkfs or
      // a login started now would run for nobody, after the plugin was told to stop.
      reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                                   "the call was cancelled while it waited its turn"));
      return;
    }
    if (std::chrono::system_clock::now() >= deadline) {
      // The caller has given up; its retry finds the volume as the last finished call left it.
      reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                   "the call's deadline passed while it waited its turn"));
      return;
    }
    grpc::Status status;
    try {
      status = work();
    } catch (const std::exception& e) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, std::string("node: ") + e.what());
    }
    reactor->Finish(status);
  };
  switch (queue_.Submit(key, std::move(job))) {
    case KeyedWorkQueue::Admit::kQueued:
      return;
    case KeyedWorkQueue::Admit::kQueueFull:
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "the node plugin has too many calls waiting; retry later"));
      return;
    case KeyedWorkQueue::Admit::kKeyBusy:
      reactor->Finish(
          grpc::Status(grpc::StatusCode::ABORTED, "an operation is pending for volume " + key));
      return;
  }
}

grpc::ServerUnaryReactor* NodeService::Serve(grpc::CallbackServerContext* ctx, std::string_view rpc,
                                             const std::string& volume_id, const Status& checked,
                                             std::function<Result<std::string>()> work) {
  auto* reactor = ctx->DefaultReactor();
  if (!checked.ok()) {
    reactor->Finish(rpc::ToGrpcStatus(checked));
    return reactor;
  }
  std::string who(rpc);
  if (!volume_id.empty()) who += " " + volume_id;
  Queue(ctx, reactor, volume_id, [who = std::move(who), work = std::move(work)] {
    Result<std::string> done = work();
    if (!done.ok()) {
      log::Ctl().warn("{}: {}", who, done.status().message());
      return rpc::ToGrpcStatus(done.status());
    }
    log::Ctl().info("{}: {}", who, done.value());
    return grpc::Status::OK;
  });
  return reactor;
}

// ---- NodeStageVolume / NodeUnstageVolume ----

namespace {

// The checks NodeStageVolume makes before it queues: the request's fields and the target they
// name, filled into `target`.
Status CheckStage(const ::csi::v1::NodeStageVolumeRequest& req, NodeService::Target* target) {
  if (req.volume_id().empty()) return InvalidArgument("volume_id is required");
  if (Status s = CheckPath("staging_target_path", req.staging_target_path()); !s.ok()) return s;
  if (Status s = CheckCapability(req.volume_capability(), req.has_volume_capability()); !s.ok()) {
    return s;
  }
  auto refuse = [&](const std::string& msg) {
    return InvalidArgument("volume " + req.volume_id() + ": " + msg);
  };
  const auto* iqn = Lookup(req.volume_context(), req.publish_context(), kCtxTargetIqn);
  if (iqn == nullptr || iqn->empty()) return refuse("volume_context.targetIqn is required");
  if (Status s = CheckTargetIqn(*iqn); !s.ok()) return refuse(s.message());
  target->iqn = *iqn;
  const auto* portals = Lookup(req.volume_context(), req.publish_context(), kCtxPortals);
  if (portals != nullptr) target->portals = Split(*portals, ',');
  if (target->portals.empty()) return refuse("volume_context.portals is required");
  for (const auto& p : target->portals) {
    if (!SplitPortal(p)) {
      return refuse("volume_context.portals: " + p +
                    " is not HOST:PORT (an IPv6 address as [ADDR]:PORT)");
    }
  }
  if (const auto* lun = Lookup(req.volume_context(), req.publish_context(), kCtxLun)) {
    if (lun->empty() || lun->size() > 5 ||
        lun->find_first_not_of("0123456789") != std::string::npos) {
      return refuse("volume_context.lun " + *lun + " is not a LUN number");
    }
    target->lun = std::stoi(*lun);
  }
  auto chap = ParseChapSecrets(req.secrets());
  if (!chap.ok()) return refuse(chap.status().message());
  target->chap = chap.value();
  if (const auto* own = Lookup(req.volume_context(), req.publish_context(), kCtxChapPerVolume)) {
    if (*own != "true" && *own != "false") {
      return refuse("volume_context.chapPerVolume '" + *own + "' is not true or false");
    }
    if (*own == "true") {
      if (!target->chap.enabled()) {
        return refuse(std::string("volume_context.chapPerVolume needs CHAP in the node-stage "
                                  "secret (") +
                      kChapUser + ", " + kChapSecret + ")");
      }
      auto derived = ChapForVolume(target->chap, req.volume_id());
      if (!derived.ok()) return derived.status();
      target->chap = derived.value();
    }
  }
  return Status::Ok();
}

}  // namespace

grpc::ServerUnaryReactor* NodeService::NodeStageVolume(grpc::CallbackServerContext* ctx,
                                                       const ::csi::v1::NodeStageVolumeRequest* req,
                                                       ::csi::v1::NodeStageVolumeResponse*) {
  Target target;
  Status checked = CheckStage(*req, &target);
  return Serve(ctx, "NodeStageVolume", req->volume_id(), checked,
               [this, req, target]() -> Result<std::string> {
                 const auto start = Clock::now();
                 if (Status s = Stage(*req, target); !s.ok()) return s;
                 const auto ms =
                     std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
                 return "staged at " + req->staging_target_path() + " in " +
                        std::to_string(ms.count()) + " ms";
               });
}

namespace {

// OK when `now` asks for what `staged` is; else ALREADY_EXISTS naming the first difference.
Status SameStage(const VolumeRecord& staged, const VolumeRecord& now) {
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  auto differs = [&](const std::string& what, const std::string& was, const std::string& is) {
    return AlreadyExists("volume " + now.volume_id + " is staged on this node with " + what + " " +
                         was + ", not " + is + " (NodeUnstageVolume first)");
  };
  auto access = [](bool block, const std::string& fs) { return block ? "block" : "mount " + fs; };
  if (staged.target_iqn != now.target_iqn) {
    return differs("targetIqn", staged.target_iqn, now.target_iqn);
  }
  if (staged.lun != now.lun) {
    return differs("lun", std::to_string(staged.lun), std::to_string(now.lun));
  }
  if (sorted(staged.portals) != sorted(now.portals)) {
    return differs("portals", Join(staged.portals, ","), Join(now.portals, ","));
  }
  if (staged.block != now.block || staged.fs_type != now.fs_type) {
    return differs("access", access(staged.block, staged.fs_type), access(now.block, now.fs_type));
  }
  if (!staged.access_known) return Status::Ok();  // a record from before these were kept
  if (staged.read_only != now.read_only) {
    return differs("access mode", staged.read_only ? "read-only" : "read-write",
                   now.read_only ? "read-only" : "read-write");
  }
  if (sorted(staged.mount_flags) != sorted(now.mount_flags)) {
    return differs("mount_flags", "[" + Join(staged.mount_flags, ",") + "]",
                   "[" + Join(now.mount_flags, ",") + "]");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> NodeService::ResolvePortals(
    const std::vector<std::string>& portals) {
  std::vector<std::string> addresses;
  for (const auto& portal : portals) {
    const auto split = SplitPortal(portal);  // checked on the gRPC thread
    const auto& [host, port] = *split;
    auto addr = resolve_host_(host);
    if (!addr.ok()) return addr.status();
    // A wildcard is where a server listens, not an address to reach it at.
    if (addr.value() == "0.0.0.0" || addr.value() == "::") {
      return InvalidArgument("volume_context.portals: " + portal + ": " + host +
                             " is a wildcard address (" + addr.value() + "), not a portal's");
    }
    const bool v6 = addr->find(':') != std::string::npos;
    addresses.push_back((v6 ? "[" + addr.value() + "]" : addr.value()) + ":" + port);
    if (addresses.back() != portal) {
      log::Ctl().debug("portal {} is at {}", portal, addresses.back());
    }
  }
  return addresses;
}

Status NodeService::Stage(const ::csi::v1::NodeStageVolumeRequest& req, const Target& target) {
  const VolumeCapability& cap = req.volume_capability();
  VolumeRecord rec;
  rec.volume_id = req.volume_id();
  rec.target_iqn = target.iqn;
  rec.lun = target.lun;
  rec.portals = target.portals;
  rec.staging_path = req.staging_target_path();
  rec.block = cap.has_block();
  rec.fs_type = rec.block ? "" : (cap.mount().fs_type().empty() ? "ext4" : cap.mount().fs_type());
  rec.read_only = ReadOnly(cap);
  if (!rec.block) {
    rec.mount_flags.assign(cap.mount().mount_flags().begin(), cap.mount().mount_flags().end());
  }
  auto old = records_.Load(rec.volume_id);
  if (!old.ok()) return old.status();
  if (old.value()) {
    // CSI: staged already with another target or capability is ALREADY_EXISTS; the record of
    // what was staged stays as it is, or its unstage would undo the wrong thing.
    if (Status s = SameStage(*old.value(), rec); !s.ok()) return s;
  }
  if (old.value() && !old.value()->device.empty()) {
    rec.device = old.value()->device;
    rec.multipath_map = old.value()->multipath_map;
  }
  if (old.value()) {
    // Staged before: its sessions are at the addresses the names had then.
    rec.addresses = old.value()->addresses;
  } else {
    auto addresses = ResolvePortals(target.portals);
    if (!addresses.ok()) return addresses.status();
    rec.addresses = std::move(addresses.value());
  }
  {
    // Who owns each session is decided and written down under the target's lock, so an
    // unstage of another volume on the target cannot log out of one this stage counts on.
    TargetLock lock(*this, target.iqn);
    auto sessions = host_->SessionPortals(target.iqn);
    if (!sessions.ok()) return sessions.status();
    std::optional<std::vector<VolumeRecord>> others;
    std::vector<std::string> login;
    for (const auto& address : rec.addresses) {
      const bool has_session = sessions->contains(address);
      // A stage again keeps what it owned.
      const bool again = old.value() && Contains(old.value()->addresses, address);
      bool made = again && Contains(old.value()->made_node_records, address);
      bool logged_in = again && Contains(old.value()->logged_in, address);
      if (!has_session) {
        // Ours to make: the session, and the node record unless one is there.
        logged_in = true;
        if (!made) {
          auto exists = host_->NodeRecordExists(target.iqn, address);
          if (!exists.ok()) return exists.status();
          made = !exists.value();
        }
        login.push_back(address);
      } else if (!again) {
        // Someone's session, used as it is: ours only if this plugin made it for another
        // volume on the target (then it ends with the last volume that uses it).
        if (!others) {
          auto all = records_.LoadAll();
          if (!all.ok()) return all.status();
          others = std::move(all.value());
        }
        for (const auto& o : *others) {
          if (o.volume_id == rec.volume_id || o.target_iqn != rec.target_iqn) continue;
          made = made || Contains(o.made_node_records, address);
          logged_in = logged_in || Contains(o.logged_in, address);
        }
      }
      if (made) rec.made_node_records.push_back(address);
      if (logged_in) rec.logged_in.push_back(address);
    }
    // Before the first login: a stage that fails half way can still be unstaged.
    if (Status s = records_.Save(rec); !s.ok()) return s;
    for (const auto& address : login) {
      const bool ours = Contains(rec.made_node_records, address);
      if (Status s = host_->Login(target.iqn, address, target.chap, ours); !s.ok()) return s;
    }
  }
  const auto deadline = Clock::now() + options_.attach_timeout;
  std::vector<std::string> paths;
  for (const auto& address : rec.addresses) {
    auto dev = host_->WaitFor(ByPath(address, target.iqn, target.lun), deadline);
    if (!dev.ok()) return dev.status();
    paths.push_back(dev.value());
  }
  if (paths.size() > 1) {
    auto map = host_->WaitForMap(paths, deadline);
    if (!map.ok()) return map.status();
    const std::string dev = "/dev/mapper/" + map.value();
    if (auto r = host_->WaitFor(dev, deadline); !r.ok()) return r.status();
    rec.device = dev;
    rec.multipath_map = map.value();
  } else {
    rec.device = paths.front();
    rec.multipath_map.clear();
  }
  if (Status s = records_.Save(rec); !s.ok()) return s;
  if (rec.block) return Status::Ok();

  const std::string& staging = rec.staging_path;
  auto mounted = host_->MountedAt(staging);
  if (!mounted.ok()) return mounted.status();
  if (mounted.value()) {
    const auto& m = *mounted.value();
    // Mounted by an earlier try, which may have stopped before the file system was grown.
    if (m.source == rec.device && m.read_only == rec.read_only) return GrowToDevice(rec);
    return AlreadyExists("staging_target_path " + staging + " has " + m.Describe() +
                         " mounted, not this volume's " + rec.device +
                         (rec.read_only ? " (ro)" : " (rw)"));
  }
  auto fs = host_->FileSystemOn(rec.device);
  if (!fs.ok()) return fs.status();
  if (fs->empty() && ReadOnly(cap)) {
    // A read-only volume is one to read what is on it: a blank one is a mistake (the wrong
    // volume, a copy not made yet), not a request for a file system nobody may write to.
    return FailedPrecondition("volume " + rec.volume_id + ": " + rec.device +
                              " holds no file system and the volume's access mode " +
                              VolumeCapability::AccessMode::Mode_Name(cap.access_mode().mode()) +
                              " is read-only; not formatting it");
  }
  if (fs->empty()) {
    // mkfs destroys whatever a probe missed, so it runs only on two probes that agree, the
    // second right before it (a device just logged in to may answer its first reads late).
    fs = host_->FileSystemOn(rec.device);
    if (!fs.ok()) return fs.status();
  }
  const bool blank = fs->empty();
  if (blank) {
    log::Ctl().info("volume {}: {} is blank: mkfs.{}", rec.volume_id, rec.device, rec.fs_type);
    std::vector<std::string> mkfs = {"mkfs." + rec.fs_type};
    if (rec.fs_type == "ext4") mkfs.insert(mkfs.end(), {"-F", "-q"});
    if (rec.fs_type == "xfs") mkfs.push_back("-q");
    mkfs.push_back(rec.device);
    if (auto r = host_->Check(mkfs, {0}, kLongTimeout); !r.ok()) return r.status();
  } else if (fs.value() != rec.fs_type) {
    return FailedPrecondition(rec.device + " holds " + fs.value() + ", not the " + rec.fs_type +
                              " the volume capability asks for");
  }
  if (auto r = host_->Check({"mkdir", "-p", "--", staging}); !r.ok()) return r.status();
  std::vector<std::string> opts = rec.mount_flags;
  if (rec.read_only) opts.push_back("ro");
  // A clone staged on the node of its source has the source's UUID, and xfs refuses a second
  // mount of a UUID it knows unless told not to check.
  if (rec.fs_type == "xfs" && !Contains(opts, "nouuid")) opts.push_back("nouuid");
  std::vector<std::string> mount = {"mount", "-t", rec.fs_type};
  if (!opts.empty()) mount.insert(mount.end(), {"-o", Join(opts, ",")});
  mount.insert(mount.end(), {rec.device, staging});
  if (auto r = host_->Check(mount); !r.ok()) return r.status();
  // mkfs made it as large as the device.
  return blank ? Status::Ok() : GrowToDevice(rec);
}

Status NodeService::GrowToDevice(const VolumeRecord& rec) {
  // A volume restored from a snapshot or cloned into a larger size holds the source's file
  // system; the workload must see the size it asked for (CSI CreateVolume), and kubelet calls
  // no NodeExpandVolume for it. A read-only mount cannot be grown: it stays as it is.
  if (rec.read_only) return Status::Ok();
  auto device = host_->SizeOf(rec.device);
  if (!device.ok()) return device.status();
  auto fs = host_->SizeOfFileSystem(rec.fs_type, rec.device, rec.staging_path);
  if (!fs.ok()) return fs.status();
  // Less than a block to spare is all a file system of whole blocks can fill.
  if (device.value() - fs->bytes < fs->block) return Status::Ok();
  log::Ctl().info("volume {}: the {} file system is {} bytes on a device of {}: growing it",
                  rec.volume_id, rec.fs_type, fs->bytes, device.value());
  return host_->GrowFileSystem(rec.fs_type, rec.device, rec.staging_path);
}

grpc::ServerUnaryReactor* NodeService::NodeUnstageVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeUnstageVolumeRequest* req,
    ::csi::v1::NodeUnstageVolumeResponse*) {
  Status checked = req->volume_id().empty()
                       ? InvalidArgument("volume_id is required")
                       : CheckPath("staging_target_path", req->staging_target_path());
  return Serve(ctx, "NodeUnstageVolume", req->volume_id(), checked,
               [this, req]() -> Result<std::string> {
                 if (Status s = Unstage(*req); !s.ok()) return s;
                 return std::string("done");
               });
}

Status NodeService::Unstage(const ::csi::v1::NodeUnstageVolumeRequest& req) {
  auto mounted = host_->MountedAt(req.staging_target_path());
  if (!mounted.ok()) return mounted.status();
  if (mounted.value()) {
    if (auto r = host_->Check({"umount", "--", req.staging_target_path()}); !r.ok()) {
      return r.status();
    }
  }
  auto rec = records_.Load(req.volume_id());
  if (!rec.ok()) return rec.status();
  if (!rec.value()) {
    // Nothing staged here, or already unstaged: no target to log out of.
    return Status::Ok();
  }
  const VolumeRecord& r = *rec.value();
  if (!r.multipath_map.empty()) {
    auto exists = host_->Run({"readlink", "-e", "/dev/mapper/" + r.multipath_map});
    if (!exists.ok()) return exists.status();
    if (exists->ok()) {
      if (auto f = host_->Check({"multipath", "-f", r.multipath_map}); !f.ok()) return f.status();
    }
  }
  TargetLock lock(*this, r.target_iqn);
  auto all = records_.LoadAll();
  if (!all.ok()) return all.status();
  for (const auto& address : r.addresses) {
    // Only what this plugin made, and not while another volume on the target still uses it.
    const VolumeRecord* user = nullptr;
    for (const auto& o : all.value()) {
      if (o.volume_id != r.volume_id && o.target_iqn == r.target_iqn &&
          Contains(o.addresses, address)) {
        user = &o;
      }
    }
    if (user != nullptr) {
      log::Ctl().info("volume {}: session {} {} kept: volume {} uses it too", r.volume_id,
                      r.target_iqn, address, user->volume_id);
      continue;
    }
    if (Contains(r.logged_in, address)) {
      if (Status s = host_->Logout(r.target_iqn, address); !s.ok()) return s;
    }
    if (Contains(r.made_node_records, address)) {
      if (Status s = host_->DeleteNodeRecord(r.target_iqn, address); !s.ok()) return s;
    }
  }
  return records_.Remove(req.volume_id());
}

// ---- NodePublishVolume / NodeUnpublishVolume ----

grpc::ServerUnaryReactor* NodeService::NodePublishVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodePublishVolumeRequest* req,
    ::csi::v1::NodePublishVolumeResponse*) {
  Status checked;
  if (req->volume_id().empty()) {
    checked = InvalidArgument("volume_id is required");
  } else if (req->staging_target_path().empty()) {
    checked = InvalidArgument("staging_target_path is required (the plugin stages volumes)");
  } else if (checked = CheckPath("staging_target_path", req->staging_target_path()); checked.ok()) {
    checked = CheckPath("target_path", req->target_path());
  }
  if (checked.ok()) {
    checked = CheckCapability(req->volume_capability(), req->has_volume_capability());
  }
  return Serve(ctx, "NodePublishVolume", req->volume_id(), checked,
               [this, req]() -> Result<std::string> {
                 if (Status s = Publish(*req); !s.ok()) return s;
                 return "at " + req->target_path() + (req->readonly() ? " (ro)" : "");
               });
}

Status NodeService::Publish(const ::csi::v1::NodePublishVolumeRequest& req) {
  const std::string& target = req.target_path();
  auto mounted = host_->MountedAt(target);
  if (!mounted.ok()) return mounted.status();
  const bool ro = req.readonly() || ReadOnly(req.volume_capability());
  const std::string want = std::string(ro ? " (ro)" : " (rw)");
  std::vector<std::string> mount = {"mount", "--bind"};
  if (ro) mount.insert(mount.end(), {"-o", "ro"});
  if (req.volume_capability().has_block()) {
    auto rec = records_.Load(req.volume_id());
    if (!rec.ok()) return rec.status();
    if (!rec.value() || rec.value()->device.empty()) {
      return FailedPrecondition("volume " + req.volume_id() +
                                " is not staged on this node (NodeStageVolume first)");
    }
    const std::string& device = rec.value()->device;
    if (mounted.value()) {
      // Published before, or something else is there: a device node bound onto the file
      // shows in findmnt as devtmpfs[/sdX], so the device numbers tell which.
      auto same = host_->SameDevice(device, target);
      if (!same.ok()) return same.status();
      if (same.value() && mounted.value()->read_only == ro) return Status::Ok();
      return AlreadyExists("target_path " + target + " has " + mounted.value()->Describe() +
                           " mounted, not volume " + req.volume_id() + "'s " + device + want);
    }
    if (auto r = host_->Check({"mkdir", "-p", "--", Dirname(target)}); !r.ok()) return r.status();
    if (auto r = host_->Check({"touch", "--", target}); !r.ok()) return r.status();
    mount.insert(mount.end(), {rec.value()->device, target});
    return host_->Check(mount).status();
  }
  auto staged = host_->MountedAt(req.staging_target_path());
  if (!staged.ok()) return staged.status();
  if (!staged.value()) {
    return FailedPrecondition("volume " + req.volume_id() + ": nothing is mounted at " +
                              req.staging_target_path() + " (NodeStageVolume first)");
  }
  if (mounted.value()) {
    // A bind of the staging mount shows the same source; a bind of another file system, or of
    // a directory inside this one (source[/dir]), does not.
    if (mounted.value()->source == staged.value()->source && mounted.value()->read_only == ro) {
      return Status::Ok();
    }
    return AlreadyExists("target_path " + target + " has " + mounted.value()->Describe() +
                         " mounted, not volume " + req.volume_id() + "'s staging mount of " +
                         staged.value()->source + want);
  }
  if (auto r = host_->Check({"mkdir", "-p", "--", target}); !r.ok()) return r.status();
  mount.insert(mount.end(), {req.staging_target_path(), target});
  return host_->Check(mount).status();
}

grpc::ServerUnaryReactor* NodeService::NodeUnpublishVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeUnpublishVolumeRequest* req,
    ::csi::v1::NodeUnpublishVolumeResponse*) {
  Status checked = req->volume_id().empty() ? InvalidArgument("volume_id is required")
                                            : CheckPath("target_path", req->target_path());
  return Serve(ctx, "NodeUnpublishVolume", req->volume_id(), checked,
               [this, req]() -> Result<std::string> {
                 if (Status s = Unpublish(*req); !s.ok()) return s;
                 return req->target_path() + " removed";
               });
}

Status NodeService::Unpublish(const ::csi::v1::NodeUnpublishVolumeRequest& req) {
  auto mounted = host_->MountedAt(req.target_path());
  if (!mounted.ok()) return mounted.status();
  if (mounted.value()) {
    if (auto r = host_->Check({"umount", "--", req.target_path()}); !r.ok()) return r.status();
  }
  // An empty directory (mount) or the file a block device was bound onto; anything with content
  // is not ours to delete, and rm -d refuses it.
  return host_->Check({"rm", "-df", "--", req.target_path()}).status();
}

// ---- NodeExpandVolume / NodeGetVolumeStats ----

grpc::ServerUnaryReactor* NodeService::NodeExpandVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeExpandVolumeRequest* req,
    ::csi::v1::NodeExpandVolumeResponse* resp) {
  Status checked = req->volume_id().empty() ? InvalidArgument("volume_id is required")
                                            : CheckPath("volume_path", req->volume_path());
  return Serve(ctx, "NodeExpandVolume", req->volume_id(), checked,
               [this, req, resp]() -> Result<std::string> {
                 auto size = Expand(*req);
                 if (!size.ok()) return size.status();
                 resp->set_capacity_bytes(size.value());
                 return std::to_string(size.value()) + " bytes";
               });
}

Result<int64_t> NodeService::Expand(const ::csi::v1::NodeExpandVolumeRequest& req) {
  auto loaded = records_.Load(req.volume_id());
  if (!loaded.ok()) return loaded.status();
  if (!loaded.value() || loaded.value()->device.empty()) {
    return NotFound("volume " + req.volume_id() + " is not staged on this node");
  }
  const VolumeRecord& rec = *loaded.value();
  for (const auto& address : rec.addresses) {
    if (auto r =
            host_->Check({"iscsiadm", "-m", "node", "-T", rec.target_iqn, "-p", address, "-R"});
        !r.ok()) {
      return r.status();
    }
  }
  if (!rec.multipath_map.empty()) {
    if (auto r = host_->Check({"multipathd", "resize", "map", rec.multipath_map}); !r.ok()) {
      return r.status();
    }
  }
  // The rescan is done when iscsiadm returns; the size is polled for only in case a path's
  // capacity change reaches the map a moment later.
  const int64_t want = req.capacity_range().required_bytes();
  const auto deadline = Clock::now() + options_.attach_timeout;
  int64_t size = 0;
  for (;;) {
    auto got = host_->SizeOf(rec.device);
    if (!got.ok()) return got.status();
    size = got.value();
    if (size >= want) break;
    if (Clock::now() >= deadline) {
      return Internal("volume " + req.volume_id() + ": " + rec.device + " is " +
                      std::to_string(size) + " bytes after the rescan, not the " +
                      std::to_string(want) + " asked for");
    }
    std::this_thread::sleep_for(options_.poll_interval);
  }
  const bool block = req.has_volume_capability() ? req.volume_capability().has_block() : rec.block;
  if (block) return size;
  // xfs grows through a mount point; the published path is one.
  if (Status s = host_->GrowFileSystem(rec.fs_type, rec.device, req.volume_path()); !s.ok()) {
    return s;
  }
  return size;
}

// One NodeGetVolumeStats call, shared by its probe thread and its alarm: the first of the two
// answers it, and the other then leaves reactor and resp alone (both die with the call).
struct NodeService::StatsCall {
  StatsCall(grpc::ServerUnaryReactor* r, ::csi::v1::NodeGetVolumeStatsResponse* out)
      : reactor(r), resp(out) {}

  void Answer(const grpc::Status& status, const ::csi::v1::NodeGetVolumeStatsResponse* with) {
    std::lock_guard lock(mu);
    if (answered) return;
    answered = true;
    if (with != nullptr) *resp = *with;
    reactor->Finish(status);
  }

  std::mutex mu;
  bool answered = false;  // protected by mu
  grpc::ServerUnaryReactor* const reactor;
  ::csi::v1::NodeGetVolumeStatsResponse* const resp;
  grpc::Alarm alarm;
};

grpc::ServerUnaryReactor* NodeService::NodeGetVolumeStats(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeGetVolumeStatsRequest* req,
    ::csi::v1::NodeGetVolumeStatsResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  Status bad = req->volume_id().empty() ? InvalidArgument("volume_id is required")
                                        : CheckPath("volume_path", req->volume_path());
  if (!bad.ok()) {
    reactor->Finish(rpc::ToGrpcStatus(bad));
    return reactor;
  }
  if (stats_probes_->fetch_add(1) >= options_.max_stats_probes) {
    stats_probes_->fetch_sub(1);
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 std::to_string(options_.max_stats_probes) +
                                     " volume stats calls have not returned (hung mounts?)"));
    return reactor;
  }
  auto call = std::make_shared<StatsCall>(reactor, resp);
  const std::string path = req->volume_path();
  const auto deadline =
      std::min(ctx->deadline(), std::chrono::system_clock::now() + options_.stats_timeout);
  call->alarm.Set(deadline, [weak = std::weak_ptr<StatsCall>(call), path,
                             volume = req->volume_id()](bool fired) {
    auto c = weak.lock();
    if (!fired || !c) return;
    log::Ctl().warn("NodeGetVolumeStats {}: {} did not answer in time", volume, path);
    c->Answer(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                           "statvfs of " + path + " did not return in time (a hung mount?)"),
              nullptr);
  });
  auto probe = [call, path, stat = stat_volume_, probes = stats_probes_] {
    auto got = stat(path);
    // The probe has returned: its slot is free before the caller hears of it, so that a next
    // call never finds it still counted among the hung ones.
    probes->fetch_sub(1);
    if (!got.ok()) {
      call->Answer(rpc::ToGrpcStatus(got.status()), nullptr);
    } else {
      ::csi::v1::NodeGetVolumeStatsResponse out;
      const VolumeStats& v = got.value();
      auto* bytes = out.add_usage();
      bytes->set_unit(VolumeUsage::BYTES);
      bytes->set_total(v.bytes_total);
      if (!v.block) {
        bytes->set_available(v.bytes_available);
        bytes->set_used(v.bytes_used);
        auto* inodes = out.add_usage();
        inodes->set_unit(VolumeUsage::INODES);
        inodes->set_total(v.inodes_total);
        inodes->set_available(v.inodes_available);
        inodes->set_used(v.inodes_used);
      }
      call->Answer(grpc::Status::OK, &out);
    }
  };
  try {
    std::thread(std::move(probe)).detach();
  } catch (const std::system_error& e) {
    stats_probes_->fetch_sub(1);
    call->Answer(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              std::string("no thread for a stats call: ") + e.what()),
                 nullptr);
  }
  return reactor;
}

Result<std::string> ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    const std::string why = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    return Status(StatusCode::kUnavailable, "portal host " + host + " does not resolve: " + why);
  }
  char text[NI_MAXHOST];
  const int ni = ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0,
                               NI_NUMERICHOST);
  ::freeaddrinfo(found);
  if (ni != 0) return Internal("portal host " + host + ": " + ::gai_strerror(ni));
  return std::string(text);
}

Result<VolumeStats> StatVolumePath(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotFound("volume_path " + path + " does not exist");
    return Internal("stat " + path + ": " + std::strerror(err));
  }
  VolumeStats v;
  if (S_ISBLK(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Internal("open " + path + ": " + std::strerror(errno));
    uint64_t bytes = 0;
    const int rc = ::ioctl(fd, BLKGETSIZE64, &bytes);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return Internal("BLKGETSIZE64 " + path + ": " + std::strerror(err));
    v.block = true;
    v.bytes_total = static_cast<int64_t>(bytes);
    return v;
  }
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0) {
    return Internal("statvfs " + path + ": " + std::strerror(errno));
  }
  v.bytes_total = static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize);
  v.bytes_available = static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize);
  v.bytes_used = static_cast<int64_t>((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize);
  v.inodes_total = static_cast<int64_t>(vfs.f_files);
  v.inodes_available = static_cast<int64_t>(vfs.f_favail);
  v.inodes_used = static_cast<int64_t>(vfs.f_files - vfs.f_ffree);
  return v;
}

// ---- NodeGetCapabilities / NodeGetInfo ----

grpc::ServerUnaryReactor* NodeService::NodeGetCapabilities(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeGetCapabilitiesRequest*,
    ::csi::v1::NodeGetCapabilitiesResponse* resp) {
  for (auto type :
       {NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME, NodeServiceCapability::RPC::EXPAND_VOLUME,
        NodeServiceCapability::RPC::GET_VOLUME_STATS}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* NodeService::NodeGetInfo(grpc::CallbackServerContext* ctx,
                                                   const ::csi::v1::NodeGetInfoRequest*,
                                                   ::csi::v1::NodeGetInfoResponse* resp) {
  auto with_addresses = [this](std::string name) {
    return NodeIdentity{std::move(name), options_.node_addresses}.ToString();
  };
  if (!options_.node_id.empty()) {
    auto* reactor = ctx->DefaultReactor();
    resp->set_node_id(with_addresses(options_.node_id));
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  return Serve(ctx, "NodeGetInfo", "", Status::Ok(),
               [this, resp, with_addresses]() -> Result<std::string> {
                 auto id = NodeId();
                 if (!id.ok()) return id.status();
                 resp->set_node_id(with_addresses(id.value()));
                 return "node id " + resp->node_id();
               });
}

Result<std::string> NodeService::NodeId() {
  constexpr char kFile[] = "/etc/iscsi/initiatorname.iscsi";
  auto r = host_->Check({"cat", kFile});
  if (!r.ok()) return r.status();
  for (const auto& line : Split(r->stdout_data, '\n')) {
    if (line.starts_with("InitiatorName=")) {
      std::string name = Trim(line.substr(14));
      // '@' starts the addresses of a node id (NodeIdentity); no iSCSI name holds one.
      if (name.find('@') != std::string::npos) {
        return FailedPrecondition(std::string(kFile) + " names '" + name +
                                  "', which is no iSCSI name (it holds '@')");
      }
      if (!name.empty()) return name;
    }
  }
  return FailedPrecondition(std::string(kFile) +
                            " on the host names no InitiatorName (is open-iscsi installed?)");
}

}  // namespace iscsigw::csi
