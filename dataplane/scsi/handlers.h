// Internal to the SCSI engine: the handler signature the opcode table uses, and the SPC/SBC command
// handlers (spc.cc, sbc.cc). Not part of the engine's contract; the transport uses engine.h only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"
#include "dataplane/scsi/task.h"

namespace iscsigw::scsi::internal {

// Largest READ/WRITE the engine accepts, advertised as MAXIMUM TRANSFER LENGTH in the Block Limits
// VPD page (SBC-3 6.5.3); matches the transport's largest task buffer.
inline constexpr uint64_t kMaxTransferBytes = uint64_t{16} << 20;
// OPTIMAL TRANSFER LENGTH advertised in the Block Limits VPD page.
inline constexpr uint64_t kOptimalTransferBytes = uint64_t{1} << 20;

// What a handler did with the task.
enum class Disposition {
  kDone,     // status/sense/Data-In are final; Execute calls task.Complete()
  kPending,  // a backing-store completion owns the task and calls task.Complete() (maybe already)
};

struct Command {
  const TargetInfo& target;
  Lun* lun;  // null only for opcodes allowed on a missing LUN (INQUIRY, REPORT LUNS, REQUEST SENSE)
  Task& task;
};

using Handler = Disposition (*)(const Command& cmd);

// Copies min(len, alloc_len, task.buf_cap) bytes of parameter data into task.buf as the Data-In
// (SPC-4 4.2.5.6: the device server truncates to the allocation length without error).
void ReturnData(Task& task, const uint8_t* data, size_t len, size_t alloc_len);

// INVALID FIELD IN PARAMETER LIST at parameter byte `byte` (SPC-4 4.5.2); the command is done.
inline Disposition BadParameter(Task& task, uint16_t byte) {
  SetInvalidFieldInParameterList(task, byte);
  return Disposition::kDone;
}

// SPC-4 commands (spc.cc).
Disposition TestUnitReady(const Command& cmd);
Disposition Inquiry(const Command& cmd);
Disposition ReportLuns(const Command& cmd);
Disposition RequestSense(const Command& cmd);

// Mode parameters (mode_pages.cc).
Disposition ModeSense6(const Command& cmd);
Disposition ModeSense10(const Command& cmd);
Disposition ModeSelect6(const Command& cmd);
Disposition ModeSelect10(const Command& cmd);

// Reservations (reservations.cc): RESERVE/RELEASE(6)/(10), PERSISTENT RESERVE IN/OUT.
Disposition Reserve(const Command& cmd);
Disposition Release(const Command& cmd);
Disposition PersistentReserveIn(const Command& cmd);
Disposition PersistentReserveOut(const Command& cmd);
// Whether `cdb` from `nexus` (may be null) conflicts with the LUN's reservations (SPC-4 5.13.1,
// SBC-3 4.17, SPC-2 5.5.1). Takes the reservation lock.
bool ReservationConflict(Lun& lun, const Nexus* nexus, const uint8_t* cdb);
// A LUN whose reservations the gateways share (LunConfig::shared_state): applies a change another
// gateway made (its version, the state, and the unit attentions and aborts it raised) on this
// one, releasing `ack` once the tasks it aborted here have ended; and tells the other gateways
// that every task of the logical unit is aborted (CLEAR TASK SET, SAM-5 7.4: COMMANDS CLEARED BY
// ANOTHER INITIATOR where one was; with `reset`, a LOGICAL UNIT RESET, SAM-5 5.8, and BUS DEVICE
// RESET FUNCTION OCCURRED for every nexus), releasing `hold` once their tasks have ended.
void ApplySharedReservations(Lun& lun, uint64_t version, std::string_view data,
                             std::string_view events, std::shared_ptr<void> ack);
void ShareTaskSetAbort(Lun& lun, bool reset, std::shared_ptr<void> hold);

// rsoc.cc: MAINTENANCE IN (REPORT SUPPORTED OPERATION CODES, REPORT SUPPORTED TASK MANAGEMENT
// FUNCTIONS) and PREVENT ALLOW MEDIUM REMOVAL.
Disposition MaintenanceIn(const Command& cmd);
Disposition PreventAllowMediumRemoval(const Command& cmd);

// SBC-3 commands (sbc.cc).
Disposition StartStopUnit(const Command& cmd);
Disposition ReadCapacity10(const Command& cmd);
Disposition ServiceActionIn16(const Command& cmd);
Disposition Read6(const Command& cmd);
Disposition Read10(const Command& cmd);
Disposition Read12(const Command& cmd);
Disposition Read16(const Command& cmd);
Disposition Write6(const Command& cmd);
Disposition Write10(const Command& cmd);
Disposition Write12(const Command& cmd);
Disposition Write16(const Command& cmd);
Disposition WriteAtomic16(const Command& cmd);
// The LUN's atomic write limits in logical blocks (SBC-4 6.6.4, Block Limits VPD page): MAXIMUM
// ATOMIC TRANSFER LENGTH (0: no atomic writes) and ATOMIC ALIGNMENT (0: none). Both come from the
// store, the maximum capped at the MAXIMUM TRANSFER LENGTH.
struct AtomicBlocks {
  uint32_t max = 0;
  uint32_t alignment = 0;
};
AtomicBlocks AtomicBlocksOf(Lun& lun);
Disposition SynchronizeCache10(const Command& cmd);
Disposition SynchronizeCache16(const Command& cmd);

// SBC-3 provisioning and bulk writes (sbc_provisioning.cc).
Disposition Unmap(const Command& cmd);
Disposition GetLbaStatus(const Command& cmd);  // SERVICE ACTION IN(16) service action 12h
Disposition WriteSame10(const Command& cmd);
Disposition WriteSame16(const Command& cmd);
Disposition Sanitize(const Command& cmd);
// While a sanitize operation runs or failed (SBC-4 4.11), whether `task` must be refused; if so the
// task holds the CHECK CONDITION (sbc_sanitize.cc).
bool SanitizeRefuses(Lun& lun, Task& task);
// The sense REQUEST SENSE reports for the sanitize state: false when the LUN is idle.
bool SanitizeSense(Lun& lun, SenseKey* key, Asc* asc, uint16_t* progress);
Disposition ReadDefectData10(const Command& cmd);
Disposition ReadDefectData12(const Command& cmd);

// SBC-3 comparing and read-modify-write commands (sbc_verify.cc).
Disposition CompareAndWrite(const Command& cmd);
Disposition OrWrite16(const Command& cmd);
Disposition Verify10(const Command& cmd);
Disposition Verify12(const Command& cmd);
Disposition Verify16(const Command& cmd);
Disposition WriteAndVerify10(const Command& cmd);
Disposition WriteAndVerify12(const Command& cmd);
Disposition WriteAndVerify16(const Command& cmd);
Disposition PreFetch10(const Command& cmd);
Disposition PreFetch16(const Command& cmd);

// SPC-4 third-party copy, LID1 (xcopy.cc): EXTENDED COPY of blocks between the target's logical
// units, RECEIVE COPY RESULTS, and the Third-party Copy VPD page (8Fh) that describes them.
Disposition ExtendedCopy(const Command& cmd);
Disposition ReceiveCopyResults(const Command& cmd);
// Writes VPD page 8Fh into d (at most kThirdPartyCopyVpdMax bytes); returns its length.
inline constexpr size_t kThirdPartyCopyVpdMax = 128;
size_t VpdThirdPartyCopy(const Command& cmd, uint8_t* d);

}  // namespace iscsigw::scsi::internal
