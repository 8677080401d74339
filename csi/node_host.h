// The host commands the node service's RPCs are made of (csi/node_service.h): open-iscsi's
// iscsiadm, readlink and /sys for devices and multipath maps, findmnt, stat, blkid, dumpe2fs,
// xfs_info, resize2fs, xfs_growfs, blockdev. Every one goes through HostExec (csi/host_exec.h), is
// logged at debug with its secrets redacted (RedactedCommandLine), and fails with a message naming
// the (redacted) command and what it printed on stderr. Called from the node service's workers;
// it keeps no state of its own, so any number of them may call it at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "csi/host_exec.h"
#include "csi/node_service.h"
#include "csi/volume_model.h"

namespace iscsigw::csi {

using Clock = std::chrono::steady_clock;

// open-iscsi's exit codes (include/iscsi_err.h) that mean "already so".
inline constexpr int kIscsiErrSessExists = 15;   // login: the session is already logged in
inline constexpr int kIscsiErrNoObjsFound = 21;  // logout, delete, session list: nothing there

inline constexpr std::chrono::milliseconds kLoginTimeout{150'000};
// mkfs, resize2fs on a big volume.
inline constexpr std::chrono::milliseconds kLongTimeout{600'000};

// The by-path link of a LUN behind `address` (IP:PORT or [IPv6]:PORT). udev's path_id names it
// after the session's persistent_address, which is the address as iscsiadm was given it, without
// brackets: ip-10.0.2.2:3260-iscsi-IQN-lun-0, ip-fd00::2:3260-iscsi-IQN-lun-0.
std::string ByPath(const std::string& address, const std::string& iqn, int lun);

class NodeService::Host {
 public:
  Host(HostExec& exec, const NodeOptions& options) : exec_(exec), options_(options) {}

  Result<ExecResult> Run(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(30'000));
  // Runs argv; an exit code outside `ok_codes` is an INTERNAL error naming the command.
  Result<ExecResult> Check(const std::vector<std::string>& argv, std::set<int> ok_codes = {0},
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(30'000));

  // ---- open-iscsi

  // The portals (HOST:PORT) with a session logged in to `iqn`.
  Result<std::set<std::string>> SessionPortals(const std::string& iqn);
  // Whether open-iscsi has a node record for `iqn` at `portal`.
  Result<bool> NodeRecordExists(const std::string& iqn, const std::string& portal);
  // The portals (HOST:PORT) open-iscsi keeps a node record of `iqn` at (`iscsiadm -m node`).
  Result<std::set<std::string>> NodeRecordPortals(const std::string& iqn);
  // new_record: make the node record (`-o new`, startup manual); else it is someone else's and
  // only gets the volume's CHAP settings, which the login needs.
  Status Login(const std::string& iqn, const std::string& portal, const ChapSecrets& chap,
               bool new_record);
  Status Logout(const std::string& iqn, const std::string& portal);
  Status DeleteNodeRecord(const std::string& iqn, const std::string& portal);

  // ---- devices

  // What `path` resolves to once it exists (readlink -e), polled until the deadline.
  Result<std::string> WaitFor(const std::string& path, Clock::time_point deadline);
  // The dm-multipath map multipathd made over `paths` (/dev/sdX): its name, polled for.
  Result<std::string> WaitForMap(const std::vector<std::string>& paths, Clock::time_point deadline);
  // The dm-multipath map over `device` (/dev/sdX), looked at once: its name, or "" when
  // nothing holds the device.
  Result<std::string> MapOver(const std::string& device);
  // Whether `a` and `b` are (or lead to) the same device node: their major:minor.
  Result<bool> SameDevice(const std::string& a, const std::string& b);
  Result<int64_t> SizeOf(const std::string& device);

  // ---- mounts and file systems

  struct Mount {
    std::string source;  // findmnt's SOURCE: /dev/sdb, or /dev/sdb[/dir] for a bind of a dir
    bool read_only = false;
    std::string Describe() const { return source + (read_only ? " (ro)" : " (rw)"); }
  };
  // What is mounted at `path` (the last mount, when several are stacked), or nullopt.
  // The path is the argument of --mountpoint, which findmnt never reads as an option; after
  // `--` it would be a positional one, matched against sources as well.
  Result<std::optional<Mount>> MountedAt(const std::string& path);

  // blkid -p: the file system on `device` ("" when it has none). A partition table or a
  // signature blkid cannot settle counts as "something": never formatted over.
  Result<std::string> FileSystemOn(const std::string& device);

  struct FileSystemSize {
    int64_t bytes = 0;
    int64_t block = 0;
  };
  // The size of the file system on `device`, mounted at `mount`, as its superblock says:
  // dumpe2fs -h (ext4: Block count, Block size), xfs_info (its data section: blocks, bsize).
  Result<FileSystemSize> SizeOfFileSystem(const std::string& fs_type, const std::string& device,
                                          const std::string& mount);
  // Grows the file system to its device: resize2fs on the device (ext4, online), xfs_growfs -d
  // on its mount point (xfs grows only mounted).
  Status GrowFileSystem(const std::string& fs_type, const std::string& device,
                        const std::string& mount);

 private:
  HostExec& exec_;
  const NodeOptions& options_;
};

}  // namespace iscsigw::csi
