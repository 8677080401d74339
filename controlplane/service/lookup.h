// Finding targets, LUNs and snapshots in the desired state, and the names and errors the service
// gives them. Shared by the GatewayService handlers (gateway_service*.cc); no locking: callers
// hold a state snapshot or run inside StateStore::Update.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "iscsigw/v1/state.pb.h"

namespace iscsigw::service {

// A target by name, short or qualified; null when absent.
v1::Target* FindTarget(v1::State* st, const std::string& name);
const v1::Target* FindTarget(const v1::State& st, const std::string& name);
v1::Lun* FindLun(v1::Target* t, uint32_t id);
const v1::Lun* FindLun(const v1::State& st, const std::string& target, uint32_t id);
v1::Snapshot* FindSnapshot(v1::State* st, const std::string& name);
const v1::Snapshot* FindSnapshot(const v1::State& st, const std::string& name);

// NOT_FOUND naming the target (INVALID_ARGUMENT for an empty name).
Status TargetNotFound(const std::string& name);
// "lun 3 of iqn...:db"
std::string LunName(uint32_t id, const std::string& target);

}  // namespace iscsigw::service
