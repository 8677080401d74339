// SBC-3 block commands: READ CAPACITY, READ/WRITE (6/10/12/16), SYNCHRONIZE CACHE, START STOP UNIT.
//
// READ/WRITE/SYNCHRONIZE CACHE hand the task to the backing store and return kPending; the store's
// completion (inline for ram/null, later on the same reactor for file) sets status and completes
// the task. Nothing on this path allocates.
#include <algorithm>
#include <span>

#include "base/endian.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi::internal {
namespace {

// Decoded READ/WRITE CDB.
struct RwCdb {
  uint64_t lba = 0;
  uint32_t blocks = 0;
  bool fua = false;
  uint8_t protect = 0;   // RDPROTECT / WRPROTECT
  uint16_t length_byte;  // where TRANSFER LENGTH starts, for the sense field pointer
};

RwCdb Decode6(const uint8_t* cdb) {
  // SBC-3 5.10 READ(6) / 5.40 WRITE(6): 21-bit LBA; TRANSFER LENGTH 0 means 256 blocks.
  RwCdb r;
  r.lba = LoadBe24(cdb + 1) & 0x1FFFFF;
  r.blocks = cdb[4] == 0 ? 256 : cdb[4];
  r.length_byte = 4;
  return r;
}

RwCdb Decode10(const uint8_t* cdb) {
  // SBC-3 5.11 READ(10) / 5.41 WRITE(10).
  RwCdb r;
  r.protect = cdb[1] >> 5;
  r.fua = (cdb[1] & 0x08) != 0;  // DPO (bit 4) is a cache hint we may ignore
  r.lba = LoadBe32(cdb + 2);
  r.blocks = LoadBe16(cdb + 7);
  r.length_byte = 7;
  return r;
}

RwCdb Decode12(const uint8_t* cdb) {
  // SBC-3 5.12 READ(12) / 5.42 WRITE(12).
  RwCdb r;
  r.protect = cdb[1] >> 5;
  r.fua = (cdb[1] & 0x08) != 0;
  r.lba = LoadBe32(cdb + 2);
  r.blocks = LoadBe32(cdb + 6);
  r.length_byte = 6;
  return r;
}

RwCdb Decode16(const uint8_t* cdb) {
  // SBC-3 5.13 READ(16) / 5.43 WRITE(16).
  RwCdb r;
  r.protect = cdb[1] >> 5;
  r.fua = (cdb[1] & 0x08) != 0;
  r.lba = LoadBe64(cdb + 2);
  r.blocks = LoadBe32(cdb + 10);
  r.length_byte = 10;
  return r;
}

// SBC-3 4.5 and each command's LBA description: an LBA beyond the last LBA, or LBA + blocks beyond
// the capacity, is LOGICAL BLOCK ADDRESS OUT OF RANGE. This holds for a transfer length of zero
// too (the LBA itself must address the medium). Written so that nothing overflows.
bool InRange(const Lun& lun, uint64_t lba, uint64_t blocks) {
  const uint64_t capacity = lun.num_blocks();
  return lba < capacity && blocks <= capacity - lba;
}

// Checks shared by READ and WRITE; false when the task already holds CHECK CONDITION.
bool CheckRw(const Command& cmd, const RwCdb& r) {
  if (r.protect != 0) {
    // SBC-3 4.22: the logical unit has no protection information (PROTECT=0 in INQUIRY), so a
    // non-zero RDPROTECT/WRPROTECT is an invalid field.
    SetInvalidFieldInCdb(cmd.task, 1, 7);
    return false;
  }
  if (!InRange(*cmd.lun, r.lba, r.blocks)) {
    SetCheckCondition(cmd.task, SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
    return false;
  }
  if (uint64_t{r.blocks} * cmd.lun->block_size() > kMaxTransferBytes) {
    // SBC-3 6.5.3: a TRANSFER LENGTH above the Block Limits MAXIMUM TRANSFER LENGTH ends with
    // INVALID FIELD IN CDB.
    SetInvalidFieldInCdb(cmd.task, r.length_byte);
    return false;
  }
  return true;
}

// Store errors become sense data through SetStoreError: EIO is MEDIUM ERROR (UNRECOVERED READ
// ERROR, WRITE ERROR), ENOSPC on a thin LUN SPACE ALLOCATION FAILED WRITE PROTECT (SBC-3 4.7.3.7),
// EROFS WRITE PROTECTED, ENOTCONN (a store not connected to its medium yet) and ETIMEDOUT (the
// medium did not answer in time) NOT READY, BECOMING READY, ESHUTDOWN (the store fenced) NOT READY,
// MANUAL INTERVENTION REQUIRED.
void ReadDone(void* ctx, int err) {
  Task& task = *static_cast<Task*>(ctx);
  if (err != 0) SetStoreError(task, err, false);
  task.Complete();
}

void WriteDone(void* ctx, int err) {
  Task& task = *static_cast<Task*>(ctx);
  if (err != 0) SetStoreError(task, err, true);
  task.Complete();
}

// Takes the write errors the task's nexus has not heard of (Lun::NoteWriteError).
bool TakeWriteErrors(Task& task) {
  if (task.unit == nullptr) return false;
  return task.nexus != nullptr ? task.nexus->TakeWriteErrors(*task.unit)
                               : task.unit->TakeWriteErrors();
}

// SYNCHRONIZE CACHE: a flush that itself succeeded still fails when a write failed on the store
// since this nexus last heard of one, so that no initiator takes a failed write for durable
// (whichever initiator's flush met the error first).
void FlushDone(void* ctx, int err) {
  Task& task = *static_cast<Task*>(ctx);
  if (err != 0) {
    SetStoreError(task, err, true);
    // This error is the report of earlier failed writes, unless the initiator retries the flush
    // (NOT READY, BECOMING READY): then the retry reports them.
    if (err != ENOTCONN && err != ETIMEDOUT) (void)TakeWriteErrors(task);
  } else if (TakeWriteErrors(task)) {
    SetCheckCondition(task, SenseKey::kMediumError, Asc::kWriteError);
  }
  task.Complete();
}

// SYNCHRONIZE CACHE with IMMED: the command has already ended GOOD, so a failed flush becomes a
// deferred error that the next SYNCHRONIZE CACHE of the LUN reports (FlushDone).
void ImmedFlushDone(void* ctx, int err) {
  auto* lun = static_cast<Lun*>(ctx);
  if (err != 0) lun->NoteWriteError();
  lun->ReleaseDetachedFlush();
}

Disposition DoRead(const Command& cmd, const RwCdb& r) {
  Task& task = cmd.task;
  if (!CheckRw(cmd, r)) return Disposition::kDone;
  // SBC-3 5.11: a TRANSFER LENGTH of zero transfers nothing and is not an error.
  if (r.blocks == 0) return Disposition::kDone;
  // FUA on a read asks for data from the medium rather than a cache; our caches are coherent with
  // the medium (page cache, memory), so the data returned is the same either way.
  Lun& lun = *cmd.lun;
  const uint64_t offset = r.lba * lun.block_size();
  const uint64_t bytes = uint64_t{r.blocks} * lun.block_size();
  task.transfer_bytes = static_cast<uint32_t>(bytes);
  const size_t pieces = lun.store().MapRead(offset, bytes, task.in_segs);
  if (pieces > 0) {  // zero copy: Data-In straight from store memory
    task.in_seg_count = static_cast<uint32_t>(pieces);
    task.in_len = static_cast<uint32_t>(bytes);
    return Disposition::kDone;
  }
  // The transport sizes buf to its expected length (capped); it sends at most expected_length bytes
  // anyway, so reading more than buf_cap would be wasted.
  const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(bytes, task.buf_cap));
  if (n == 0) return Disposition::kDone;
  task.SetDataInFromBuf(n);
  lun.store().Read(task.slot, offset, std::span<uint8_t>(task.buf, n),
                   backing::IoCompletion{ReadDone, &task});
  return Disposition::kPending;
}

// atomic: WRITE ATOMIC, whose range the store writes all or nothing (CheckRw already done).
Disposition DoWrite(const Command& cmd, const RwCdb& r, bool atomic = false) {
  Task& task = cmd.task;
  if (!atomic && !CheckRw(cmd, r)) return Disposition::kDone;
  Lun& lun = *cmd.lun;
  if (lun.read_only() || lun.mode_pages().software_write_protect()) {
    // SBC-3 4.13 (write protection, also SWP in the control mode page): DATA PROTECT / WRITE
    // PROTECTED.
    SetCheckCondition(task, SenseKey::kDataProtect, Asc::kWriteProtected);
    return Disposition::kDone;
  }
  if (r.blocks == 0) return Disposition::kDone;  // SBC-3 5.41: not an error, nothing written
  const uint64_t bytes = uint64_t{r.blocks} * lun.block_size();
  // The transport reports residuals against this (RFC 7143 11.4.5), also when the command fails.
  task.transfer_bytes = static_cast<uint32_t>(bytes);
  // RFC 7143 11.4.5.1: when the initiator's expected data transfer length is below the CDB's
  // TRANSFER LENGTH (residual overflow), only the data it sent is transferred and the command ends
  // GOOD with the overflow in the residual count: the whole blocks received are written and the
  // rest of the range stays as it was. Data that ends inside a block cannot be written as a block,
  // so that case transfers nothing and answers INVALID FIELD IN COMMAND INFORMATION UNIT (0Eh/03h,
  // the transport-level outcome SAM-5 transports define, e.g. FCP-4 9.4.2).
  // An atomic write is of the whole range or nothing, so it takes no residual overflow.
  uint64_t write_bytes = bytes;
  if (task.data_out_len < bytes) {
    if (atomic || task.data_out_len % lun.block_size() != 0) {
      SetCheckCondition(task, SenseKey::kIllegalRequest,
                        Asc::kInvalidFieldInCommandInformationUnit);
      return Disposition::kDone;
    }
    write_bytes = task.data_out_len;
  }
  if (write_bytes == 0) return Disposition::kDone;
  if (task.buf == nullptr || task.buf_cap < write_bytes) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
    return Disposition::kDone;
  }
  // FUA (SBC-3 5.41): the store makes the data stable before it completes. DPO is ignored. With the
  // write cache disabled (caching page WCE=0, SBC-3 6.4.5) every write is written through.
  const bool fua = r.fua || !lun.mode_pages().write_cache_enabled();
  const std::span<const uint8_t> data(task.buf, static_cast<size_t>(write_bytes));
  const backing::IoCompletion done{WriteDone, &task};
  if (atomic) {
    lun.store().WriteAtomic(task.slot, r.lba * lun.block_size(), data, fua, done);
  } else {
    lun.store().Write(task.slot, r.lba * lun.block_size(), data, fua, done);
  }
  return Disposition::kPending;
}

// Flushes the store's volatile cache; with immed the command is already complete (GOOD) once the
// flush has been started.
Disposition StartFlush(const Command& cmd, bool immed) {
  Task& task = cmd.task;
  if (immed) {
    cmd.lun->HoldForDetachedFlush(task.slot);
    cmd.lun->store().Flush(task.slot, backing::IoCompletion{ImmedFlushDone, cmd.lun});
    return Disposition::kDone;
  }
  cmd.lun->store().Flush(task.slot, backing::IoCompletion{FlushDone, &task});
  return Disposition::kPending;
}

Disposition SynchronizeCache(const Command& cmd, uint64_t lba, uint64_t blocks) {
  // SBC-3 5.22 / 5.23. NUMBER OF LOGICAL BLOCKS 0 means "to the end of the medium"; either way the
  // range is checked, then the whole store is flushed (a superset of the range).
  Task& task = cmd.task;
  if (!InRange(*cmd.lun, lba, blocks)) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
    return Disposition::kDone;
  }
  // IMMED (byte 1 bit 1): return status once the CDB is validated (SBC-3 5.22).
  return StartFlush(cmd, (task.cdb[1] & 0x02) != 0);
}

}  // namespace

Disposition ReadCapacity10(const Command& cmd) {
  // SBC-3 5.15.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const bool pmi = (cdb[8] & 0x01) != 0;
  if (!pmi && LoadBe32(cdb + 2) != 0) {  // LBA must be zero when PMI is zero
    SetInvalidFieldInCdb(task, 2);
    return Disposition::kDone;
  }
  const uint64_t blocks = cmd.lun->num_blocks();
  const uint64_t last = blocks == 0 ? 0 : blocks - 1;
  uint8_t data[8];
  // RETURNED LOGICAL BLOCK ADDRESS: FFFFFFFFh tells the initiator to use READ CAPACITY(16).
  StoreBe32(data, last > 0xFFFFFFFEull ? 0xFFFFFFFFu : static_cast<uint32_t>(last));
  StoreBe32(data + 4, cmd.lun->block_size());
  ReturnData(task, data, sizeof(data), sizeof(data));
  return Disposition::kDone;
}

Disposition ServiceActionIn16(const Command& cmd) {
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  if ((cdb[1] & 0x1F) == kSaGetLbaStatus) return GetLbaStatus(cmd);
  if ((cdb[1] & 0x1F) != kSaReadCapacity16) {
    // SPC-4 4.5.6 / 6.x: an unsupported service action of a supported operation code.
    SetInvalidFieldInCdb(task, 1, 4);
    return Disposition::kDone;
  }
  // SBC-3 5.16 READ CAPACITY(16).
  const bool pmi = (cdb[14] & 0x01) != 0;
  if (!pmi && LoadBe64(cdb + 2) != 0) {
    SetInvalidFieldInCdb(task, 2);
    return Disposition::kDone;
  }
  const uint32_t alloc = LoadBe32(cdb + 10);
  const uint64_t blocks = cmd.lun->num_blocks();
  uint8_t data[32] = {};
  StoreBe64(data, blocks == 0 ? 0 : blocks - 1);
  StoreBe32(data + 8, cmd.lun->block_size());
  // data[12]: P_TYPE / PROT_EN = 0 (no protection information).
  // data[13]: P_I_EXPONENT = 0, LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT (3 for 512e).
  data[13] = cmd.lun->blocks_per_physical_exponent() & 0x0F;
  // data[14..15]: LBPME and LBPRZ when the store is thin provisioned (unmapped blocks read as
  // zeros, SBC-3 4.7.3.1); LOWEST ALIGNED LBA = 0 (LBA 0 starts a physical block).
  if (cmd.lun->store().thin_provisioned()) data[14] = 0x80 | 0x40;
  ReturnData(task, data, sizeof(data), alloc);
  return Disposition::kDone;
}

Disposition Read6(const Command& cmd) { return DoRead(cmd, Decode6(cmd.task.cdb.data())); }
Disposition Read10(const Command& cmd) { return DoRead(cmd, Decode10(cmd.task.cdb.data())); }
Disposition Read12(const Command& cmd) { return DoRead(cmd, Decode12(cmd.task.cdb.data())); }
Disposition Read16(const Command& cmd) { return DoRead(cmd, Decode16(cmd.task.cdb.data())); }
Disposition Write6(const Command& cmd) { return DoWrite(cmd, Decode6(cmd.task.cdb.data())); }
Disposition Write10(const Command& cmd) { return DoWrite(cmd, Decode10(cmd.task.cdb.data())); }
Disposition Write12(const Command& cmd) { return DoWrite(cmd, Decode12(cmd.task.cdb.data())); }
Disposition Write16(const Command& cmd) { return DoWrite(cmd, Decode16(cmd.task.cdb.data())); }

AtomicBlocks AtomicBlocksOf(Lun& lun) {
  const backing::BackingStore::AtomicLimits s = lun.store().atomic_limits();
  const uint64_t bs = lun.block_size();
  // Limits that are not whole blocks are rounded to ones that still hold (both powers of two).
  const uint64_t max = std::min(s.max_bytes, kMaxTransferBytes) / bs;
  if (max == 0) return {};
  return {static_cast<uint32_t>(max), static_cast<uint32_t>((s.align_bytes + bs - 1) / bs)};
}

Disposition WriteAtomic16(const Command& cmd) {
  // SBC-4 WRITE ATOMIC (16) and 4.29 (atomic writes): one atomic write of the whole range,
  // within the limits the Block Limits VPD page reports (AtomicBlocksOf). Checked in the order
  // WRITE(16) checks, then the atomic limits, each an INVALID FIELD IN CDB pointing at its field.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const AtomicBlocks limits = AtomicBlocksOf(*cmd.lun);
  if (limits.max == 0) {
    // This LUN's store cannot write atomically (a block device, an rbd image behind a write-back
    // cache): the command is not supported here, as REPORT SUPPORTED OPERATION CODES says.
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
    return Disposition::kDone;
  }
  // WRITE(16)'s layout, but bytes 10-11 hold the ATOMIC BOUNDARY and 12-13 the TRANSFER LENGTH.
  RwCdb r = Decode16(cdb);
  r.blocks = LoadBe16(cdb + 12);
  r.length_byte = 12;
  if (!CheckRw(cmd, r)) return Disposition::kDone;
  if (LoadBe16(cdb + 10) != 0) {
    // ATOMIC BOUNDARY: several atomic writes in one command are not offered (MAXIMUM ATOMIC
    // BOUNDARY SIZE 0).
    SetInvalidFieldInCdb(task, 10);
    return Disposition::kDone;
  }
  if (r.blocks > limits.max) {
    SetInvalidFieldInCdb(task, 12);
    return Disposition::kDone;
  }
  if (limits.alignment > 1 && r.lba % limits.alignment != 0) {
    SetInvalidFieldInCdb(task, 2);
    return Disposition::kDone;
  }
  return DoWrite(cmd, r, true);
}

Disposition SynchronizeCache10(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return SynchronizeCache(cmd, LoadBe32(cdb + 2), LoadBe16(cdb + 7));
}

Disposition SynchronizeCache16(const Command& cmd) {
  const uint8_t* cdb = cmd.task.cdb.data();
  return SynchronizeCache(cmd, LoadBe64(cdb + 2), LoadBe32(cdb + 10));
}

Disposition StartStopUnit(const Command& cmd) {
  // SBC-3 5.25. There is no medium to spin or eject: the unit stays ready in every state, which the
  // standard permits for a device whose medium is always accessible. Stopping (START=0 with POWER
  // CONDITION 0h) still honours the part that matters for data: unless NO_FLUSH is set, the cache
  // is written to the medium before the command completes.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const bool immed = (cdb[1] & 0x01) != 0;
  const uint8_t power_condition = cdb[4] >> 4;
  const bool no_flush = (cdb[4] & 0x04) != 0;
  const bool start = (cdb[4] & 0x01) != 0;
  // SBC-3 5.25, table 70: the reserved fields must be zero.
  if ((cdb[1] & 0xFE) != 0) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  if (cdb[2] != 0) {
    SetInvalidFieldInCdb(task, 2);
    return Disposition::kDone;
  }
  if ((cdb[3] & 0xF0) != 0) {
    SetInvalidFieldInCdb(task, 3);
    return Disposition::kDone;
  }
  if ((cdb[4] & 0x08) != 0) {
    SetInvalidFieldInCdb(task, 4, 3);
    return Disposition::kDone;
  }
  // LOEJ (bit 1) asks to load/eject removable medium; the medium is not removable (RMB=0 in
  // INQUIRY) so there is nothing to load or eject.
  switch (power_condition) {
    case 0x0:  // START_VALID: process START and LOEJ
      if (!start && !no_flush) return StartFlush(cmd, immed);
      return Disposition::kDone;
    case 0x1:  // ACTIVE: the logical unit is always in the active power condition
      return Disposition::kDone;
    default:
      // IDLE/STANDBY/LU_CONTROL/FORCE_*: power conditions are not supported (no Power Condition
      // mode page), so the field is invalid.
      SetInvalidFieldInCdb(task, 4, 7);
      return Disposition::kDone;
  }
}

}  // namespace iscsigw::scsi::internal
