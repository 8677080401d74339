// The file system of a volume staged with mount access (csi/node_service.h): made only on a
// blank device, mounted at the staging path, grown to its device.
#include <string>
#include <vector>

#include "base/log.h"
#include "csi/node_checks.h"
#include "csi/node_host.h"
#include "csi/node_service.h"
#include "csi/strings.h"

namespace iscsigw::csi {

using ::csi::v1::VolumeCapability;

Status NodeService::MountStaged(const VolumeRecord& rec, const VolumeCapability& cap) {
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

}  // namespace iscsigw::csi
