// Internal to the SCSI engine: the 256-entry command table (engine.cc) and what each entry says
// about its command. Execute dispatches through it; REPORT SUPPORTED OPERATION CODES (rsoc.cc)
// reports from it, so a command registered in the table is reported without further work; the
// reservation checks (reservations.cc) classify commands from it.
//
// To register a command: one line in MakeOpTable (engine.cc). A command whose CDB has a SERVICE
// ACTION field (HasServiceActionField) also lists the service actions it implements in `sas`;
// its handler still answers unimplemented service actions itself. CDB usage masks come from
// cdb_usage.h, the reservation class from PrClassFor below; both are keyed by opcode (and
// service action), so a new command only needs an entry there when the defaults do not fit.
#pragma once

#include <array>
#include <cstdint>

#include "dataplane/scsi/handlers.h"

namespace iscsigw::scsi::internal {

// How a command fares while the logical unit is reserved by another I_T nexus: SPC-4 5.13.1
// (table 63, SPC commands) and SBC-3 4.17 (table 13, SBC commands).
enum class PrClass : uint8_t {
  kConflict,  // conflicts under Write Exclusive and Exclusive Access (writes, MODE SENSE/SELECT,
              // ...)
  kRead,      // allowed under Write Exclusive, conflicts under Exclusive Access (READ, VERIFY, ...)
  kAllowed,   // allowed under every reservation (INQUIRY, REPORT LUNS, TEST UNIT READY, ...)
  kSpecial,   // depends on CDB fields (PREVENT ALLOW, START STOP UNIT) or the command itself
              // (RESERVE/RELEASE, PERSISTENT RESERVE OUT); see reservations.cc
};

inline constexpr size_t kMaxServiceActions = 8;

struct OpEntry {
  Handler handler = nullptr;
  // SPC-4 5.14 / SAM-5 5.14: INQUIRY, REPORT LUNS and REQUEST SENSE are processed while a unit
  // attention is pending and do not report it as CHECK CONDITION.
  bool ua_exempt = false;
  // SPC-4 (INQUIRY 6.6, REPORT LUNS 6.33, REQUEST SENSE 6.39): served for an incorrect logical
  // unit.
  bool missing_lun_ok = false;
  // Reads or writes the medium, or reports its capacity: answered NOT READY, with nothing done,
  // while the store cannot reach its medium (BackingStore::ready(); SPC-4 4.5.2 and table 52).
  bool needs_medium = false;
  // Service actions implemented, for opcodes with a SERVICE ACTION field (in ascending order).
  uint8_t sa_count = 0;
  std::array<uint8_t, kMaxServiceActions> sas{};
};

// The table; constant-initialised, any thread.
const std::array<OpEntry, 256>& OpTable();

// Whether the CDB of `opcode` carries a SERVICE ACTION field in byte 1 bits 4..0 (SPC-4 4.2.5.2).
constexpr bool HasServiceActionField(uint8_t opcode) {
  switch (opcode) {
    case 0x48:  // SANITIZE
    case 0x5E:  // PERSISTENT RESERVE IN
    case 0x5F:  // PERSISTENT RESERVE OUT
    case 0x83:  // THIRD-PARTY COPY OUT (EXTENDED COPY)
    case 0x84:  // THIRD-PARTY COPY IN (RECEIVE COPY RESULTS)
    case 0x9E:  // SERVICE ACTION IN(16)
    case 0x9F:  // SERVICE ACTION OUT(16)
    case 0xA3:  // MAINTENANCE IN
    case 0xA4:  // MAINTENANCE OUT
      return true;
    default:
      return false;
  }
}

// Whether `entry` implements service action `sa`.
constexpr bool SupportsServiceAction(const OpEntry& entry, uint8_t sa) {
  for (uint8_t i = 0; i < entry.sa_count; ++i) {
    if (entry.sas[i] == sa) return true;
  }
  return false;
}

// The reservation class of a command (SPC-4 table 63, SBC-3 table 13). Anything not named is a
// conflict under both reservation types, the safe answer for commands that change the medium or
// the logical unit's state.
constexpr PrClass PrClassFor(uint8_t opcode, uint8_t sa) {
  switch (opcode) {
    case 0x00:  // TEST UNIT READY
    case 0x03:  // REQUEST SENSE
    case 0x12:  // INQUIRY
    case 0x25:  // READ CAPACITY(10)
    case 0x4D:  // LOG SENSE
    case 0x5E:  // PERSISTENT RESERVE IN
    case 0xA0:  // REPORT LUNS
    case 0xA3:  // MAINTENANCE IN (REPORT TARGET PORT GROUPS, SUPPORTED OPCODES / TMFS)
      return PrClass::kAllowed;
    case 0x9E:  // SERVICE ACTION IN(16): READ CAPACITY(16) allowed, GET LBA STATUS like a read
      return sa == 0x10 ? PrClass::kAllowed : PrClass::kRead;
    case 0x08:  // READ(6)
    case 0x28:  // READ(10)
    case 0xA8:  // READ(12)
    case 0x88:  // READ(16)
    case 0x2F:  // VERIFY(10)
    case 0xAF:  // VERIFY(12)
    case 0x8F:  // VERIFY(16)
    case 0x34:  // PRE-FETCH(10)
    case 0x90:  // PRE-FETCH(16)
    case 0x37:  // READ DEFECT DATA(10)
    case 0xB7:  // READ DEFECT DATA(12)
      return PrClass::kRead;
    case 0x16:  // RESERVE(6)
    case 0x17:  // RELEASE(6)
    case 0x56:  // RESERVE(10)
    case 0x57:  // RELEASE(10)
    case 0x5F:  // PERSISTENT RESERVE OUT
    case 0x1E:  // PREVENT ALLOW MEDIUM REMOVAL
    case 0x1B:  // START STOP UNIT
      return PrClass::kSpecial;
    default:
      return PrClass::kConflict;
  }
}

}  // namespace iscsigw::scsi::internal
