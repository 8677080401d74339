// SBC-3 comparing and read-modify-write commands: COMPARE AND WRITE, ORWRITE(16), VERIFY(10/12/16),
// WRITE AND VERIFY(10/12/16), PRE-FETCH(10/16).
//
// COMPARE AND WRITE runs as one BackingStore::CompareAndWrite and ORWRITE as one
// ReadModifyWrite, which the store makes atomic against every other writer of the LUN on any
// reactor (backing/write_gate.h), or on its cluster (rbd); ordinary READ/WRITE never take a lock
// for it.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "base/endian.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi::internal {
namespace {

Disposition NoMemory(Task& task) {
  SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
  return Disposition::kDone;
}

// The Data-Out of a write-type command holds exactly `bytes`; false (with 0Eh/03h, as for WRITE)
// otherwise.
bool HaveDataOut(Task& task, uint64_t bytes) {
  if (task.data_out_len == bytes && task.buf != nullptr && task.buf_cap >= bytes) return true;
  SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
  return false;
}

// --- COMPARE AND WRITE / ORWRITE --------------------------------------------------------------

struct RmwOp {
  Task* task;
  uint32_t len;  // bytes compared / written
  bool orwrite;  // ORWRITE: OR the Data-Out into the current data
  std::unique_ptr<uint8_t[]> scratch;
  backing::BackingStore::CompareWriteOp caw;  // COMPARE AND WRITE

  static std::span<const uint8_t> Modify(void* ctx, std::span<uint8_t> current) {
    auto* op = static_cast<RmwOp*>(ctx);
    uint8_t* buf = op->task->buf;
    for (uint32_t i = 0; i < op->len; ++i) current[i] |= buf[i];
    return current;
  }
  static void Done(void* ctx, int err) {
    auto* op = static_cast<RmwOp*>(ctx);
    Task& task = *op->task;
    if (err != 0) {
      SetStoreError(task, err, true);
    } else if (!op->orwrite && op->caw.miscompare != op->caw.kNoMiscompare) {
      // SBC-3 5.2: MISCOMPARE / MISCOMPARE DURING VERIFY OPERATION, INFORMATION = offset of the
      // first byte that did not match.
      SetCheckConditionWithInfo(task, SenseKey::kMiscompare, Asc::kMiscompareDuringVerify,
                                op->caw.miscompare);
    }
    delete op;
    task.Complete();
  }
};

Disposition StartRmw(const Command& cmd, uint64_t lba, uint32_t bytes, bool fua, bool orwrite) {
  Task& task = cmd.task;
  // SBC-3 6.4.5: with WCE=0 no write may complete before its data is on the medium.
  fua = fua || !cmd.lun->mode_pages().write_cache_enabled();
  auto* op = new (std::nothrow) RmwOp{&task, bytes, orwrite, nullptr, {}};
  if (op == nullptr) return NoMemory(task);
  op->scratch.reset(new (std::nothrow) uint8_t[bytes]);
  if (op->scratch == nullptr) {
    delete op;
    return NoMemory(task);
  }
  const uint64_t offset = lba * cmd.lun->block_size();
  const std::span<uint8_t> scratch(op->scratch.get(), bytes);
  const backing::IoCompletion done{RmwOp::Done, op};
  if (orwrite) {
    cmd.lun->store().ReadModifyWrite(task.slot, offset, scratch, fua,
                                     backing::BackingStore::ModifyFn{RmwOp::Modify, op}, done);
    return Disposition::kPending;
  }
  // SBC-3 5.2: the Data-Out holds the verify data, then the write data.
  op->caw.compare = std::span<const uint8_t>(task.buf, bytes);
  op->caw.data = std::span<const uint8_t>(task.buf + bytes, bytes);
  op->caw.scratch = scratch;
  op->caw.fua = fua;
  cmd.lun->store().CompareAndWrite(task.slot, offset, &op->caw, done);
  return Disposition::kPending;
}

// --- VERIFY / WRITE AND VERIFY ----------------------------------------------------------------

enum class Compare : uint8_t {
  kNone,      // BYTCHK 00b: medium verification only (every block can be read)
  kAll,       // BYTCHK 01b: the Data-Out holds every block
  kEachWith,  // BYTCHK 11b: the Data-Out holds one block, compared with each block
};

struct VerifyCtx {
  const uint8_t* data;  // Data-Out
  uint32_t block;       // block size
  Compare mode;
  uint64_t miscompare = 0;

  static bool Visit(void* ctx, const uint8_t* medium, size_t n, uint64_t pos) {
    auto* v = static_cast<VerifyCtx*>(ctx);
    switch (v->mode) {
      case Compare::kNone:
        return true;
      case Compare::kAll: {
        const size_t at = FirstDifference(v->data + pos, medium, n);
        if (at == n) return true;
        v->miscompare = pos + at;
        return false;
      }
      case Compare::kEachWith:
        for (size_t off = 0; off < n;) {
          // Pieces start on block boundaries except where the store split a block across pieces.
          const size_t in_block = (pos + off) % v->block;
          const size_t len = std::min<size_t>(n - off, v->block - in_block);
          const size_t at = FirstDifference(v->data + in_block, medium + off, len);
          if (at != len) {
            v->miscompare = pos + off + at;
            return false;
          }
          off += len;
        }
        return true;
    }
    return true;
  }
  static void Stop(void* ctx, Task& task) {
    // SBC-3 5.33: MISCOMPARE with the offset of the first mismatching byte from the start of the
    // Data-Out (for BYTCHK 11b, from the start of the range compared).
    auto* v = static_cast<VerifyCtx*>(ctx);
    SetCheckConditionWithInfo(task, SenseKey::kMiscompare, Asc::kMiscompareDuringVerify,
                              v->miscompare);
  }
  static void Release(void* ctx) { delete static_cast<VerifyCtx*>(ctx); }
};

Disposition StartVerify(const Command& cmd, uint64_t lba, uint64_t blocks, Compare mode) {
  auto* v = new (std::nothrow) VerifyCtx{cmd.task.buf, cmd.lun->block_size(), mode};
  if (v == nullptr) return NoMemory(cmd.task);
  const uint64_t bs = cmd.lun->block_size();
  StartReadRange(cmd, lba * bs, blocks * bs,
                 RangeVisitor{VerifyCtx::Visit, VerifyCtx::Stop, VerifyCtx::Release, v});
  return Disposition::kPending;
}

Disposition Verify(const Command& cmd, uint64_t lba, uint64_t blocks, uint16_t length_byte,
                   uint16_t group_byte) {
  // SBC-3 5.33 - 5.35.
  Task& task = cmd.task;
  const uint8_t flags = task.cdb[1];
  if ((flags & 0xE0) != 0) {  // VRPROTECT: no protection information
    SetInvalidFieldInCdb(task, 1, 7);
    return Disposition::kDone;
  }
  if ((flags & 0x09) != 0) {  // reserved bits
    SetInvalidFieldInCdb(task, 1, (flags & 0x08) != 0 ? 3 : 0);
    return Disposition::kDone;
  }
  if ((task.cdb[group_byte] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, group_byte, 7);
    return Disposition::kDone;
  }
  const uint8_t bytchk = (flags >> 1) & 0x03;
  if (bytchk == 0x2) {  // reserved (SBC-3 table 64)
    SetInvalidFieldInCdb(task, 1, 2);
    return Disposition::kDone;
  }
  if (!CheckLbaRange(cmd, lba, blocks)) return Disposition::kDone;
  const uint64_t bs = cmd.lun->block_size();
  if (blocks * bs > kMaxTransferBytes) {
    SetInvalidFieldInCdb(task, length_byte);
    return Disposition::kDone;
  }
  const uint64_t out = bytchk == 0 ? 0 : bytchk == 1 ? blocks * bs : (blocks == 0 ? 0 : bs);
  task.transfer_bytes = static_cast<uint32_t>(out);
  if (blocks == 0) return Disposition::kDone;  // SBC-3 5.33: not an error, nothing verified
  if (out > 0 && !HaveDataOut(task, out)) return Disposition::kDone;
  const Compare mode = bytchk == 0   ? Compare::kNone
                       : bytchk == 1 ? Compare::kAll
                                     : Compare::kEachWith;
  return StartVerify(cmd, lba, blocks, mode);
}

// WRITE AND VERIFY: the write, then the verification of what was written.
struct WriteVerifyOp {
  Command cmd;
  uint64_t lba;
  uint64_t blocks;
  bool bytchk;

  static void Written(void* ctx, int err) {
    auto* op = static_cast<WriteVerifyOp*>(ctx);
    const Command cmd = op->cmd;
    const uint64_t lba = op->lba, blocks = op->blocks;
    const bool bytchk = op->bytchk;
    delete op;
    if (err != 0) {
      SetStoreError(cmd.task, err, true);
      return cmd.task.Complete();
    }
    // BYTCHK=1: compare the medium with the Data-Out; 0: verify the blocks read back.
    if (StartVerify(cmd, lba, blocks, bytchk ? Compare::kAll : Compare::kNone) ==
        Disposition::kDone) {
      cmd.task.Complete();
    }
  }
};

Disposition WriteAndVerify(const Command& cmd, uint64_t lba, uint64_t blocks, uint16_t length_byte,
                           uint16_t group_byte) {
  // SBC-3 5.36 - 5.38.
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t flags = task.cdb[1];
  if ((flags & 0xE0) != 0) {  // WRPROTECT
    SetInvalidFieldInCdb(task, 1, 7);
    return Disposition::kDone;
  }
  if ((flags & 0x0D) != 0) {  // reserved bits (BYTCHK is the single bit 1)
    SetInvalidFieldInCdb(task, 1, (flags & 0x08) != 0 ? 3 : (flags & 0x04) != 0 ? 2 : 0);
    return Disposition::kDone;
  }
  if ((task.cdb[group_byte] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, group_byte, 7);
    return Disposition::kDone;
  }
  if (!CheckLbaRange(cmd, lba, blocks)) return Disposition::kDone;
  const uint64_t bs = lun.block_size();
  if (blocks * bs > kMaxTransferBytes) {
    SetInvalidFieldInCdb(task, length_byte);
    return Disposition::kDone;
  }
  if (!CheckWritable(cmd)) return Disposition::kDone;
  if (blocks == 0) return Disposition::kDone;
  uint64_t bytes = blocks * bs;
  task.transfer_bytes = static_cast<uint32_t>(bytes);
  // As WRITE (sbc.cc DoWrite): a residual overflow of whole blocks writes and verifies the blocks
  // received; data ending inside a block is refused.
  if (task.data_out_len < bytes) {
    if (task.data_out_len % bs != 0) {
      SetCheckCondition(task, SenseKey::kIllegalRequest,
                        Asc::kInvalidFieldInCommandInformationUnit);
      return Disposition::kDone;
    }
    bytes = task.data_out_len;
    blocks = bytes / bs;
  }
  if (bytes == 0) return Disposition::kDone;
  if (task.buf == nullptr || task.buf_cap < bytes) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
    return Disposition::kDone;
  }
  auto* op = new (std::nothrow) WriteVerifyOp{cmd, lba, blocks, (flags & 0x02) != 0};
  if (op == nullptr) return NoMemory(task);
  // The verification reads the medium, so the data must be there: written through (FUA).
  lun.store().Write(task.slot, lba * bs, std::span<const uint8_t>(task.buf, bytes), true,
                    backing::IoCompletion{WriteVerifyOp::Written, op});
  return Disposition::kPending;
}

Disposition PreFetch(const Command& cmd, uint64_t lba, uint64_t blocks, uint16_t group_byte) {
  // SBC-3 5.9 / 5.10. A PREFETCH LENGTH of zero means through the last logical block.
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  if ((task.cdb[1] & 0xFD) != 0) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  if ((task.cdb[group_byte] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, group_byte, 7);
    return Disposition::kDone;
  }
  if (!CheckLbaRange(cmd, lba, blocks)) return Disposition::kDone;
  if (blocks == 0) blocks = lun.num_blocks() - lba;
  // The store is asked to read ahead (a file store's page cache), but nothing guarantees the
  // blocks stay cached, and a ram store has no cache beyond the medium itself: the cache cannot
  // be said to hold them, so the status is GOOD rather than CONDITION MET (SBC-3 5.9: GOOD when
  // the cache does not have the capacity for the blocks).
  lun.store().Prefetch(lba * lun.block_size(), blocks * lun.block_size());
  return Disposition::kDone;
}

}  // namespace

Disposition CompareAndWrite(const Command& cmd) {
  // SBC-3 5.2.
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  const uint8_t flags = cdb[1];
  if ((flags & 0xE0) != 0) {  // WRPROTECT
    SetInvalidFieldInCdb(task, 1, 7);
    return Disposition::kDone;
  }
  if ((flags & 0x05) != 0 || cdb[10] != 0 || cdb[11] != 0 || cdb[12] != 0 ||
      (cdb[14] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, (flags & 0x05) != 0 ? 1 : (cdb[14] & 0xE0) != 0 ? 14 : 10);
    return Disposition::kDone;
  }
  const uint64_t lba = LoadBe64(cdb + 2);
  const uint32_t blocks = cdb[13];
  if (blocks > kMaxCompareAndWriteBlocks) {  // MAXIMUM COMPARE AND WRITE LENGTH
    SetInvalidFieldInCdb(task, 13);
    return Disposition::kDone;
  }
  if (!CheckLbaRange(cmd, lba, blocks)) return Disposition::kDone;
  const uint32_t len = blocks * lun.block_size();
  task.transfer_bytes = 2 * len;
  // The Data-Out holds the verify data then the write data, exactly 2 x NUMBER OF LOGICAL BLOCKS;
  // a Data-Out of any other size disagrees with that field (also when it is zero).
  if (task.expected_length != 2 * len || task.data_out_len != 2 * len) {
    SetInvalidFieldInCdb(task, 13);
    return Disposition::kDone;
  }
  if (!CheckWritable(cmd)) return Disposition::kDone;
  if (blocks == 0) return Disposition::kDone;  // SBC-3 5.2: not an error, nothing compared
  if (!HaveDataOut(task, 2 * len)) return Disposition::kDone;
  return StartRmw(cmd, lba, len, (flags & 0x08) != 0, false);
}

Disposition OrWrite16(const Command& cmd) {
  // SBC-3 5.8 ORWRITE(16): the Data-Out ORed into the blocks, atomically like COMPARE AND WRITE.
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  const uint8_t flags = cdb[1];
  if ((flags & 0xE0) != 0) {  // ORPROTECT
    SetInvalidFieldInCdb(task, 1, 7);
    return Disposition::kDone;
  }
  if ((flags & 0x05) != 0 || (cdb[14] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, (flags & 0x05) != 0 ? 1 : 14);
    return Disposition::kDone;
  }
  const uint64_t lba = LoadBe64(cdb + 2);
  const uint32_t blocks = LoadBe32(cdb + 10);
  if (!CheckLbaRange(cmd, lba, blocks)) return Disposition::kDone;
  if (uint64_t{blocks} * lun.block_size() > kMaxTransferBytes) {
    SetInvalidFieldInCdb(task, 10);
    return Disposition::kDone;
  }
  if (!CheckWritable(cmd)) return Disposition::kDone;
  const uint32_t len = blocks * lun.block_size();
  task.transfer_bytes = len;
  if (blocks == 0) return Disposition::kDone;
  if (!HaveDataOut(task, len)) return Disposition::kDone;
  return StartRmw(cmd, lba, len, (flags & 0x08) != 0, true);
}

Disposition Verify10(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return Verify(cmd, LoadBe32(cdb + 2), LoadBe16(cdb + 7), 7, 6);
}
Disposition Verify12(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return Verify(cmd, LoadBe32(cdb + 2), LoadBe32(cdb + 6), 6, 10);
}
Disposition Verify16(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return Verify(cmd, LoadBe64(cdb + 2), LoadBe32(cdb + 10), 10, 14);
}
Disposition WriteAndVerify10(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return WriteAndVerify(cmd, LoadBe32(cdb + 2), LoadBe16(cdb + 7), 7, 6);
}
Disposition WriteAndVerify12(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return WriteAndVerify(cmd, LoadBe32(cdb + 2), LoadBe32(cdb + 6), 6, 10);
}
Disposition WriteAndVerify16(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return WriteAndVerify(cmd, LoadBe64(cdb + 2), LoadBe32(cdb + 10), 10, 14);
}
Disposition PreFetch10(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return PreFetch(cmd, LoadBe32(cdb + 2), LoadBe16(cdb + 7), 6);
}
Disposition PreFetch16(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return PreFetch(cmd, LoadBe64(cdb + 2), LoadBe32(cdb + 10), 14);
}

}  // namespace iscsigw::scsi::internal
