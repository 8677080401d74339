#include "csi/node_host.h"

#include <cctype>
#include <cstdint>
#include <exception>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "csi/strings.h"

namespace iscsigw::csi {

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

std::string ByPath(const std::string& address, const std::string& iqn, int lun) {
  std::string addr = address;
  if (addr.starts_with('[')) {
    const auto close = addr.find(']');
    addr = addr.substr(1, close - 1) + addr.substr(close + 1);
  }
  return "/dev/disk/by-path/ip-" + addr + "-iscsi-" + iqn + "-lun-" + std::to_string(lun);
}

Result<ExecResult> NodeService::Host::Run(const std::vector<std::string>& argv,
                                          std::chrono::milliseconds timeout) {
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

Result<ExecResult> NodeService::Host::Check(const std::vector<std::string>& argv,
                                            std::set<int> ok_codes,
                                            std::chrono::milliseconds timeout) {
  auto r = Run(argv, timeout);
  if (!r.ok()) return r.status();
  if (r->timed_out || !ok_codes.contains(r->exit_code)) {
    return Internal(RedactedCommandLine(argv) + ": " + r->Describe());
  }
  return r;
}

namespace {

// The portals (HOST:PORT, the ",TPGT" cut) of the lines of an iscsiadm listing whose target is
// `iqn`: the portal is word `skip` of the line (counted from 0), the target the word after it.
std::set<std::string> ListedPortals(const std::string& listing, const std::string& iqn, int skip) {
  std::set<std::string> portals;
  std::istringstream lines(listing);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string word, portal, target;
    int i = 0;
    while (i < skip && words >> word) ++i;
    if (i < skip || !(words >> portal >> target) || target != iqn) continue;
    portals.insert(portal.substr(0, portal.find(',')));
  }
  return portals;
}

}  // namespace

Result<std::set<std::string>> NodeService::Host::SessionPortals(const std::string& iqn) {
  auto r = Check({"iscsiadm", "-m", "session"}, {0, kIscsiErrNoObjsFound});
  if (!r.ok()) return r.status();
  // "tcp: [1] 10.0.2.2:3260,1 iqn.2026-11.io.iscsigw:pvc-1 (non-flash)"
  return ListedPortals(r->exit_code == 0 ? r->stdout_data : "", iqn, 2);
}

Result<bool> NodeService::Host::NodeRecordExists(const std::string& iqn,
                                                 const std::string& portal) {
  auto r = Check({"iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "show"},
                 {0, kIscsiErrNoObjsFound});
  if (!r.ok()) return r.status();
  return r->exit_code == 0;
}

Result<std::set<std::string>> NodeService::Host::NodeRecordPortals(const std::string& iqn) {
  auto r = Check({"iscsiadm", "-m", "node"}, {0, kIscsiErrNoObjsFound});
  if (!r.ok()) return r.status();
  // "10.0.2.2:3260,1 iqn.2026-11.io.iscsigw:pvc-1", "[fd00::2]:3260,1 iqn...": one per record
  // (and per interface: the same line again).
  return ListedPortals(r->exit_code == 0 ? r->stdout_data : "", iqn, 0);
}

Status NodeService::Host::Login(const std::string& iqn, const std::string& portal,
                                const ChapSecrets& chap, bool new_record) {
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

Status NodeService::Host::Logout(const std::string& iqn, const std::string& portal) {
  return Check({"iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "--logout"},
               {0, kIscsiErrNoObjsFound}, kLoginTimeout)
      .status();
}

Status NodeService::Host::DeleteNodeRecord(const std::string& iqn, const std::string& portal) {
  return Check({"iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "delete"},
               {0, kIscsiErrNoObjsFound})
      .status();
}

Result<std::string> NodeService::Host::WaitFor(const std::string& path,
                                               Clock::time_point deadline) {
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

Result<std::string> NodeService::Host::WaitForMap(const std::vector<std::string>& paths,
                                                  Clock::time_point deadline) {
  for (;;) {
    auto map = MapOver(paths.front());
    if (!map.ok()) return map.status();
    if (!map->empty()) return map.value();
    if (Clock::now() >= deadline) {
      return Internal("no multipath map over " + Join(paths, ", ") + " within " +
                      std::to_string(options_.attach_timeout.count() / 1000) +
                      " s (is multipathd running on the node?)");
    }
    std::this_thread::sleep_for(options_.poll_interval);
  }
}

Result<std::string> NodeService::Host::MapOver(const std::string& device) {
  const std::string sd = device.substr(device.rfind('/') + 1);
  auto r = Run({"ls", "/sys/block/" + sd + "/holders"});
  if (!r.ok()) return r.status();
  for (const auto& holder : Split(r->ok() ? r->stdout_data : "", '\n')) {
    if (!holder.starts_with("dm-")) continue;
    auto name = Run({"cat", "/sys/block/" + holder + "/dm/name"});
    if (!name.ok()) return name.status();
    if (name->ok() && !Trim(name->stdout_data).empty()) return Trim(name->stdout_data);
  }
  return std::string();
}

Result<std::optional<NodeService::Host::Mount>> NodeService::Host::MountedAt(
    const std::string& path) {
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

Result<bool> NodeService::Host::SameDevice(const std::string& a, const std::string& b) {
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

Result<std::string> NodeService::Host::FileSystemOn(const std::string& device) {
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

Result<NodeService::Host::FileSystemSize> NodeService::Host::SizeOfFileSystem(
    const std::string& fs_type, const std::string& device, const std::string& mount) {
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

Status NodeService::Host::GrowFileSystem(const std::string& fs_type, const std::string& device,
                                         const std::string& mount) {
  const std::vector<std::string> argv = fs_type == "xfs"
                                            ? std::vector<std::string>{"xfs_growfs", "-d", mount}
                                            : std::vector<std::string>{"resize2fs", device};
  return Check(argv, {0}, kLongTimeout).status();
}

Result<int64_t> NodeService::Host::SizeOf(const std::string& device) {
  auto r = Check({"blockdev", "--getsize64", device});
  if (!r.ok()) return r.status();
  try {
    return static_cast<int64_t>(std::stoll(Trim(r->stdout_data)));
  } catch (const std::exception&) {
    return Internal("blockdev --getsize64 " + device + ": unexpected output");
  }
}

}  // namespace iscsigw::csi
