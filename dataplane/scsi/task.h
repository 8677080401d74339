// scsi::Task: one SCSI command as the SCSI engine sees it. It knows nothing of iSCSI; the transport
// (dataplane/iscsi) embeds one in its own task, fills the request fields, calls Engine::Execute and
// is told through `complete` when status, sense and Data-In are ready.
//
// Ownership: the transport owns the Task and every buffer it points at. The engine may write into
// `buf` (capacity `buf_cap`, at least `expected_length` bytes when expected_length > 0) and may
// point `in_segs` into `buf` or into backing-store memory (zero-copy Data-In). Threading: a Task is
// used only on the reactor thread that called Execute.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "dataplane/backing/backing_store.h"

namespace iscsigw::scsi {

// SAM-5 status codes.
enum class ScsiStatus : uint8_t {
  kGood = 0x00,
  kCheckCondition = 0x02,
  kConditionMet = 0x04,
  kBusy = 0x08,
  kReservationConflict = 0x18,
  kTaskSetFull = 0x28,
  kAcaActive = 0x30,
  kTaskAborted = 0x40,
};

enum class DataDirection : uint8_t { kNone, kRead, kWrite };

class Nexus;

inline constexpr size_t kMaxCdbLength = 32;
inline constexpr size_t kMaxSenseLength = 96;
inline constexpr size_t kMaxInSegments = 32;

class Lun;

struct Task {
  // Request, filled by the transport.
  std::array<uint8_t, kMaxCdbLength> cdb{};
  uint8_t cdb_len = 0;
  uint64_t lun = 0;  // decoded LUN number (SAM flat / peripheral addressing)
  DataDirection dir = DataDirection::kNone;
  uint32_t expected_length = 0;  // transport's expected data transfer length in bytes
  unsigned slot = 0;             // reactor index, passed to BackingStore calls
  Nexus* nexus = nullptr;        // the I_T nexus this command arrived on
  // Set by Engine::Execute: the logical unit the command runs on (null for a missing LUN). Valid
  // until the command completes.
  Lun* unit = nullptr;

  // Data-Out: exactly data_out_len received bytes in buf (data_out_len <= expected_length).
  uint32_t data_out_len = 0;
  // Scratch / data buffer owned by the transport.
  uint8_t* buf = nullptr;
  uint32_t buf_cap = 0;

  // Result, filled by the engine.
  ScsiStatus status = ScsiStatus::kGood;
  uint8_t sense_len = 0;
  std::array<uint8_t, kMaxSenseLength> sense{};
  // Data-In: the concatenation of in_segs[0..in_seg_count) (in_len bytes in all). The engine sets
  // the length the command produces; the transport truncates to expected_length and reports
  // residuals.
  std::array<backing::Segment, kMaxInSegments> in_segs{};
  uint32_t in_seg_count = 0;
  uint32_t in_len = 0;
  // Bytes the CDB itself asks to transfer in either direction (e.g. TRANSFER LENGTH x block size),
  // set by the engine; the transport reports the difference from expected_length as a residual
  // (RFC 7143 11.4.5).
  uint32_t transfer_bytes = 0;

  // Completion: called exactly once per Execute, either before Execute returns or later on the same
  // reactor thread.
  void (*complete)(Task* task, void* ctx) = nullptr;
  void* complete_ctx = nullptr;

  // Resets the result fields before reuse of a pooled task.
  void ResetResult() {
    status = ScsiStatus::kGood;
    sense_len = 0;
    in_seg_count = 0;
    in_len = 0;
    transfer_bytes = 0;
  }
  // Data-In from the first n bytes of buf.
  void SetDataInFromBuf(uint32_t n) {
    in_segs[0] = backing::Segment{buf, n};
    in_seg_count = n ? 1 : 0;
    in_len = n;
  }
  void Complete() { complete(this, complete_ctx); }
};

}  // namespace iscsigw::scsi
