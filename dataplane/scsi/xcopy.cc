// SPC-4 third-party copy, LID1: EXTENDED COPY (6.4) of blocks between the logical units of the
// target the command arrived on, RECEIVE COPY RESULTS (6.18), and the Third-party Copy VPD page
// (7.8.17) that advertises both. This is what VMware's full-copy offload (VAAI XCOPY) sends.
//
// The device server is its own copy manager. Each identification CSCD descriptor (E4h) is resolved
// to one of the target's logical units by the NAA designator its Device Identification VPD page
// reports, so a copy never reaches a logical unit the initiator could not address itself (access
// control is per target). Only block-to-block segment descriptors (02h) are implemented; other
// descriptor types are refused with the sense codes SPC-4 6.4.5 / 6.4.6 give for them.
//
// Errors in the parameter list are found before any data moves and end the command with ILLEGAL
// REQUEST. Errors while processing a segment (a CSCD that names no reachable logical unit, a range
// beyond a copy target's capacity, a store error) end it with COPY ABORTED, the COMMAND-SPECIFIC
// INFORMATION field holding the number of the segment descriptor and the sense-key-specific
// segment pointer naming the field (SPC-4 4.5.2.4.6); segments before it stay copied.
//
// Data moves through one bounce buffer per command, a piece at a time, with the same store calls
// as READ and WRITE on the task's reactor; the Pump (sbc_ops.h) keeps the stack flat when the
// store completes inline. The command is rare, so it allocates its state and buffer.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "base/endian.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi {

// ---------------------------------------------------------------------------------------------
// Nexus: the copy records (declared in engine.h). Used only on the nexus's reactor thread.

CopyRecord* Nexus::FindCopy(uint8_t list_id) {
  for (CopyRecord& r : copies_) {
    if (r.state != CopyRecord::State::kFree && r.has_list_id && r.list_id == list_id) return &r;
  }
  return nullptr;
}

CopyRecord* Nexus::ClaimCopy() {
  CopyRecord* oldest = nullptr;
  for (CopyRecord& r : copies_) {
    if (r.state == CopyRecord::State::kFree) return &r;
    if (r.state != CopyRecord::State::kInProgress &&
        (oldest == nullptr || r.finished_seq < oldest->finished_seq)) {
      oldest = &r;
    }
  }
  return oldest;
}

void Nexus::FinishCopy(CopyRecord& record) {
  record.finished_seq = ++copy_seq_;
  // LIST ID USAGE 10b / 11b: nothing is held once the command completes (SPC-4 6.4.3.2).
  if (!record.hold || !record.has_list_id) record.state = CopyRecord::State::kFree;
}

namespace internal {
namespace {

// Copy manager limits, reported by RECEIVE COPY RESULTS (OPERATING PARAMETERS) and VPD 8Fh.
constexpr uint16_t kMaxCscdDescriptors = 8;
constexpr uint16_t kMaxSegmentDescriptors = 4;
constexpr size_t kHeaderLength = 16;        // parameter list header (SPC-4 6.4.3.1)
constexpr size_t kCscdLength = 32;          // identification CSCD descriptor (SPC-4 6.4.5.6)
constexpr size_t kBlockToBlockLength = 28;  // block device to block device (SPC-4 6.4.6.5)
constexpr uint32_t kMaxDescriptorListLength =
    kMaxCscdDescriptors * kCscdLength + kMaxSegmentDescriptors * kBlockToBlockLength;
constexpr uint32_t kMaxSegmentBytes = static_cast<uint32_t>(kMaxTransferBytes);
constexpr uint32_t kPieceBytes = uint32_t{1} << 20;  // bounce buffer

constexpr uint8_t kCscdIdentification = 0xE4;
constexpr uint8_t kSegmentBlockToBlock = 0x02;
constexpr uint8_t kImplementedDescriptors[] = {kSegmentBlockToBlock, kCscdIdentification};

// LIST ID USAGE (SPC-4 6.4.3.1, table 110).
// 10b (discard) names the copy while it runs and holds nothing afterwards; 01b is reserved.
constexpr uint8_t kListIdHold = 0b00;
constexpr uint8_t kListIdNone = 0b11;

// COPY MANAGER STATUS of COPY STATUS (SPC-4 6.18.3).
constexpr uint8_t kCopyInProgress = 0x00;
constexpr uint8_t kCopySucceeded = 0x01;
constexpr uint8_t kCopyFailed = 0x02;

struct Cscd {
  std::shared_ptr<Lun> lun;  // null: the designator names no logical unit of this target
  bool nul = false;          // NUL: a descriptor that may not be used for I/O (SPC-4 6.4.5.1)
};

struct Segment {
  uint16_t src = 0;  // CSCD descriptor indexes
  uint16_t dst = 0;
  bool dc = false;  // DC: NUMBER OF BLOCKS counts destination blocks
  uint16_t blocks = 0;
  uint64_t src_lba = 0;
  uint64_t dst_lba = 0;
};

struct Plan {
  uint8_t list_id = 0;
  uint8_t usage = kListIdHold;
  size_t cscd_count = 0;
  std::array<Cscd, kMaxCscdDescriptors> cscds;
  size_t segment_count = 0;
  std::array<Segment, kMaxSegmentDescriptors> segments;
};

// COPY ABORTED for segment descriptor `index`, pointing at byte `field` of it.
void SetCopyAborted(Task& task, Asc asc, size_t index, uint16_t field) {
  SetCheckCondition(task, SenseKey::kCopyAborted, asc);
  uint8_t* s = task.sense.data();
  StoreBe32(s + 8, static_cast<uint32_t>(index));  // COMMAND-SPECIFIC INFORMATION
  s[15] = 0x80 | 0x20;                             // SKSV=1, SD=1: relative to the segment
  StoreBe16(s + 16, field);
}

void SetParameterListLengthError(Task& task) {
  SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
}

// The logical unit of `target` whose NAA designator (VPD 83h, SPC-4 7.8.6.6) equals the designation
// descriptor at d (4-byte header, then the designator), or null.
std::shared_ptr<Lun> ResolveDesignator(const TargetInfo& target, const uint8_t* d) {
  const uint8_t code_set = d[0] & 0x0F;
  const uint8_t association = (d[1] >> 4) & 0x03;
  const uint8_t type = d[1] & 0x0F;
  const uint8_t len = d[3];
  constexpr uint8_t kCodeSetBinary = 1, kAssocLu = 0, kTypeNaa = 3;
  if (code_set != kCodeSetBinary || association != kAssocLu || type != kTypeNaa) return nullptr;
  for (const std::shared_ptr<Lun>& lun : target.luns) {
    const uint64_t naa = lun->config().naa_id;
    if (naa == 0) continue;
    const bool extended = (naa >> 60) == 0x6;
    if (len != (extended ? 16 : 8) || LoadBe64(d + 4) != naa) continue;
    if (extended && std::any_of(d + 12, d + 20, [](uint8_t b) { return b != 0; })) continue;
    return lun;
  }
  return nullptr;
}

// Parses the EXTENDED COPY (LID1) parameter list p[0..len) into *plan; false when the task holds
// the ILLEGAL REQUEST that ends the command (SPC-4 6.4.3).
bool ParseParameterList(const Command& cmd, const uint8_t* p, size_t len, Plan* plan) {
  Task& task = cmd.task;
  if (len < kHeaderLength) {
    SetParameterListLengthError(task);
    return false;
  }
  plan->list_id = p[0];
  plan->usage = (p[1] >> 3) & 0x03;
  if ((p[1] & 0xC0) != 0 || plan->usage == 0b01) {  // reserved bits, reserved LIST ID USAGE
    SetInvalidFieldInParameterList(task, 1);
    return false;
  }
  if (plan->usage == kListIdNone && plan->list_id != 0) {  // SPC-4 6.4.3.1: must be zero
    SetInvalidFieldInParameterList(task, 0);
    return false;
  }
  if (p[4] != 0 || p[5] != 0 || p[6] != 0 || p[7] != 0) {
    SetInvalidFieldInParameterList(task, 4);
    return false;
  }
  const uint64_t cscd_len = LoadBe16(p + 2);
  const uint64_t seg_len = LoadBe32(p + 8);
  const uint64_t inline_len = LoadBe32(p + 12);
  // SPC-4 6.4.3.1: descriptor lists beyond MAXIMUM DESCRIPTOR LIST LENGTH, or longer than the
  // parameter list carries, are a PARAMETER LIST LENGTH ERROR.
  if (cscd_len + seg_len > kMaxDescriptorListLength ||
      kHeaderLength + cscd_len + seg_len + inline_len > len) {
    SetParameterListLengthError(task);
    return false;
  }
  if (inline_len != 0) {  // MAXIMUM INLINE DATA LENGTH is zero
    SetParameterListError(task, Asc::kInlineDataLengthExceeded, static_cast<uint16_t>(12));
    return false;
  }

  // CSCD descriptors (SPC-4 6.4.5).
  const size_t cscd_end = kHeaderLength + cscd_len;
  for (size_t off = kHeaderLength; off < cscd_end; off += kCscdLength) {
    const uint8_t* d = p + off;
    if (d[0] != kCscdIdentification) {
      SetParameterListError(task, Asc::kUnsupportedTargetDescriptorType,
                            static_cast<uint16_t>(off));
      return false;
    }
    if (plan->cscd_count == kMaxCscdDescriptors) {
      SetParameterListError(task, Asc::kTooManyTargetDescriptors, static_cast<uint16_t>(off));
      return false;
    }
    if (cscd_end - off < kCscdLength) {  // the list ends inside a descriptor
      SetInvalidFieldInParameterList(task, 2);
      return false;
    }
    // LU ID TYPE 00b (LU IDENTIFIER) only: 01b (proxy token) is not implemented, 1xb reserved;
    // PERIPHERAL DEVICE TYPE 00h (block device) only.
    if ((d[1] & 0xC0) != 0) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(off + 1), 7);
      return false;
    }
    if ((d[1] & 0x1F) != 0) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(off + 1), 4);
      return false;
    }
    if (d[7] > 20 || d[6] != 0) {  // the designator must fit in bytes 8..27
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(off + 7));
      return false;
    }
    Cscd& c = plan->cscds[plan->cscd_count++];
    c.nul = (d[1] & 0x20) != 0;
    c.lun = ResolveDesignator(cmd.target, d + 4);
    // Block device type-specific parameters (SPC-4 6.4.5.2.1): PAD (no effect on block-to-block
    // copies) and DISK BLOCK LENGTH, which must be the logical unit's.
    if ((d[28] & ~0x04) != 0) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(off + 28));
      return false;
    }
    if (c.lun != nullptr && !c.nul && LoadBe24(d + 29) != c.lun->block_size()) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(off + 29));
      return false;
    }
  }

  // Segment descriptors (SPC-4 6.4.6).
  const size_t seg_end = cscd_end + seg_len;
  for (size_t off = cscd_end; off < seg_end;) {
    const uint8_t* d = p + off;
    if (d[0] != kSegmentBlockToBlock) {
      SetParameterListError(task, Asc::kUnsupportedSegmentDescriptorType,
                            static_cast<uint16_t>(off));
      return false;
    }
    if (plan->segment_count == kMaxSegmentDescriptors) {
      SetParameterListError(task, Asc::kTooManySegmentDescriptors, static_cast<uint16_t>(off));
      return false;
    }
    if (seg_end - off < kBlockToBlockLength || LoadBe16(d + 2) != kBlockToBlockLength - 4) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(off + 2));
      return false;
    }
    // Byte 1: DC (bit 1) and CAT (bit 0, no residue is possible between block devices of the
    // sizes checked below); bytes 8..9 reserved.
    if ((d[1] & 0xFC) != 0 || d[8] != 0 || d[9] != 0) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(off + ((d[1] & 0xFC) ? 1 : 8)));
      return false;
    }
    Segment& s = plan->segments[plan->segment_count++];
    s.dc = (d[1] & 0x02) != 0;
    s.src = LoadBe16(d + 4);
    s.dst = LoadBe16(d + 6);
    s.blocks = LoadBe16(d + 10);
    s.src_lba = LoadBe64(d + 12);
    s.dst_lba = LoadBe64(d + 20);
    off += kBlockToBlockLength;
  }
  return true;
}

class CopyOp final : public Pump {
 public:
  CopyOp(Task& task, Plan&& plan, CopyRecord& record)
      : task_(task), plan_(std::move(plan)), record_(record) {}

  // Allocates the bounce buffer and runs the copy; always completes the task.
  void Start(const Lun& addressed) {
    YieldThrough(addressed.config().post, task_.slot);
    buf_.reset(new (std::nothrow) uint8_t[kPieceBytes]);
    if (buf_ == nullptr) {
      SetCheckCondition(task_, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
      return Finish();
    }
    Run();
  }

 private:
  // Checks segment `seg_` before its first piece (SPC-4 6.4.6.5) and fills src_/dst_/bytes_;
  // false with COPY ABORTED in the task.
  bool BeginSegment() {
    const Segment& s = plan_.segments[seg_];
    for (const auto& [index, field] : {std::pair{s.src, 4}, std::pair{s.dst, 6}}) {
      if (index >= plan_.cscd_count || plan_.cscds[index].nul ||
          plan_.cscds[index].lun == nullptr) {
        SetCopyAborted(task_, Asc::kUnreachableCopyTarget, seg_, static_cast<uint16_t>(field));
        return false;
      }
    }
    src_ = plan_.cscds[s.src].lun.get();
    dst_ = plan_.cscds[s.dst].lun.get();
    bytes_ = uint64_t{s.blocks} * (s.dc ? dst_->block_size() : src_->block_size());
    if (bytes_ % src_->block_size() != 0 || bytes_ % dst_->block_size() != 0 ||
        bytes_ > kMaxSegmentBytes) {
      SetCopyAborted(task_, Asc::kNoAdditionalSenseInformation, seg_, 10);
      return false;
    }
    if (!LbaRangeOk(*src_, s.src_lba, bytes_ / src_->block_size())) {
      SetCopyAborted(task_, Asc::kNoAdditionalSenseInformation, seg_, 12);
      return false;
    }
    if (!LbaRangeOk(*dst_, s.dst_lba, bytes_ / dst_->block_size())) {
      SetCopyAborted(task_, Asc::kNoAdditionalSenseInformation, seg_, 20);
      return false;
    }
    // A copy target in a sanitize operation or sanitize failure mode (SBC-4 4.11) takes no I/O,
    // and a read-only or software write-protected destination (SBC-3 4.13, SPC-4 7.5.8) no
    // writes.
    for (const auto& [lun, field] : {std::pair{src_, 4}, std::pair{dst_, 6}}) {
      if (lun->sanitize().mode() != SanitizeState::Mode::kIdle) {
        SetCopyAborted(task_, kAscSanitizeInProgress, seg_, static_cast<uint16_t>(field));
        return false;
      }
    }
    if (dst_->read_only() || dst_->mode_pages().software_write_protect()) {
      SetCopyAborted(task_, Asc::kWriteProtected, seg_, 6);
      return false;
    }
    // The copy reads and writes through the initiator's own I_T nexus: a reservation that
    // would stop it reading the source or writing the destination stops the copy too.
    const uint8_t read16[16] = {kRead16};
    const uint8_t write16[16] = {kWrite16};
    if ((src_->reservations().active() && ReservationConflict(*src_, task_.nexus, read16)) ||
        (dst_->reservations().active() && ReservationConflict(*dst_, task_.nexus, write16))) {
      SetCopyAborted(task_, Asc::kNoAdditionalSenseInformation, seg_, 4);
      return false;
    }
    src_off_ = s.src_lba * src_->block_size();
    dst_off_ = s.dst_lba * dst_->block_size();
    // Overlapping ranges of one logical unit with the destination after the source are copied
    // from the end, so every block is read before the copy overwrites it.
    backward_ = src_ == dst_ && dst_off_ > src_off_ && dst_off_ < src_off_ + bytes_;
    done_ = 0;
    return true;
  }

  bool Issue() override {
    for (;;) {
      if (failed_ || seg_ == plan_.segment_count) return false;
      if (!in_segment_) {
        if (!BeginSegment()) {
          failed_ = true;
          return false;
        }
        in_segment_ = true;
      }
      if (done_ == bytes_) {
        in_segment_ = false;
        ++seg_;
        record_.segments_processed = static_cast<uint16_t>(seg_);
        continue;
      }
      const uint64_t remaining = bytes_ - done_;
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(remaining, kPieceBytes));
      const uint64_t at = backward_ ? remaining - n : done_;
      const backing::IoCompletion cb{OnDone, static_cast<Pump*>(this)};
      if (!writing_) {
        piece_ = n;
        src_->store().Read(task_.slot, src_off_ + at, std::span<uint8_t>(buf_.get(), n), cb);
      } else {
        // SBC-3 6.4.5: with WCE=0 no write may complete before its data is on the medium.
        dst_->store().Write(task_.slot, dst_off_ + at, std::span<const uint8_t>(buf_.get(), n),
                            !dst_->mode_pages().write_cache_enabled(), cb);
      }
      return true;
    }
  }

  bool Done(int err) override {
    if (err != 0) {
      // The store's error, as READ / WRITE would report it (SBC-3 4.7.3.6 for ENOSPC).
      Asc asc = writing_ ? Asc::kWriteError : Asc::kUnrecoveredReadError;
      if (err == EROFS) asc = Asc::kWriteProtected;
      if (err == ENOSPC) asc = Asc{0x27, 0x07};
      SetCopyAborted(task_, asc, seg_, writing_ ? 20 : 12);
      failed_ = true;
      return false;
    }
    if (writing_) {
      done_ += piece_;
      record_.transfer_bytes += piece_;
    }
    writing_ = !writing_;
    return true;
  }

  void Finish() override {
    Task& task = task_;
    CopyRecord& r = record_;
    if (task.status == ScsiStatus::kGood) {
      r.state = CopyRecord::State::kSucceeded;
    } else {
      r.state = CopyRecord::State::kFailed;
      r.sense_len = task.sense_len;
      std::memcpy(r.sense.data(), task.sense.data(), task.sense_len);
    }
    task.nexus->FinishCopy(r);
    delete this;
    task.Complete();
  }

  Task& task_;
  Plan plan_;
  CopyRecord& record_;  // in task_.nexus, which outlives the task
  std::unique_ptr<uint8_t[]> buf_;
  size_t seg_ = 0;  // segment being processed
  bool in_segment_ = false;
  bool failed_ = false;
  bool writing_ = false;  // the next store call writes the piece just read
  bool backward_ = false;
  Lun* src_ = nullptr;
  Lun* dst_ = nullptr;
  uint64_t src_off_ = 0;
  uint64_t dst_off_ = 0;
  uint64_t bytes_ = 0;  // of the current segment
  uint64_t done_ = 0;   // bytes of it written
  uint32_t piece_ = 0;
};

// RECEIVE COPY RESULTS, OPERATING PARAMETERS (SPC-4 6.18.4).
size_t OperatingParameters(const Lun& lun, uint8_t* d) {
  constexpr size_t kLen = 44 + sizeof(kImplementedDescriptors);
  std::memset(d, 0, kLen);
  StoreBe32(d, kLen - 4);                       // AVAILABLE DATA
  d[4] = 0x01;                                  // SNLID: LIST ID USAGE 11b supported
  StoreBe16(d + 8, kMaxCscdDescriptors);        // MAXIMUM CSCD DESCRIPTOR COUNT
  StoreBe16(d + 10, kMaxSegmentDescriptors);    // MAXIMUM SEGMENT DESCRIPTOR COUNT
  StoreBe32(d + 12, kMaxDescriptorListLength);  // MAXIMUM DESCRIPTOR LIST LENGTH
  StoreBe32(d + 16, kMaxSegmentBytes);          // MAXIMUM SEGMENT LENGTH
  // MAXIMUM INLINE DATA LENGTH, HELD DATA LIMIT, MAXIMUM STREAM DEVICE TRANSFER SIZE: 0.
  StoreBe16(d + 34, Nexus::kMaxCopies);             // TOTAL CONCURRENT COPIES
  d[36] = static_cast<uint8_t>(Nexus::kMaxCopies);  // MAXIMUM CONCURRENT COPIES
  // DATA SEGMENT GRANULARITY: log2 of the logical block length.
  d[37] = static_cast<uint8_t>(__builtin_ctz(lun.block_size()));
  d[43] = sizeof(kImplementedDescriptors);  // IMPLEMENTED DESCRIPTOR LIST LENGTH
  std::memcpy(d + 44, kImplementedDescriptors, sizeof(kImplementedDescriptors));
  return kLen;
}

// A third-party copy descriptor (SPC-4 7.8.17.1) whose body is a one-byte list length and the
// list, padded to a multiple of four bytes; returns its length.
size_t PutListDescriptor(uint8_t* t, uint16_t type, const uint8_t* list, size_t n) {
  const size_t len = (5 + n + 3) & ~size_t{3};
  StoreBe16(t, type);
  StoreBe16(t + 2, static_cast<uint16_t>(len - 4));
  t[4] = static_cast<uint8_t>(n);
  std::memcpy(t + 5, list, n);
  return len;
}

}  // namespace

Disposition ExtendedCopy(const Command& cmd) {
  // SPC-4 6.4 (THIRD-PARTY COPY OUT, service action 00h: EXTENDED COPY (LID1)).
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  if ((cdb[1] & 0x1F) != kSaExtendedCopyLid1) {
    SetInvalidFieldInCdb(task, 1, 4);
    return Disposition::kDone;
  }
  if ((cdb[1] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  if (RejectNonZeroCdbBytes(task, 2, 9) || RejectNonZeroCdbBytes(task, 14, 14)) {
    return Disposition::kDone;
  }
  const uint32_t plen = LoadBe32(cdb + 10);
  task.transfer_bytes = plen;
  // SPC-4 6.4.1: a zero PARAMETER LIST LENGTH copies nothing and is not an error.
  if (plen == 0) return Disposition::kDone;
  if (task.data_out_len < plen || task.buf == nullptr) {
    SetParameterListLengthError(task);
    return Disposition::kDone;
  }
  std::unique_ptr<Plan> plan(new (std::nothrow) Plan);
  if (plan == nullptr) {
    SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
    return Disposition::kDone;
  }
  if (!ParseParameterList(cmd, task.buf, plen, plan.get())) return Disposition::kDone;
  if (task.nexus == nullptr) {  // every transport task has one; a copy record needs it
    SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
    return Disposition::kDone;
  }

  // SPC-4 6.4.3.2: a list identifier in use by a copy in progress on this I_T nexus is refused;
  // held results of a finished one are replaced.
  const bool has_list_id = plan->usage != kListIdNone;
  if (has_list_id) {
    if (CopyRecord* old = task.nexus->FindCopy(plan->list_id)) {
      if (old->state == CopyRecord::State::kInProgress) {
        SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kOperationInProgress);
        return Disposition::kDone;
      }
      old->state = CopyRecord::State::kFree;
    }
  }
  CopyRecord* record = task.nexus->ClaimCopy();
  if (record == nullptr) {  // kMaxCopies copies in progress on this nexus
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInsufficientResources);
    return Disposition::kDone;
  }
  *record = CopyRecord{};
  record->state = CopyRecord::State::kInProgress;
  record->has_list_id = has_list_id;
  record->hold = plan->usage == kListIdHold;
  record->list_id = plan->list_id;

  auto* op = new (std::nothrow) CopyOp(task, std::move(*plan), *record);
  if (op == nullptr) {
    record->state = CopyRecord::State::kFree;
    SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
    return Disposition::kDone;
  }
  op->Start(*cmd.lun);
  return Disposition::kPending;
}

Disposition ReceiveCopyResults(const Command& cmd) {
  // SPC-4 6.18 (THIRD-PARTY COPY IN, LID1 service actions).
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const uint8_t sa = cdb[1] & 0x1F;
  const uint8_t list_id = cdb[2];
  const uint32_t alloc = LoadBe32(cdb + 10);
  if ((cdb[1] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  if (RejectNonZeroCdbBytes(task, 3, 9) || RejectNonZeroCdbBytes(task, 14, 14)) {
    return Disposition::kDone;
  }
  uint8_t data[kHeaderLength + 60 + kMaxSenseLength];
  switch (sa) {
    case kSaOperatingParameters: {
      if (list_id != 0) {  // SPC-4 6.18.4: LIST IDENTIFIER is reserved here
        SetInvalidFieldInCdb(task, 2);
        return Disposition::kDone;
      }
      ReturnData(task, data, OperatingParameters(*cmd.lun, data), alloc);
      return Disposition::kDone;
    }
    case kSaCopyStatusLid1:
    case kSaFailedSegmentDetailsLid1:
      break;
    default:
      SetInvalidFieldInCdb(task, 1, 4);
      return Disposition::kDone;
  }
  CopyRecord* r = task.nexus != nullptr ? task.nexus->FindCopy(list_id) : nullptr;
  if (r == nullptr) {  // no copy with that list identifier in progress or held on this nexus
    SetInvalidFieldInCdb(task, 2);
    return Disposition::kDone;
  }
  const bool finished = r->state != CopyRecord::State::kInProgress;
  if (sa == kSaCopyStatusLid1) {
    // SPC-4 6.18.3: COPY MANAGER STATUS, SEGMENTS PROCESSED, TRANSFER COUNT in bytes.
    std::memset(data, 0, 12);
    StoreBe32(data, 8);
    data[4] = r->state == CopyRecord::State::kInProgress  ? kCopyInProgress
              : r->state == CopyRecord::State::kSucceeded ? kCopySucceeded
                                                          : kCopyFailed;
    StoreBe16(data + 5, r->segments_processed);
    data[7] = 0x00;  // TRANSFER COUNT UNITS: bytes
    StoreBe32(data + 8, r->transfer_bytes);
    ReturnData(task, data, 12, alloc);
    // The status of a successful copy has nothing more to report; a failed one keeps its sense
    // data for FAILED SEGMENT DETAILS.
    if (r->state == CopyRecord::State::kSucceeded) r->state = CopyRecord::State::kFree;
    return Disposition::kDone;
  }
  // SPC-4 6.18.5 FAILED SEGMENT DETAILS: only a copy that ended in CHECK CONDITION has details.
  if (!finished || r->state != CopyRecord::State::kFailed) {
    std::memset(data, 0, 4);  // AVAILABLE DATA 0
    ReturnData(task, data, 4, alloc);
    return Disposition::kDone;
  }
  const size_t len = 60 + r->sense_len;
  std::memset(data, 0, 60);
  StoreBe32(data, static_cast<uint32_t>(len - 4));
  data[56] = static_cast<uint8_t>(ScsiStatus::kCheckCondition);  // EXTENDED COPY COMPLETION STATUS
  StoreBe16(data + 58, r->sense_len);
  std::memcpy(data + 60, r->sense.data(), r->sense_len);
  ReturnData(task, data, len, alloc);
  r->state = CopyRecord::State::kFree;
  return Disposition::kDone;
}

size_t VpdThirdPartyCopy(const Command& cmd, uint8_t* d) {
  // SPC-4 7.8.17: the descriptors a copy manager that implements EXTENDED COPY (LID1) reports.
  std::memset(d, 0, kThirdPartyCopyVpdMax);
  d[1] = 0x8F;
  size_t pos = 4;
  // Supported Commands (0001h): THIRD-PARTY COPY OUT / IN with their service actions.
  constexpr uint8_t kCommands[] = {kThirdPartyCopyOut,
                                   1,
                                   kSaExtendedCopyLid1,
                                   kThirdPartyCopyIn,
                                   3,
                                   kSaCopyStatusLid1,
                                   kSaOperatingParameters,
                                   kSaFailedSegmentDetailsLid1};
  pos += PutListDescriptor(d + pos, 0x0001, kCommands, sizeof(kCommands));
  // Parameter Data (0004h).
  {
    uint8_t* t = d + pos;
    StoreBe16(t, 0x0004);
    StoreBe16(t + 2, 0x001C);
    StoreBe16(t + 8, kMaxCscdDescriptors);
    StoreBe16(t + 10, kMaxSegmentDescriptors);
    StoreBe32(t + 12, kMaxDescriptorListLength);
    // MAXIMUM INLINE DATA LENGTH: 0.
    pos += 32;
  }
  // Supported Descriptors (0008h).
  pos +=
      PutListDescriptor(d + pos, 0x0008, kImplementedDescriptors, sizeof(kImplementedDescriptors));
  // Supported CSCD Descriptor IDs (000Ch): none (no CSCD descriptor ID addressing).
  {
    uint8_t* t = d + pos;
    StoreBe16(t, 0x000C);
    StoreBe16(t + 2, 0x0004);
    pos += 8;
  }
  // General Copy Operations (8001h).
  {
    uint8_t* t = d + pos;
    StoreBe16(t, 0x8001);
    StoreBe16(t + 2, 0x001C);
    StoreBe32(t + 4, Nexus::kMaxCopies);  // TOTAL CONCURRENT COPIES
    StoreBe32(t + 8, Nexus::kMaxCopies);  // MAXIMUM IDENTIFIED CONCURRENT COPIES
    StoreBe32(t + 12, kMaxSegmentBytes);  // MAXIMUM SEGMENT LENGTH
    t[16] = static_cast<uint8_t>(__builtin_ctz(cmd.lun->block_size()));  // DATA SEGMENT GRANULARITY
    pos += 32;
  }
  StoreBe16(d + 2, static_cast<uint16_t>(pos - 4));
  return pos;
}

}  // namespace internal
}  // namespace iscsigw::scsi
