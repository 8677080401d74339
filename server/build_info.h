// What the three binaries were built from, in one place (docs/contributing.md, "Releases"): the
// project version of CMakeLists.txt and the git commit of the tree at build time, "unknown" when
// the build could not tell (not a git checkout, and no ISCSIGW_COMMIT given). `--version`,
// iscsigw_build_info, GetGatewayInfo's version and the CSI plugin's vendor_version all read these,
// so they cannot disagree.
//
// BuildVersion and BuildCommit are defined in a file cmake/build_info.cmake writes at every build,
// so a new commit needs a rebuild but not a reconfigure. Pure; any thread.
#pragma once

#include <string>
#include <string_view>

namespace iscsigw::server {

std::string_view BuildVersion();  // "0.1.0"
std::string_view BuildCommit();   // "7f8240b3f9e9" (12 hex digits) or "unknown"

// What `PROGRAM --version` prints: "iscsigwd 0.1.0 (commit 7f8240b3f9e9)".
std::string VersionLine(std::string_view program);

}  // namespace iscsigw::server
