// VolumeRecord: what NodeStageVolume did on this node for one volume (the target and portals it
// logged in to, the device it found, where it mounted it), kept as one JSON file per volume under
// the node plugin's state directory. NodeUnstageVolume, NodePublishVolume (raw block),
// NodeExpandVolume and a plugin that restarted read it back; NodeUnstageVolume removes it.
//
// Files are written whole (a temporary file made with mkstemp, fsync, rename, fsync of the
// directory), so a crash leaves the old record or the new one, never a torn one. The directory is
// ours alone (0700) and no record is read through a symlink: a record names what we log out of
// and unmount. They hold no secrets: CHAP credentials live only in open-iscsi's node records.
// A RecordStore is stateless beyond its directory; calls on different volumes may run in
// parallel, calls on one volume are serialised by the caller.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace iscsigw::csi {

struct VolumeRecord {
  std::string volume_id;
  std::string target_iqn;
  int lun = 0;
  std::vector<std::string> portals;  // HOST:PORT, as the volume context gave them
  // Each portal with its host resolved, in the same order: IP:PORT or [IPv6]:PORT, what iscsiadm
  // was given and what its session list shows. A record from before names were resolved: the
  // portals themselves.
  std::vector<std::string> addresses;
  // The addresses whose open-iscsi node record, and whose session, this plugin made (or shares
  // with another volume's record that made it). Only those are deleted and logged out of on
  // unstage: a session or node record that was there before is someone else's. A record from
  // before they were kept: every address, as the plugin that wrote it treated them.
  std::vector<std::string> made_node_records;
  std::vector<std::string> logged_in;
  std::string staging_path;
  bool block = false;   // raw block access: nothing is mounted at staging_path
  std::string fs_type;  // mount access: ext4 or xfs
  // The rest of the capability it was staged with, which a re-stage must ask for as well;
  // access_known is false for a record from before they were kept.
  bool access_known = true;
  bool read_only = false;  // a read-only access mode
  std::vector<std::string> mount_flags;
  std::string device;         // what is mounted or bound: /dev/sdX, or /dev/mapper/NAME
  std::string multipath_map;  // the dm-multipath map's name when there are several portals
};

class RecordStore {
 public:
  // `dir` is created (with parents) by the first Save, mode 0700.
  explicit RecordStore(std::string dir) : dir_(std::move(dir)) {}

  Status Save(const VolumeRecord& record) const;
  // nullopt when the volume has no record; an error when one exists and cannot be read.
  Result<std::optional<VolumeRecord>> Load(const std::string& volume_id) const;
  // Every volume's record (none when the directory does not exist yet); an error names the
  // first file that cannot be read.
  Result<std::vector<VolumeRecord>> LoadAll() const;
  // Missing is fine; a removal is made durable (fsync of the directory) before it returns.
  Status Remove(const std::string& volume_id) const;

  // The file of a volume: its id with every byte outside [A-Za-z0-9._-] written %XX, and a
  // leading '.' as %2E. When that name would be longer than a file name may be (255 bytes):
  // "+sha256-" and the id's SHA-256 in hex ('+' is escaped in every other name, so the two kinds
  // never meet; Load checks the id inside, so a collision is an error, not another's record).
  std::string PathOf(const std::string& volume_id) const;

 private:
  static Result<VolumeRecord> Parse(const std::string& path, const std::string& text);

  const std::string dir_;
};

}  // namespace iscsigw::csi
