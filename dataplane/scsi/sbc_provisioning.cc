// SBC-3 logical block provisioning and bulk writes: UNMAP, GET LBA STATUS, WRITE SAME(10)/(16),
// READ DEFECT DATA (SANITIZE is in sbc_sanitize.cc). The LUN is thin provisioned (LBPME=1, LBPRZ=1)
// when its store says so (BackingStore::thin_provisioned); unmapped blocks then read as zeros.
#include <algorithm>
#include <cstring>
#include <new>

#include "base/endian.h"
#include "dataplane/backing/zero_buffer.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi::internal {
namespace {

void CompleteWithStoreResult(void* ctx, int err) {
  Task& task = *static_cast<Task*>(ctx);
  if (err != 0) SetStoreError(task, err, true);
  task.Complete();
}

// Unmaps the validated UNMAP block descriptors in task.buf one after another.
class UnmapOp {
 public:
  UnmapOp(Task& task, Lun& lun, const uint8_t* descs, size_t count)
      : task_(task), lun_(lun), descs_(descs), count_(count) {}

  void Next() {
    while (next_ < count_) {
      const uint8_t* d = descs_ + 16 * next_++;
      const uint64_t lba = LoadBe64(d);
      const uint32_t blocks = LoadBe32(d + 8);
      if (blocks == 0) continue;
      issuing_ = true;
      done_inline_ = false;
      lun_.store().Unmap(task_.slot, lba * lun_.block_size(), uint64_t{blocks} * lun_.block_size(),
                         backing::IoCompletion{OnDone, this});
      issuing_ = false;
      if (!done_inline_) return;  // OnDone continues
      if (err_ != 0) return Finish();
    }
    Finish();
  }

 private:
  static void OnDone(void* ctx, int err) {
    auto* self = static_cast<UnmapOp*>(ctx);
    self->err_ = err;
    if (self->issuing_) {
      self->done_inline_ = true;
      return;
    }
    if (err != 0) return self->Finish();
    self->Next();
  }
  void Finish() {
    Task& task = task_;
    if (err_ != 0) SetStoreError(task, err_, true);
    delete this;
    task.Complete();
  }

  Task& task_;
  Lun& lun_;
  const uint8_t* descs_;
  const size_t count_;
  size_t next_ = 0;
  bool issuing_ = false;
  bool done_inline_ = false;
  int err_ = 0;
};

// GET LBA STATUS: asks the store for consecutive extents and builds the descriptors in task.buf.
class LbaStatusOp {
 public:
  LbaStatusOp(Task& task, Lun& lun, uint64_t lba, size_t max_descs, uint32_t alloc)
      : task_(task), lun_(lun), lba_(lba), max_descs_(max_descs), alloc_(alloc) {}

  void Next() {
    while (count_ < max_descs_ && lba_ < lun_.num_blocks()) {
      issuing_ = true;
      done_inline_ = false;
      const uint64_t bs = lun_.block_size();
      // EXTENT LENGTH is a 32-bit count of blocks.
      const uint64_t max_blocks = std::min<uint64_t>(lun_.num_blocks() - lba_, 0xFFFFFFFFull);
      lun_.store().GetProvisioning(task_.slot, lba_ * bs, max_blocks * bs, &extent_,
                                   backing::IoCompletion{OnDone, this});
      issuing_ = false;
      if (!done_inline_) return;
      if (!Record()) return Finish();
    }
    Finish();
  }

 private:
  static void OnDone(void* ctx, int err) {
    auto* self = static_cast<LbaStatusOp*>(ctx);
    self->err_ = err;
    if (self->issuing_) {
      self->done_inline_ = true;
      return;
    }
    if (!self->Record()) return self->Finish();
    self->Next();
  }
  // Appends the descriptor of extent_; false on a store error.
  bool Record() {
    if (err_ != 0) return false;
    const uint64_t bs = lun_.block_size();
    const uint64_t blocks = std::max<uint64_t>(1, extent_.len / bs);
    uint8_t* d = task_.buf + 8 + 16 * count_;
    // SBC-3 5.5.2, table 24: LBA, EXTENT LENGTH, PROVISIONING STATUS (0 mapped, 1 deallocated).
    std::memset(d, 0, 16);
    StoreBe64(d, lba_);
    StoreBe32(d + 8, static_cast<uint32_t>(blocks));
    d[12] = extent_.mapped ? 0x0 : 0x1;
    ++count_;
    lba_ += blocks;
    return true;
  }
  void Finish() {
    Task& task = task_;
    if (err_ != 0) {
      SetStoreError(task, err_, false);
    } else {
      // PARAMETER DATA LENGTH: the bytes that follow it (SBC-3 5.5.2).
      StoreBe32(task.buf, static_cast<uint32_t>(4 + 16 * count_));
      std::memset(task.buf + 4, 0, 4);
      const uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(8 + 16 * count_), alloc_);
      task.SetDataInFromBuf(n);
    }
    delete this;
    task.Complete();
  }

  Task& task_;
  Lun& lun_;
  uint64_t lba_;
  const size_t max_descs_;
  const uint32_t alloc_;
  backing::BackingStore::Extent extent_;
  size_t count_ = 0;
  bool issuing_ = false;
  bool done_inline_ = false;
  int err_ = 0;
};

Disposition NoMemory(Task& task) {
  SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
  return Disposition::kDone;
}

// Fills [lba, lba+blocks) with copies of the block at `block` (bs bytes), or zeros when block is
// null.
Disposition WriteRepeated(const Command& cmd, uint64_t lba, uint64_t blocks, const uint8_t* block) {
  Lun& lun = *cmd.lun;
  const uint64_t bs = lun.block_size();
  const uint64_t bytes = blocks * bs;
  if (block == nullptr) {
    StartFill(cmd, lba * bs, bytes,
              std::span<const uint8_t>(backing::ZeroBuffer(), backing::kZeroBufferSize), nullptr);
    return Disposition::kPending;
  }
  const uint64_t src_len = std::min<uint64_t>(bytes, backing::kZeroBufferSize);
  auto* src = new (std::nothrow) uint8_t[static_cast<size_t>(src_len)];
  if (src == nullptr) return NoMemory(cmd.task);
  for (uint64_t off = 0; off < src_len; off += bs) std::memcpy(src + off, block, bs);
  StartFill(cmd, lba * bs, bytes, std::span<const uint8_t>(src, static_cast<size_t>(src_len)), src);
  return Disposition::kPending;
}

bool AllZero(const uint8_t* p, size_t n) {
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

// SBC-3 5.45 / 5.46.
Disposition WriteSame(const Command& cmd, uint64_t lba, uint64_t blocks, uint16_t length_byte,
                      bool ndob) {
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t flags = task.cdb[1];
  const bool unmap = (flags & 0x08) != 0;
  if ((flags & 0xE0) != 0) {  // WRPROTECT: no protection information
    SetInvalidFieldInCdb(task, 1, 7);
    return Disposition::kDone;
  }
  if ((flags & 0x10) != 0) {  // ANCHOR: ANC_SUP=0 in the Logical Block Provisioning VPD page
    SetInvalidFieldInCdb(task, 1, 4);
    return Disposition::kDone;
  }
  if ((flags & 0x06) != 0) {  // PBDATA/LBDATA (obsolete): not supported
    SetInvalidFieldInCdb(task, 1, (flags & 0x04) != 0 ? 2 : 1);
    return Disposition::kDone;
  }
  if (unmap && !lun.store().thin_provisioned()) {  // LBPWS=LBPWS10=0
    SetInvalidFieldInCdb(task, 1, 3);
    return Disposition::kDone;
  }
  if (!CheckLbaRange(cmd, lba, blocks)) return Disposition::kDone;
  // SBC-3 5.45 with WSNZ=0 in the Block Limits VPD page: NUMBER OF LOGICAL BLOCKS zero asks for
  // every block from the LBA to the last one, within the MAXIMUM WRITE SAME LENGTH like any other
  // count (the LBA itself is inside the medium: CheckLbaRange).
  if (blocks == 0) blocks = lun.num_blocks() - lba;
  if (blocks * lun.block_size() > kMaxWriteSameBytes) {  // MAXIMUM WRITE SAME LENGTH
    SetInvalidFieldInCdb(task, length_byte);
    return Disposition::kDone;
  }
  // SBC-3 4.13: a write-protected LUN answers DATA PROTECT whatever data came with the command.
  if (!CheckWritable(cmd)) return Disposition::kDone;
  // The Data-Out Buffer holds exactly one logical block (none with NDOB).
  const uint32_t want = ndob ? 0 : lun.block_size();
  if (task.expected_length != want || task.data_out_len != want) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
    return Disposition::kDone;
  }
  task.transfer_bytes = want;
  const bool zeros = ndob || AllZero(task.buf, want);
  if (unmap && zeros) {
    // SBC-3 4.7.3.3: deallocate; LBPRZ=1 makes the range read back as the zeros asked for.
    lun.store().Unmap(task.slot, lba * lun.block_size(), blocks * lun.block_size(),
                      backing::IoCompletion{CompleteWithStoreResult, &task});
    return Disposition::kPending;
  }
  // UNMAP=0, or data that an unmapped block would not read back as: write it.
  return WriteRepeated(cmd, lba, blocks, zeros ? nullptr : task.buf);
}

}  // namespace

Disposition WriteSame10(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  if ((cdb[6] & 0xE0) != 0) {
    SetInvalidFieldInCdb(cmd.task, 6, 7);
    return Disposition::kDone;
  }
  return WriteSame(cmd, LoadBe32(cdb + 2), LoadBe16(cdb + 7), 7, false);
}

Disposition WriteSame16(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  if ((cdb[14] & 0xE0) != 0) {
    SetInvalidFieldInCdb(cmd.task, 14, 7);
    return Disposition::kDone;
  }
  return WriteSame(cmd, LoadBe64(cdb + 2), LoadBe32(cdb + 10), 10, (cdb[1] & 0x01) != 0);
}

Disposition Unmap(const Command& cmd) {
  // SBC-3 5.28.
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  if (!lun.store().thin_provisioned()) {  // LBPU=0: the command is not supported on this LUN
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
    return Disposition::kDone;
  }
  if ((cdb[1] & 0x01) != 0) {  // ANCHOR with ANC_SUP=0
    SetInvalidFieldInCdb(task, 1, 0);
    return Disposition::kDone;
  }
  if ((cdb[1] & 0xFE) != 0 || cdb[2] != 0 || cdb[3] != 0 || cdb[4] != 0 || cdb[5] != 0 ||
      (cdb[6] & 0xE0) != 0) {
    const uint16_t byte = (cdb[1] & 0xFE) != 0 ? 1 : (cdb[6] & 0xE0) != 0 ? 6 : 2;
    SetInvalidFieldInCdb(task, byte);
    return Disposition::kDone;
  }
  const uint16_t plen = LoadBe16(cdb + 7);
  task.transfer_bytes = plen;
  if (plen == 0) return Disposition::kDone;  // no parameter data: nothing to unmap
  if (plen < 8 || task.data_out_len < plen) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
    return Disposition::kDone;
  }
  if (!CheckWritable(cmd)) return Disposition::kDone;
  const uint8_t* p = task.buf;
  // UNMAP BLOCK DESCRIPTOR DATA LENGTH: a trailing partial descriptor is ignored, and so are
  // descriptors beyond the parameter list.
  const size_t bddl = std::min<size_t>(LoadBe16(p + 2), plen - 8);
  const size_t count = bddl / 16;
  if (count > kMaxUnmapDescriptors) {
    SetInvalidFieldInParameterList(task, 2);
    return Disposition::kDone;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* d = p + 8 + 16 * i;
    const uint64_t lba = LoadBe64(d);
    const uint32_t blocks = LoadBe32(d + 8);
    // A descriptor of zero blocks unmaps nothing and is not an error, wherever it points.
    if (blocks != 0 && !CheckLbaRange(cmd, lba, blocks)) return Disposition::kDone;
    total += blocks;
  }
  if (total > kMaxUnmapBlocks) {  // MAXIMUM UNMAP LBA COUNT
    SetInvalidFieldInParameterList(task, 16);
    return Disposition::kDone;
  }
  auto* op = new (std::nothrow) UnmapOp(task, lun, p + 8, count);
  if (op == nullptr) return NoMemory(task);
  op->Next();
  return Disposition::kPending;
}

Disposition GetLbaStatus(const Command& cmd) {
  // SBC-3 5.5 (SERVICE ACTION IN(16), service action 12h).
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  if (cdb[14] != 0) {
    SetInvalidFieldInCdb(task, 14);
    return Disposition::kDone;
  }
  const uint64_t lba = LoadBe64(cdb + 2);
  const uint32_t alloc = LoadBe32(cdb + 10);
  if (lba >= lun.num_blocks()) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
    return Disposition::kDone;
  }
  if (alloc == 0) return Disposition::kDone;
  // At least one descriptor is built (a short allocation length truncates it), at most as many as
  // the allocation length or the buffer holds, and no more than 64.
  const size_t room = std::min<size_t>(alloc, task.buf_cap);
  if (task.buf == nullptr || task.buf_cap < 24) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
    return Disposition::kDone;
  }
  const size_t max_descs = std::clamp<size_t>(room < 8 ? 0 : (room - 8) / 16, 1,
                                              std::min<size_t>(64, (task.buf_cap - 8) / 16));
  auto* op = new (std::nothrow) LbaStatusOp(task, lun, lba, max_descs, alloc);
  if (op == nullptr) return NoMemory(task);
  op->Next();
  return Disposition::kPending;
}

Disposition ReadDefectData(const Command& cmd, bool twelve) {
  // SBC-3 5.17 / 5.18: the logical unit has no defect list; a requested list is returned valid
  // and empty (PLISTV/GLISTV set when requested, DEFECT LIST LENGTH 0) in the requested format.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const uint8_t flags = twelve ? cdb[1] : cdb[2];
  const uint8_t format = flags & 0x07;
  if ((flags & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, twelve ? 1 : 2, 7);
    return Disposition::kDone;
  }
  // Formats 001b and 010b are reserved (SBC-3 table 118).
  if (format == 1 || format == 2) {
    SetInvalidFieldInCdb(task, twelve ? 1 : 2, 2);
    return Disposition::kDone;
  }
  const uint8_t valid = flags & 0x18;  // PLISTV/GLISTV mirror REQ_PLIST/REQ_GLIST
  uint8_t data[8] = {};
  size_t len;
  uint32_t alloc;
  if (twelve) {
    alloc = LoadBe32(cdb + 6);
    data[1] = static_cast<uint8_t>(valid | format);
    len = 8;  // GENERATION CODE 0, DEFECT LIST LENGTH 0
  } else {
    alloc = LoadBe16(cdb + 7);
    data[1] = static_cast<uint8_t>(valid | format);
    len = 4;
  }
  ReturnData(task, data, len, alloc);
  return Disposition::kDone;
}

Disposition ReadDefectData10(const Command& cmd) { return ReadDefectData(cmd, false); }
Disposition ReadDefectData12(const Command& cmd) { return ReadDefectData(cmd, true); }

}  // namespace iscsigw::scsi::internal
