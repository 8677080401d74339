#include "server/ctl/parse.h"

#include <cctype>

namespace iscsigw::ctl {

bool ParseLunRef(const std::string& s, iscsigw::v1::LunRef* out) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return false;
  const std::string id = s.substr(colon + 1);
  if (id.size() > 3 || id.find_first_not_of("0123456789") != std::string::npos) return false;
  out->set_target(s.substr(0, colon));
  out->set_id(static_cast<uint32_t>(std::stoul(id)));
  return true;
}

bool ParseSize(const std::string& s, uint64_t* out) {
  size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(s, &pos);
  } catch (...) {
    return false;
  }
  std::string unit = s.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  uint64_t mul = 1;
  if (unit.empty()) {
    mul = 1;
  } else if (unit == "K") {
    mul = 1ull << 10;
  } else if (unit == "M") {
    mul = 1ull << 20;
  } else if (unit == "G") {
    mul = 1ull << 30;
  } else if (unit == "T") {
    mul = 1ull << 40;
  } else {
    return false;
  }
  *out = n * mul;
  return true;
}

}  // namespace iscsigw::ctl
