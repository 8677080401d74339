// Small text helpers of the node service (csi/node_service.h): what host commands print is split
// into lines and words, and command lines and messages are joined from parts. Pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace iscsigw::csi {

// `s` without leading and trailing white space.
std::string Trim(std::string_view s);
// The parts of `s` between each `sep`, each trimmed; empty parts are dropped.
std::vector<std::string> Split(std::string_view s, char sep);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
bool Contains(const std::vector<std::string>& v, const std::string& s);
// The directory of `path`: "." when it has no slash, "/" for a file in the root.
std::string Dirname(const std::string& path);

}  // namespace iscsigw::csi
