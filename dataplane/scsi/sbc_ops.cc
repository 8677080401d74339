// Shared helpers of the SBC-3 commands beyond READ/WRITE; see sbc_ops.h.
#include "dataplane/scsi/sbc_ops.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include "dataplane/backing/backing_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi::internal {
namespace {

constexpr Asc kSpaceAllocationFailedWriteProtect{0x27, 0x07};  // SBC-3 4.7.3.6
// SPC-4 table 52: a store that is retrying to reach its medium (an rbd image whose cluster is not
// reachable yet) reports the unit as becoming ready.
constexpr Asc kLogicalUnitBecomingReady{0x04, 0x01};
constexpr Asc kLogicalUnitNotReadyManualIntervention{0x04, 0x03};
// Largest piece one store call of these operations moves.
constexpr uint64_t kPieceBytes = uint64_t{1} << 20;

class FillOp final : public Pump {
 public:
  // fua: each write reaches stable media before it completes (the write cache is off, WCE=0).
  FillOp(Task& task, backing::BackingStore& store, uint64_t offset, uint64_t len,
         std::span<const uint8_t> src, uint8_t* owned, bool fua)
      : task_(task),
        store_(store),
        pos_(offset),
        end_(offset + len),
        src_(src),
        owned_(owned),
        fua_(fua) {}
  void Start() { Run(); }

 private:
  bool Issue() override {
    if (pos_ >= end_) return false;
    const uint64_t n = std::min<uint64_t>(end_ - pos_, src_.size());
    store_.Write(task_.slot, pos_, src_.first(static_cast<size_t>(n)), fua_,
                 backing::IoCompletion{OnDone, static_cast<Pump*>(this)});
    pos_ += n;
    return true;
  }
  bool Done(int err) override {
    if (err == 0) return true;
    SetStoreError(task_, err, true);
    return false;
  }
  void Finish() override {
    Task& task = task_;
    delete this;
    task.Complete();
  }
  ~FillOp() override { delete[] owned_; }

  Task& task_;
  backing::BackingStore& store_;
  uint64_t pos_;
  const uint64_t end_;
  const std::span<const uint8_t> src_;
  uint8_t* const owned_;
  const bool fua_;
};

class ReadRangeOp final : public Pump {
 public:
  ReadRangeOp(Task& task, backing::BackingStore& store, uint64_t offset, uint64_t len,
              RangeVisitor visitor)
      : task_(task), store_(store), start_(offset), pos_(offset), end_(offset + len), v_(visitor) {}
  void Start() { Run(); }

 private:
  bool Issue() override {
    for (;;) {
      if (stopped_ || pos_ >= end_) return false;
      const uint64_t n = std::min<uint64_t>(end_ - pos_, kPieceBytes);
      // Zero copy where the store can map its memory; otherwise read into the scratch buffer.
      std::array<backing::Segment, 8> segs;
      const size_t count = store_.MapRead(pos_, n, segs);
      if (count == 0) break;
      uint64_t at = pos_;
      for (size_t i = 0; i < count && !stopped_; ++i) {
        if (!v_.visit(v_.ctx, segs[i].data, segs[i].len, at - start_)) stopped_ = true;
        at += segs[i].len;
      }
      pos_ += n;
    }
    const uint64_t n = std::min<uint64_t>(end_ - pos_, kPieceBytes);
    if (scratch_ == nullptr) {
      scratch_.reset(new (std::nothrow) uint8_t[static_cast<size_t>(kPieceBytes)]);
      if (scratch_ == nullptr) {
        SetCheckCondition(task_, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
        stopped_ = true;
        return false;
      }
    }
    piece_ = static_cast<size_t>(n);
    store_.Read(task_.slot, pos_, std::span<uint8_t>(scratch_.get(), piece_),
                backing::IoCompletion{OnDone, static_cast<Pump*>(this)});
    return true;
  }
  bool Done(int err) override {
    if (err != 0) {
      SetStoreError(task_, err, false);
      stopped_ = true;
      return false;
    }
    if (!v_.visit(v_.ctx, scratch_.get(), piece_, pos_ - start_)) {
      stopped_ = true;
      visitor_stopped_ = true;
      return false;
    }
    pos_ += piece_;
    return true;
  }
  void Finish() override {
    Task& task = task_;
    // A stop decided inside Issue() (zero-copy path) is the visitor's too, unless an error is set.
    if ((visitor_stopped_ || stopped_) && task.status == ScsiStatus::kGood) v_.stop(v_.ctx, task);
    if (v_.release != nullptr) v_.release(v_.ctx);
    delete this;
    task.Complete();
  }

  Task& task_;
  backing::BackingStore& store_;
  const uint64_t start_;
  uint64_t pos_;
  const uint64_t end_;
  const RangeVisitor v_;
  std::unique_ptr<uint8_t[]> scratch_;
  size_t piece_ = 0;
  bool stopped_ = false;
  bool visitor_stopped_ = false;
};

}  // namespace

bool CheckLbaRange(const Command& cmd, uint64_t lba, uint64_t blocks) {
  if (LbaRangeOk(*cmd.lun, lba, blocks)) return true;
  SetCheckCondition(cmd.task, SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  return false;
}

bool CheckWritable(const Command& cmd) {
  if (!cmd.lun->read_only() && !cmd.lun->mode_pages().software_write_protect()) return true;
  SetCheckCondition(cmd.task, SenseKey::kDataProtect, Asc::kWriteProtected);
  return false;
}

void SetStoreError(Task& task, int err, bool write) {
  // Not failures of the medium, and the command says it failed: no write error is noted.
  if (err == ENOTCONN || err == ETIMEDOUT) {
    // Not connected yet, or the storage did not answer in time (an rbd OSD past
    // rados_osd_op_timeout): NOT READY, BECOMING READY, which initiators retry (Linux: the
    // command is retried rather than failed), where MEDIUM ERROR would fail it for good.
    SetCheckCondition(task, SenseKey::kNotReady, kLogicalUnitBecomingReady);
    return;
  }
  if (err == ESHUTDOWN) {
    // Fenced: the storage refuses this gateway (an rbd client blocklisted by the cluster) until
    // an operator acts. Not retried by initiators; a multipath initiator moves to another path.
    SetCheckCondition(task, SenseKey::kNotReady, kLogicalUnitNotReadyManualIntervention);
    return;
  }
  if (write && task.unit != nullptr) task.unit->NoteWriteError();
  if (err == EROFS) {
    SetCheckCondition(task, SenseKey::kDataProtect, Asc::kWriteProtected);
  } else if (err == ENOSPC || err == EDQUOT || (err == ENOMEM && write)) {
    // EDQUOT: a quota ran out (a Ceph pool's max_bytes), which the initiator sees as no space.
    SetCheckCondition(task, SenseKey::kDataProtect, kSpaceAllocationFailedWriteProtect);
  } else {
    SetCheckCondition(task, SenseKey::kMediumError,
                      write ? Asc::kWriteError : Asc::kUnrecoveredReadError);
  }
}

void StartFill(const Command& cmd, uint64_t offset, uint64_t len, std::span<const uint8_t> src,
               uint8_t* owned) {
  // SBC-3 6.4.5: with WCE=0 no write may complete before its data is on the medium.
  const bool fua = !cmd.lun->mode_pages().write_cache_enabled();
  auto* op = new (std::nothrow) FillOp(cmd.task, cmd.lun->store(), offset, len, src, owned, fua);
  if (op == nullptr) {
    delete[] owned;
    SetCheckCondition(cmd.task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
    return cmd.task.Complete();
  }
  op->YieldThrough(cmd.lun->config().post, cmd.task.slot);
  op->Start();
}

void StartReadRange(const Command& cmd, uint64_t offset, uint64_t len, RangeVisitor visitor) {
  auto* op = new (std::nothrow) ReadRangeOp(cmd.task, cmd.lun->store(), offset, len, visitor);
  if (op == nullptr) {
    if (visitor.release != nullptr) visitor.release(visitor.ctx);
    SetCheckCondition(cmd.task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
    return cmd.task.Complete();
  }
  op->YieldThrough(cmd.lun->config().post, cmd.task.slot);
  op->Start();
}

size_t FirstDifference(const uint8_t* a, const uint8_t* b, size_t n) {
  if (std::memcmp(a, b, n) == 0) return n;
  size_t i = 0;
  while (a[i] == b[i]) ++i;
  return i;
}

}  // namespace iscsigw::scsi::internal
