// The values iscsigwctl reads from its command line beyond what CLI11 checks: LUN references and
// sizes. Pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "iscsigw/v1/gateway.pb.h"

namespace iscsigw::ctl {

// "TARGET:ID": an IQN has colons of its own, so the LUN id follows the last one (at most three
// digits). False for anything else.
bool ParseLunRef(const std::string& s, iscsigw::v1::LunRef* out);
// "64M", "1G", "1GiB", "4096", "10T": binary multiples; plain numbers are bytes. False for
// anything else.
bool ParseSize(const std::string& s, uint64_t* out);

}  // namespace iscsigw::ctl
