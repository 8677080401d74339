// Files behind file LUNs, as the control plane manages them: the LUN directory (--lun-dir) that
// holds LUN files named by a relative path and snapshots, copies for snapshots and clones, and
// removal of a backing file when its LUN goes.
//
// Every function is a blocking system-call sequence: call them from the control plane's worker
// thread, never from a reactor. Errors are Status values whose message names the path and the
// system call; nothing throws.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "dataplane/api/dataplane.h"

namespace iscsigw::state {

// A relative LUN file path resolved against the LUN directory. The path must be a plain relative
// name of 1..255 bytes per component without "." or ".." components, outside the snapshot
// directory (its first component is not "snapshots"); `dir` empty refuses it.
Result<std::string> ResolveLunPath(const std::string& dir, const std::string& path);

// Creates `dir` and `dir`/snapshots (mode 0750) when missing.
Status PrepareLunDir(const std::string& dir);
std::string SnapshotDir(const std::string& lun_dir);

struct DirCapacity {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;  // statvfs f_bavail
};
Result<DirCapacity> CapacityOf(const std::string& dir);

// Whether two files in `dir` can share blocks (FICLONE). Probes with two temporary files.
bool SharesBlocks(const std::string& dir);

struct CopyResult {
  bool shared_blocks = false;  // FICLONE; otherwise a sparse copy (holes stay holes)
  uint64_t size_bytes = 0;     // of the new file
};

// Both below open, create and remove files only through `allowed` (--lun-dir, --backing-allow):
// a path outside it, or reached through a symbolic link, is PERMISSION_DENIED.
//
// Makes `dst` (which must not exist; created 0600) a copy of `src`'s contents, then extends it
// to `size_bytes` when that is larger (0: the source's size). A copy that fails is removed. The
// new file is fdatasync'ed and its directory fsync'ed before this returns. A FICLONE is one point
// in time; writes that reach `src` while a sparse copy runs may or may not be in it, so with
// `clone_only` a file system that cannot share blocks is FAILED_PRECONDITION (`why_clone_only`
// ends the message) instead of a sparse copy.
Result<CopyResult> CopyLunFile(const api::AllowedPaths& allowed, const std::string& src,
                               const std::string& dst, uint64_t size_bytes, bool clone_only = false,
                               const std::string& why_clone_only = "");

// Removes a LUN's backing file: only a regular file, never a block device or anything else.
// A missing file is Ok (already gone). The directory is fsync'ed.
Status RemoveLunFile(const api::AllowedPaths& allowed, const std::string& path);

}  // namespace iscsigw::state
