// SANITIZE (SBC-3 5.19, SBC-4 5.30) and the sanitize operation it starts (SBC-4 4.11).
//
// OVERWRITE writes the initialization pattern over every block; BLOCK ERASE deallocates every block
// of a thin store (LBPRZ=1: they read back as zeros; WABEREQ=01b in the Block Device
// Characteristics VPD page) and writes zeros on a thick one; CRYPTOGRAPHIC ERASE is not supported,
// since no store encrypts its data. EXIT FAILURE MODE leaves sanitize failure mode.
//
// The operation belongs to the logical unit, not to the command: it runs piece by piece on the
// reactor of the SANITIZE command, keeps the LUN alive (shared_ptr), and ends whatever happens to
// the command, its connection or the task set (SBC-4 4.11.3: resets and I_T nexus loss do not stop
// it). With IMMED=1 the command completes as soon as the operation starts; with IMMED=0 when it
// ends. Until then every command but INQUIRY, REPORT LUNS and REQUEST SENSE is refused with NOT
// READY / SANITIZE IN PROGRESS and a progress indication, and if it fails the LUN stays in sanitize
// failure mode until a SANITIZE succeeds or EXIT FAILURE MODE is allowed.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "base/endian.h"
#include "dataplane/backing/zero_buffer.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi::internal {
namespace {

constexpr uint8_t kSanitizeOverwrite = 0x01;
constexpr uint8_t kSanitizeBlockErase = 0x02;
constexpr uint8_t kSanitizeCryptoErase = 0x03;
constexpr uint8_t kSanitizeExitFailureMode = 0x1F;

// Bytes one store call writes (OVERWRITE, thick BLOCK ERASE) or deallocates (thin BLOCK ERASE).
constexpr uint64_t kWritePiece = uint64_t{1} << 20;
constexpr uint64_t kUnmapPiece = uint64_t{64} << 20;

// Sense data with the progress indication in the sense-key specific field (SPC-4 4.5.2.4.4).
void SetCheckConditionWithProgress(Task& task, SenseKey key, Asc asc, uint16_t progress) {
  SetCheckCondition(task, key, asc);
  task.sense[15] = 0x80;  // SKSV
  task.sense[16] = static_cast<uint8_t>(progress >> 8);
  task.sense[17] = static_cast<uint8_t>(progress);
}

// One sanitize operation over the whole medium. Runs on reactor `slot`, a piece at a time through
// the Pump (sbc_ops.h), which gives the reactor back between pieces; deletes itself at the end.
class SanitizeOp final : public Pump {
 public:
  SanitizeOp(std::shared_ptr<Lun> keep, Lun& lun, unsigned slot, bool erase)
      : keep_(std::move(keep)),
        lun_(lun),
        slot_(slot),
        erase_(erase),
        end_(lun.num_blocks() * lun.block_size()) {
    YieldThrough(lun.config().post, slot);
  }

  // The buffer OVERWRITE repeats (kWritePiece bytes); null for BLOCK ERASE.
  uint8_t* AllocPattern() {
    pattern_.reset(new (std::nothrow) uint8_t[kWritePiece]);
    return pattern_.get();
  }
  // With IMMED=0 the command completes when the operation ends.
  void SetWaiter(Task* task) { waiter_ = task; }
  void Start() { Run(); }

 private:
  // Starts the next store call; false when the medium is done (flushed).
  bool Issue() override {
    backing::BackingStore& store = lun_.store();
    const backing::IoCompletion done{OnDone, static_cast<Pump*>(this)};
    if (pos_ >= end_) {
      if (flushed_) return false;
      flushed_ = true;
      piece_ = 0;
      store.Flush(slot_, done);  // the sanitized medium is durable before the operation ends
      return true;
    }
    if (erase_ && store.thin_provisioned()) {
      piece_ = std::min(kUnmapPiece, end_ - pos_);
      store.Unmap(slot_, pos_, piece_, done);
      return true;
    }
    const uint8_t* src = erase_ ? backing::ZeroBuffer() : pattern_.get();
    const uint64_t src_len = erase_ ? backing::kZeroBufferSize : kWritePiece;
    piece_ = std::min(src_len, end_ - pos_);
    store.Write(slot_, pos_, std::span<const uint8_t>(src, static_cast<size_t>(piece_)), false,
                done);
    return true;
  }
  bool Done(int err) override {
    if (err != 0) {
      err_ = err;
      return false;
    }
    pos_ += piece_;
    const uint64_t done = std::min(pos_, end_);
    lun_.sanitize().SetProgress(end_ == 0 ? 0xFFFF : static_cast<uint16_t>((done * 0xFFFF) / end_));
    return true;
  }
  void Finish() override {
    // SBC-4 4.11.5: a failed operation leaves the LUN in sanitize failure mode.
    const int err = err_;
    lun_.sanitize().End(err == 0);
    Task* waiter = waiter_;
    if (waiter != nullptr && err != 0) SetStoreError(*waiter, err, true);
    delete this;
    if (waiter != nullptr) waiter->Complete();
  }

  const std::shared_ptr<Lun> keep_;  // null when the LUN is not owned by a shared_ptr (tests)
  Lun& lun_;
  const unsigned slot_;
  const bool erase_;
  const uint64_t end_;
  std::unique_ptr<uint8_t[]> pattern_;
  Task* waiter_ = nullptr;
  uint64_t pos_ = 0;
  uint64_t piece_ = 0;
  bool flushed_ = false;
  int err_ = 0;  // the store error that ended the operation
};

}  // namespace

bool SanitizeRefuses(Lun& lun, Task& task) {
  const uint8_t opcode = task.cdb[0];
  // SBC-4 4.11.3: INQUIRY, REPORT LUNS and REQUEST SENSE are processed during a sanitize
  // operation and in sanitize failure mode (LOG SENSE too, which this device server lacks).
  if (opcode == kInquiry || opcode == kReportLuns || opcode == kRequestSense) return false;
  switch (lun.sanitize().mode()) {
    case SanitizeState::Mode::kIdle:
      return false;
    case SanitizeState::Mode::kInProgress:
      SetCheckConditionWithProgress(task, SenseKey::kNotReady, kAscSanitizeInProgress,
                                    lun.sanitize().progress());
      return true;
    case SanitizeState::Mode::kFailed:
      // SBC-4 4.11.5: a new SANITIZE (or EXIT FAILURE MODE) is the way out of failure mode.
      if (opcode == kSanitize) return false;
      SetCheckCondition(task, SenseKey::kMediumError, kAscSanitizeCommandFailed);
      return true;
  }
  return false;
}

bool SanitizeSense(Lun& lun, SenseKey* key, Asc* asc, uint16_t* progress) {
  // SPC-4 6.39 / SBC-4 4.11.3: REQUEST SENSE reports the operation with its progress, and sanitize
  // failure mode.
  switch (lun.sanitize().mode()) {
    case SanitizeState::Mode::kIdle:
      return false;
    case SanitizeState::Mode::kInProgress:
      *key = SenseKey::kNotReady;
      *asc = kAscSanitizeInProgress;
      *progress = lun.sanitize().progress();
      return true;
    case SanitizeState::Mode::kFailed:
      *key = SenseKey::kMediumError;
      *asc = kAscSanitizeCommandFailed;
      return true;
  }
  return false;
}

Disposition Sanitize(const Command& cmd) {
  // SBC-3 5.19 / SBC-4 5.30.
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  const bool immed = (cdb[1] & 0x80) != 0;
  const bool ause = (cdb[1] & 0x20) != 0;
  const uint8_t sa = cdb[1] & 0x1F;
  const uint16_t plen = LoadBe16(cdb + 7);
  task.transfer_bytes = plen;
  if ((cdb[1] & 0x40) != 0) {  // ZNR: zoned block devices only
    SetInvalidFieldInCdb(task, 1, 6);
    return Disposition::kDone;
  }
  for (int i = 2; i <= 6; ++i) {
    if (cdb[i] != 0) {
      SetInvalidFieldInCdb(task, static_cast<uint16_t>(i));
      return Disposition::kDone;
    }
  }
  switch (sa) {
    case kSanitizeOverwrite:
    case kSanitizeBlockErase:
    case kSanitizeExitFailureMode:
      break;
    case kSanitizeCryptoErase:
      // No store encrypts its data, so there is no key to change: the service action is not
      // supported (SBC-3 5.19.1: INVALID FIELD IN CDB).
    default:
      SetInvalidFieldInCdb(task, 1, 4);
      return Disposition::kDone;
  }
  const uint32_t bs = lun.block_size();
  if (sa == kSanitizeOverwrite) {
    // SBC-3 5.19.2 / SBC-4 5.30.2.2: a PARAMETER LIST LENGTH below 5 or above the logical block
    // length + 4 cannot hold a header and a pattern of 1..block length bytes.
    if (plen < 5 || plen > bs + 4) {
      SetInvalidFieldInCdb(task, 7);
      return Disposition::kDone;
    }
  } else if (plen != 0) {  // only OVERWRITE has a parameter list
    SetInvalidFieldInCdb(task, 7);
    return Disposition::kDone;
  }

  if (sa == kSanitizeExitFailureMode) {
    // SBC-4 5.30.4: leaves sanitize failure mode if the SANITIZE that failed had AUSE=1; outside
    // failure mode there is nothing to do.
    if (lun.sanitize().mode() == SanitizeState::Mode::kFailed) {
      if (!lun.sanitize().failed_with_ause()) {
        SetInvalidFieldInCdb(task, 1, 4);
        return Disposition::kDone;
      }
      lun.sanitize().ExitFailureMode();
    }
    return Disposition::kDone;
  }
  if (!CheckWritable(cmd)) return Disposition::kDone;

  auto* op = new (std::nothrow)
      SanitizeOp(lun.weak_from_this().lock(), lun, task.slot, sa == kSanitizeBlockErase);
  if (op == nullptr) {
    SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
    return Disposition::kDone;
  }
  if (sa == kSanitizeOverwrite) {
    // OVERWRITE parameter list (SBC-3 5.19.2, table 59): INVERT, TEST, OWCOUNT, the pattern.
    const uint8_t* p = task.buf;
    enum class Bad { kNone, kLength, kField } bad = Bad::kNone;
    FieldPointer fp{false, 0, -1};
    if (task.data_out_len < plen || p == nullptr) {
      bad = Bad::kLength;
    } else if (((p[0] >> 5) & 0x03) != 0) {  // TEST: no test modes
      fp = {false, 0, 6};
      bad = Bad::kField;
    } else if ((p[0] & 0x1F) == 0) {  // OVERWRITE COUNT 0 is reserved
      fp = {false, 0, 4};
      bad = Bad::kField;
    } else if (p[1] != 0) {
      fp = {false, 1, -1};
      bad = Bad::kField;
    } else {
      const uint16_t pattern_len = LoadBe16(p + 2);
      if (pattern_len == 0 || pattern_len > bs || plen != 4u + pattern_len) {
        fp = {false, 2, -1};
        bad = Bad::kField;
      }
    }
    uint8_t* pattern = bad == Bad::kNone ? op->AllocPattern() : nullptr;
    if (pattern == nullptr) {
      delete op;
      if (bad == Bad::kLength) {
        SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
      } else if (bad == Bad::kField) {
        SetInvalidFieldInParameterList(task, fp.byte, fp.bit);
      } else {
        SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
      }
      return Disposition::kDone;
    }
    // Each pass overwrites every block in full, so on memory and files the medium ends as the last
    // pass leaves it; that pass is the one written. With INVERT, passes alternate between the
    // pattern and its inverse, the last one inverted when OWCOUNT is even.
    const uint16_t pattern_len = LoadBe16(p + 2);
    const bool inverted = (p[0] & 0x80) != 0 && (p[0] & 0x1F) % 2 == 0;
    for (uint64_t i = 0; i < kWritePiece; ++i) {
      const uint8_t b = p[4 + (i % bs) % pattern_len];
      pattern[i] = inverted ? static_cast<uint8_t>(~b) : b;
    }
  }

  if (!lun.sanitize().TryBegin(ause)) {
    // Another reactor started one between the engine's check and here.
    delete op;
    SetCheckConditionWithProgress(task, SenseKey::kNotReady, kAscSanitizeInProgress,
                                  lun.sanitize().progress());
    return Disposition::kDone;
  }
  if (immed) {
    // SBC-3 5.19.1: IMMED=1 returns status once the CDB and parameter list are validated; the
    // operation goes on, reported through NOT READY / SANITIZE IN PROGRESS.
    op->Start();
    return Disposition::kDone;
  }
  op->SetWaiter(&task);
  op->Start();
  return Disposition::kPending;
}

}  // namespace iscsigw::scsi::internal
