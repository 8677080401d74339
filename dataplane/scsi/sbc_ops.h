// Internal to the SCSI engine: limits and shared helpers of the SBC-3 commands beyond READ/WRITE
// (sbc_provisioning.cc, sbc_verify.cc): range checks, and the asynchronous multi-step operations
// they run on the backing store (fill a range with a pattern, read a range piece by piece).
//
// These commands are rare, so an operation may allocate its state and a scratch buffer; the
// READ/WRITE fast path never goes through here. Every operation runs on the task's reactor thread
// (store completions come back to the slot that issued them) and ends with exactly one
// task.Complete().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/scsi/handlers.h"

namespace iscsigw::scsi::internal {

// Block Limits VPD (SBC-3 6.5.3) values of these commands.
inline constexpr uint32_t kMaxCompareAndWriteBlocks = 255;  // MAXIMUM COMPARE AND WRITE LENGTH
inline constexpr uint64_t kMaxWriteSameBytes = kMaxTransferBytes;  // MAXIMUM WRITE SAME LENGTH
inline constexpr uint32_t kMaxUnmapBlocks = 1u << 20;              // MAXIMUM UNMAP LBA COUNT
inline constexpr uint32_t kMaxUnmapDescriptors = 256;  // MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT

// SBC-3 4.5: [lba, lba+blocks) inside the medium, and lba itself addressable, without overflow.
inline bool LbaRangeOk(const Lun& lun, uint64_t lba, uint64_t blocks) {
  const uint64_t capacity = lun.num_blocks();
  return lba < capacity && blocks <= capacity - lba;
}

// LOGICAL BLOCK ADDRESS OUT OF RANGE unless LbaRangeOk; false when the task holds the error.
bool CheckLbaRange(const Command& cmd, uint64_t lba, uint64_t blocks);
// DATA PROTECT / WRITE PROTECTED on a read-only LUN or one whose control mode page has SWP=1
// (SBC-3 4.13, SPC-4 7.5.8); false when the task holds it.
bool CheckWritable(const Command& cmd);
// Maps a store errno to CHECK CONDITION: EROFS -> WRITE PROTECTED, ENOSPC -> SPACE ALLOCATION
// FAILED WRITE PROTECT (SBC-3 4.7.3.6), anything else -> MEDIUM ERROR with `medium_asc`.
void SetStoreError(Task& task, int err, bool write);

// Writes [offset, offset+len) of `lun`'s store from a source that repeats every `src.size()` bytes
// (src.size() a multiple of the block size); owns `owned` (may be null) until done. Completes the
// task: GOOD, or the store error.
void StartFill(const Command& cmd, uint64_t offset, uint64_t len, std::span<const uint8_t> src,
               uint8_t* owned);

// Reads [offset, offset+len) piece by piece and hands each piece to visit(ctx, data, n, pos),
// pos being the piece's offset from `offset`. visit returns false to stop; `stop` then finishes
// the task (it sets the status), otherwise the task completes GOOD after the last piece.
struct RangeVisitor {
  bool (*visit)(void* ctx, const uint8_t* data, size_t n, uint64_t pos) = nullptr;
  void (*stop)(void* ctx, Task& task) = nullptr;
  void (*release)(void* ctx) = nullptr;  // frees ctx at the end (may be null)
  void* ctx = nullptr;
};
void StartReadRange(const Command& cmd, uint64_t offset, uint64_t len, RangeVisitor visitor);

// Runs store calls one after another without growing the stack when they complete inline
// (RamStore, NullStore): a completion that arrives during Issue() only records its result and the
// loop in Run() goes on; one that arrives later resumes the loop itself. After kYieldPieces inline
// completions in a row the loop goes on in a later turn of the reactor (LunConfig::post), so one
// command never holds a reactor for more than a few milliseconds. Used by SANITIZE
// (sbc_sanitize.cc) and the copy manager (xcopy.cc) too.
class Pump {
 public:
  static constexpr unsigned kYieldPieces = 8;

  // Lets Run() yield through `post` (may be empty) on reactor `slot`; `post` outlives the
  // operation (it lives in the LUN's config).
  void YieldThrough(const LunConfig::PostFn& post, unsigned slot) {
    post_ = &post;
    slot_ = slot;
  }

 protected:
  virtual ~Pump() = default;
  // Starts the next store call with completion OnDone(this); returns false when there is none.
  virtual bool Issue() = 0;
  // Handles a store result; returns false to stop.
  virtual bool Done(int err) = 0;
  // Ends the operation (sets nothing else on the task): completes it and deletes this.
  virtual void Finish() = 0;

  void Run() {
    for (;;) {
      issuing_ = true;
      inline_done_ = false;
      if (!Issue()) {
        issuing_ = false;
        return Finish();
      }
      issuing_ = false;
      if (!inline_done_) return;  // OnDone resumes
      if (!Done(err_)) return Finish();
      if (post_ != nullptr && *post_ && ++streak_ == kYieldPieces) {
        streak_ = 0;
        return (*post_)(slot_, [this] { Run(); });
      }
    }
  }
  static void OnDone(void* ctx, int err) {
    auto* self = static_cast<Pump*>(ctx);
    self->err_ = err;
    if (self->issuing_) {
      self->inline_done_ = true;
      return;
    }
    self->streak_ = 0;  // the store gave the reactor back already
    if (!self->Done(err)) return self->Finish();
    self->Run();
  }

 private:
  bool issuing_ = false;
  bool inline_done_ = false;
  int err_ = 0;
  const LunConfig::PostFn* post_ = nullptr;
  unsigned slot_ = 0;
  unsigned streak_ = 0;  // inline completions since the reactor last ran something else
};

// Offset of the first byte where a and b differ, or n when they are equal.
size_t FirstDifference(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace iscsigw::scsi::internal
