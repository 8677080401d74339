// MAINTENANCE IN: REPORT TARGET PORT GROUPS (SPC-4 6.27), REPORT SUPPORTED OPERATION CODES
// (SPC-4 6.35) and REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (SPC-4 6.36); PREVENT ALLOW MEDIUM
// REMOVAL (SBC-3 5.14).
//
// REPORT SUPPORTED OPERATION CODES reports exactly the commands of the dispatch table (op_table.h),
// with the CDB usage data of cdb_usage.h.
#include <cstring>
#include <vector>

#include "base/endian.h"
#include "dataplane/scsi/cdb_usage.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/op_table.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi::internal {
namespace {

constexpr size_t kTimeoutsDescriptorLength = 12;

// Command timeouts descriptor (SPC-4 6.35.4, table 292), in seconds. Commands whose work grows
// with the medium (WRITE SAME, UNMAP, SANITIZE, copies, cache flushes) get a longer recommendation.
void PutTimeouts(uint8_t opcode, uint8_t* d) {
  std::memset(d, 0, kTimeoutsDescriptorLength);
  StoreBe16(d, 0x000A);  // DESCRIPTOR LENGTH
  uint32_t recommended = 30;
  switch (opcode) {
    case 0x35:  // SYNCHRONIZE CACHE(10)
    case 0x91:  // SYNCHRONIZE CACHE(16)
    case 0x41:  // WRITE SAME(10)
    case 0x93:  // WRITE SAME(16)
    case 0x42:  // UNMAP
    case 0x48:  // SANITIZE
    case 0x83:  // EXTENDED COPY
      recommended = 300;
      break;
    default:
      break;
  }
  StoreBe32(d + 4, 1);  // NOMINAL COMMAND PROCESSING TIMEOUT
  StoreBe32(d + 8, recommended);
}

// Whether the logical unit offers the command of `entry`: registered, offered by the LUN
// (Lun::Offers), and for WRITE ATOMIC(16) a store that writes atomically (the handler refuses it
// otherwise).
bool Offered(const Command& cmd, uint8_t opcode, const OpEntry& entry) {
  if (entry.handler == nullptr) return false;
  if (cmd.lun != nullptr && !cmd.lun->Offers(opcode)) return false;
  if (opcode == kWriteAtomic16) return cmd.lun != nullptr && AtomicBlocksOf(*cmd.lun).max > 0;
  return true;
}

// Whether requests for `opcode` must name a service action.
bool HasServiceActions(uint8_t opcode, const OpEntry& e) {
  return HasServiceActionField(opcode) || e.sa_count > 0;
}

Disposition ReportSupportedOperationCodes(const Command& cmd) {
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const bool rctd = (cdb[2] & 0x80) != 0;
  const uint8_t options = cdb[2] & 0x07;
  const uint8_t req_op = cdb[3];
  const uint16_t req_sa = LoadBe16(cdb + 4);
  const uint32_t alloc = LoadBe32(cdb + 6);
  if ((cdb[2] & 0x78) != 0) {
    SetInvalidFieldInCdb(task, 2);
    return Disposition::kDone;
  }
  if (cdb[10] != 0) {
    SetInvalidFieldInCdb(task, 10);
    return Disposition::kDone;
  }
  const auto& table = OpTable();
  std::vector<uint8_t> out;

  if (options == 0) {
    // All commands (6.35.2): a 4-byte COMMAND DATA LENGTH, then one descriptor per command and
    // service action.
    out.resize(4, 0);
    auto add = [&](uint8_t op, bool servactv, uint8_t sa) {
      const CdbUsage u = CdbUsageFor(op, servactv ? sa : 0xFF);
      const size_t at = out.size();
      out.resize(at + 8 + (rctd ? kTimeoutsDescriptorLength : 0), 0);
      uint8_t* d = out.data() + at;
      d[0] = op;
      StoreBe16(d + 2, servactv ? sa : 0);
      d[5] = static_cast<uint8_t>((rctd ? 0x02 : 0) | (servactv ? 0x01 : 0));  // CTDP, SERVACTV
      StoreBe16(d + 6, u.len);
      if (rctd) PutTimeouts(op, d + 8);
    };
    for (unsigned op = 0; op < 256; ++op) {
      const OpEntry& e = table[op];
      if (!Offered(cmd, static_cast<uint8_t>(op), e)) continue;
      if (HasServiceActions(static_cast<uint8_t>(op), e)) {
        for (uint8_t i = 0; i < e.sa_count; ++i) add(static_cast<uint8_t>(op), true, e.sas[i]);
      } else {
        add(static_cast<uint8_t>(op), false, 0);
      }
    }
    StoreBe32(out.data(), static_cast<uint32_t>(out.size() - 4));
    ReturnData(task, out.data(), out.size(), alloc);
    return Disposition::kDone;
  }

  const OpEntry& e = table[req_op];
  const bool has_sa = HasServiceActions(req_op, e);
  bool supported = Offered(cmd, req_op, e);
  bool with_sa = false;
  switch (options) {
    case 1:  // operation code only; one with service actions must be asked with them
      if (has_sa) {
        SetInvalidFieldInCdb(task, 3);
        return Disposition::kDone;
      }
      break;
    case 2:  // operation code and service action
      if (!has_sa) {
        SetInvalidFieldInCdb(task, 3);
        return Disposition::kDone;
      }
      with_sa = true;
      break;
    case 3:  // operation code, and service action when it has them
      with_sa = has_sa;
      break;
    default:
      SetInvalidFieldInCdb(task, 2, 2);
      return Disposition::kDone;
  }
  if (with_sa) supported = supported && req_sa <= 0xFF && SupportsServiceAction(e, req_sa);

  // One command (6.35.3, table 291): SUPPORT 011b (as the standard says) or 001b (not supported,
  // with no CDB usage data).
  const CdbUsage u = CdbUsageFor(req_op, with_sa ? static_cast<uint8_t>(req_sa) : 0xFF);
  const size_t cdb_size = supported ? u.len : 0;
  out.assign(4 + cdb_size + (supported && rctd ? kTimeoutsDescriptorLength : 0), 0);
  out[1] = static_cast<uint8_t>((supported && rctd ? 0x80 : 0) | (supported ? 0x03 : 0x01));
  StoreBe16(out.data() + 2, static_cast<uint16_t>(cdb_size));
  if (supported) {
    std::memcpy(out.data() + 4, u.mask.data(), u.len);
    if (rctd) PutTimeouts(req_op, out.data() + 4 + u.len);
  }
  ReturnData(task, out.data(), out.size(), alloc);
  return Disposition::kDone;
}

Disposition ReportSupportedTaskManagementFunctions(const Command& cmd) {
  // SPC-4 6.36. What the iSCSI layer carries out (RFC 7143 11.5.1): ABORT TASK, ABORT TASK SET,
  // CLEAR TASK SET, LOGICAL UNIT RESET and TARGET RESET (warm and cold). CLEAR ACA is refused
  // (NormACA=0), QUERY TASK and friends are not offered.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  if ((cdb[2] & 0x7F) != 0 || cdb[3] != 0 || cdb[4] != 0 || cdb[5] != 0 || cdb[10] != 0) {
    SetInvalidFieldInCdb(task, (cdb[2] & 0x7F) ? 2 : cdb[3] ? 3 : cdb[4] ? 4 : cdb[5] ? 5 : 10);
    return Disposition::kDone;
  }
  const bool repd = (cdb[2] & 0x80) != 0;
  const uint32_t alloc = LoadBe32(cdb + 6);
  if (alloc < 4) {  // SPC-4 6.36: the allocation length shall be at least four
    SetInvalidFieldInCdb(task, 6);
    return Disposition::kDone;
  }
  uint8_t d[16] = {};
  d[0] = 0x80 | 0x40 | 0x10 | 0x08 | 0x02;  // ATS, ATSS, CTSS, LURS, TRS
  d[1] = 0x00;                              // QAES=0, QTSS=0, ITNRS=0
  size_t len = 4;
  if (repd) {
    d[3] = 0x0C;  // ADDITIONAL DATA LENGTH; TMF timeouts not reported (TMFTMOV=0)
    len = 16;
  }
  ReturnData(task, d, len, alloc);
  return Disposition::kDone;
}

Disposition ReportTargetPortGroups(const Command& cmd) {
  // SPC-4 6.27, implicit ALUA (TPGS=01b). Each gateway is a target port group of its own (its
  // gateway id), with the one port it has for the target (TPGT 1). The logical unit is
  // active/optimized through it while its store prefers this gateway (a store of this gateway
  // alone always does; an rbd image does while no other gateway holds its exclusive lock), and
  // active/non-optimized otherwise (PREF=0). Only this gateway's group is reported: it does not
  // know the others.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const uint8_t format = cdb[1] >> 5;  // PARAMETER DATA FORMAT
  if (format > 1) {
    SetInvalidFieldInCdb(task, 1, 7);
    return Disposition::kDone;
  }
  if (cdb[2] != 0 || cdb[3] != 0 || cdb[4] != 0 || cdb[5] != 0 || cdb[10] != 0) {
    SetInvalidFieldInCdb(task, cdb[2] ? 2 : cdb[3] ? 3 : cdb[4] ? 4 : cdb[5] ? 5 : 10);
    return Disposition::kDone;
  }
  constexpr uint8_t kActiveOptimized = 0x0;
  constexpr uint8_t kActiveNonOptimized = 0x1;
  constexpr uint8_t kAoSup = 0x01;
  constexpr uint8_t kAnSup = 0x02;
  const uint16_t rel =
      task.nexus != nullptr ? task.nexus->relative_port_id() : cmd.target.relative_port_id;
  uint8_t d[20] = {};
  size_t pos = 4;
  if (format == 1) {  // extended header: FORMAT TYPE 001b, IMPLICIT TRANSITION TIME unspecified
    d[4] = 0x10;
    d[5] = 0;
    pos = 8;
  }
  // The state as last reported (Engine::CheckAccessState): a new state is seen here only once it
  // is settled, together with its unit attention (established right after it is stored).
  d[pos] = cmd.lun->reported_preferred().load() ? kActiveOptimized : kActiveNonOptimized;
  d[pos + 1] = kAoSup | kAnSup;
  StoreBe16(d + pos + 2, cmd.target.target_port_group);
  d[pos + 5] = 0;  // STATUS CODE: no status available
  d[pos + 7] = 1;  // TARGET PORT COUNT
  StoreBe16(d + pos + 10, rel);
  pos += 12;
  StoreBe32(d, static_cast<uint32_t>(pos - 4));  // RETURN DATA LENGTH
  ReturnData(task, d, pos, LoadBe32(cdb + 6));
  return Disposition::kDone;
}

}  // namespace

Disposition MaintenanceIn(const Command& cmd) {
  Task& task = cmd.task;
  const uint8_t sa = task.cdb[1] & 0x1F;
  // Bits 7..5 of byte 1 are REPORT TARGET PORT GROUPS' PARAMETER DATA FORMAT, reserved otherwise.
  if ((task.cdb[1] & 0xE0) != 0 && sa != kSaReportTargetPortGroups) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  switch (sa) {
    case kSaReportTargetPortGroups:
      return ReportTargetPortGroups(cmd);
    case kSaReportSupportedOperationCodes:
      return ReportSupportedOperationCodes(cmd);
    case kSaReportSupportedTaskManagementFunctions:
      return ReportSupportedTaskManagementFunctions(cmd);
    default:
      // SPC-4 4.5.6: an unsupported service action of a supported operation code.
      SetInvalidFieldInCdb(task, 1, 4);
      return Disposition::kDone;
  }
}

Disposition PreventAllowMediumRemoval(const Command& cmd) {
  // SBC-3 5.14. The medium is not removable (RMB=0), so there is no removal to prevent: PREVENT 00b
  // and 01b are accepted and change nothing observable; 10b and 11b are obsolete.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  if (RejectNonZeroCdbBytes(task, 1, 3)) return Disposition::kDone;
  if ((cdb[4] & 0xFC) != 0) {
    SetInvalidFieldInCdb(task, 4);
    return Disposition::kDone;
  }
  if ((cdb[4] & 0x03) > 1) {
    SetInvalidFieldInCdb(task, 4, 1);
    return Disposition::kDone;
  }
  return Disposition::kDone;
}

}  // namespace iscsigw::scsi::internal
