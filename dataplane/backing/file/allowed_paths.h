// AllowedPaths: where file LUNs may live, and the only way the gateway opens, creates or removes
// a LUN's file (docs/security.md, "Backing paths").
//
// The operator names the roots at start: --lun-dir and every --backing-allow. A root is either
//   - a directory: any file or block device node beneath it, reached without a symbolic link and
//     without "..", is allowed; or
//   - a block device: exactly that device (by its device number, so /dev/disk/by-id/... names
//     work), nothing else.
// The roots themselves are resolved once, at start (realpath), so an operator may name them
// through symbolic links. A path an API call names is never resolved through one: a directory
// root is held open and the path below it is opened with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), so neither "..", a symbolic link planted in the directory nor a rename
// racing the open can reach a file outside it. Where the kernel has no openat2 (before 5.6, or a
// seccomp profile refuses it), the same walk is made one component at a time with
// openat(O_NOFOLLOW). A device root's path is opened and the descriptor checked to be that very
// device.
// Every refusal is PERMISSION_DENIED and names the flags. Calls block (file system calls): the
// control plane's worker thread and a store's Open call them, never a reactor.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace iscsigw::backing {

class AllowedPaths {
 public:
  // `roots`: absolute paths of existing directories or block devices. Errors name the root.
  // `walk_only` (tests): take the openat(O_NOFOLLOW) walk even where openat2 exists.
  static Result<std::shared_ptr<const AllowedPaths>> Make(const std::vector<std::string>& roots,
                                                          bool walk_only = false);
  // No file LUN anywhere: what a gateway started without --lun-dir or --backing-allow allows.
  static std::shared_ptr<const AllowedPaths> None();

  // Whether `path` names a place the roots allow, read as text: absolute, no empty, "." or ".."
  // component, beneath a directory root or naming a device root. Ok does not mean the file
  // exists or that Open will succeed (a symbolic link is found only by opening).
  Status Check(std::string_view path) const;

  // open(2) of `path` with `flags` (O_CLOEXEC is added) and `mode` (for O_CREAT), confined as
  // above. A refused path is PERMISSION_DENIED; an error of the open itself is IO_ERROR naming
  // the path and the call (NOT_FOUND for a missing file).
  Result<UniqueFd> Open(const std::string& path, int flags, mode_t mode = 0) const;

  // Removes a file beneath a directory root (unlinkat in its confined parent). Missing: Ok.
  Status Unlink(const std::string& path) const;

  // The roots as resolved at start, for messages and for GetGatewayInfo.
  std::vector<std::string> roots() const;
  bool empty() const { return dirs_.empty() && devices_.empty(); }

  struct Dir {
    std::string path;  // resolved, no trailing slash ("/" for the root directory)
    UniqueFd fd;       // O_PATH | O_DIRECTORY
  };
  struct Device {
    std::string given;     // as the operator named it
    std::string resolved;  // realpath of it
    dev_t rdev = 0;
  };

 private:
  AllowedPaths() = default;
  // The directory root `path` is beneath (nullptr: none) and the rest of the path below it.
  const Dir* DirFor(std::string_view path, std::string_view* rest) const;
  const Device* DeviceFor(std::string_view path) const;
  Result<UniqueFd> OpenBeneath(const Dir& dir, std::string_view rest, const std::string& path,
                               int flags, mode_t mode) const;

  std::vector<Dir> dirs_;
  std::vector<Device> devices_;
  bool walk_only_ = false;
};

// The message every refusal ends with: which flags would allow the path.
inline constexpr std::string_view kAllowedPathsHint =
    "file LUNs may use only --lun-dir and the paths named by --backing-allow";

}  // namespace iscsigw::backing
