// SCSI dispatch (dataplane/scsi/engine.h) over RAM LUNs: a sequence of commands, each a CDB, an
// expected length and a Data-Out buffer, from one of two I_T nexuses to one of two LUNs (512- and
// 4096-byte blocks, so that EXTENDED COPY has a destination). Every parameter list reaches its
// parser this way: PERSISTENT RESERVE OUT, EXTENDED COPY, UNMAP, MODE SELECT, SANITIZE, COMPARE
// AND WRITE, WRITE SAME. The engine must complete every command exactly once (RAM stores complete
// inline), and its Data-In segments must add up to in_len and stay inside the buffer they use.
//
// Oracles on what the commands do, kept against a shadow copy of each LUN's medium:
//   - reservations (SPC-4 5.13.1 table 63, SBC-3 4.17 table 13): a command that changes the medium
//     (MustConflict's write class), sent while another I_T nexus holds an SPC-2 reservation, or a
//     persistent reservation this nexus does not hold (Write Exclusive, Exclusive Access) or is not
//     registered for (the registrants-only and all-registrants types), ends RESERVATION CONFLICT
//     and changes neither medium; so does a read under the Exclusive Access types. Only the checks
//     that come before the reservation one may answer first: a pending unit attention (SAM-5
//     5.14) and NACA=1 (INVALID FIELD IN CDB);
//   - data: a command that did not end GOOD leaves both media as they were, with one exception:
//     EXTENDED COPY, whose segments before the failing one stay copied (COPY ABORTED names the
//     failing segment, SPC-4 4.5.2.4.6); a command outside MayWrite's list changes no medium
//     whatever its status; a READ that ends GOOD returns exactly the bytes the store holds.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/task.h"
#include "tests/fuzz/fuzz_input.h"

using namespace iscsigw;

namespace {

constexpr uint32_t kBufBytes = 256 << 10;
constexpr uint64_t kLunBytes = 1 << 20;
constexpr int kLuns = 2;

struct World {
  World()
      : a("iqn.2026-11.io.iscsigw.fuzz:a,i,0x1", 1), b("iqn.2026-11.io.iscsigw.fuzz:b,i,0x2", 1) {
    target.name = "iqn.2026-11.io.iscsigw:fuzz";
    for (uint32_t i = 0; i < kLuns; ++i) {
      scsi::LunConfig cfg;
      cfg.id = i;
      cfg.block_size = i == 0 ? 512 : 4096;
      std::shared_ptr<backing::RamStore> store = backing::NewRamStore(kLunBytes);
      stores[i] = store.get();
      target.luns.push_back(std::make_shared<scsi::Lun>(cfg, std::move(store)));
    }
  }
  scsi::TargetInfo target;
  scsi::Nexus a, b;
  backing::RamStore* stores[kLuns];
};

// The transport's data buffer: every command writes what it uses, so it is shared across inputs.
std::vector<uint8_t>& Buffer() {
  static std::vector<uint8_t> buf(kBufBytes);
  return buf;
}

// What each LUN's medium held after the last command that was allowed to change it. Kept across
// inputs (zeroed only when written) so that most inputs cost no 1 MiB copy.
struct Shadow {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kLunBytes);
  bool zero = true;
};

Shadow& ShadowOf(int lun) {
  static Shadow shadows[kLuns];
  return shadows[lun];
}

// The store's bytes [offset, offset + len) compared with `want`.
bool StoreHolds(backing::RamStore& store, uint64_t offset, const uint8_t* want, uint64_t len) {
  std::array<backing::Segment, 4> segs;
  const size_t n = store.MapRead(offset, len, segs);
  uint64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(segs[i].data, want + at, segs[i].len) != 0) return false;
    at += segs[i].len;
  }
  return at == len;
}

bool MediumUnchanged(backing::RamStore& store, const Shadow& shadow) {
  // A store with no chunk in use reads as zeros (ram_store.h).
  if (shadow.zero && store.allocated_bytes() == 0) return true;
  return StoreHolds(store, 0, shadow.bytes.data(), kLunBytes);
}

void TakeShadow(backing::RamStore& store, Shadow* shadow) {
  if (store.allocated_bytes() == 0) {
    if (!shadow->zero) std::memset(shadow->bytes.data(), 0, kLunBytes);
    shadow->zero = true;
    return;
  }
  std::array<backing::Segment, 4> segs;
  const size_t n = store.MapRead(0, kLunBytes, segs);
  uint64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(shadow->bytes.data() + at, segs[i].data, segs[i].len);
    at += segs[i].len;
  }
  if (at != kLunBytes) fuzz::Violated("a RAM store does not map all of its medium");
  shadow->zero = false;
}

// Every command the engine implements that may change a medium (dataplane/scsi/opcodes.h).
bool MayWrite(uint8_t opcode) {
  switch (opcode) {
    case 0x0A:  // WRITE(6)
    case 0x2A:  // WRITE(10)
    case 0xAA:  // WRITE(12)
    case 0x8A:  // WRITE(16)
    case 0x9C:  // WRITE ATOMIC(16)
    case 0x2E:  // WRITE AND VERIFY(10)
    case 0xAE:  // WRITE AND VERIFY(12)
    case 0x8E:  // WRITE AND VERIFY(16)
    case 0x41:  // WRITE SAME(10)
    case 0x93:  // WRITE SAME(16)
    case 0x42:  // UNMAP
    case 0x48:  // SANITIZE
    case 0x89:  // COMPARE AND WRITE
    case 0x8B:  // ORWRITE(16)
    case 0x83:  // EXTENDED COPY
      return true;
    default:
      return false;
  }
}

// Reads of the medium: allowed under the Write Exclusive types, not under the Exclusive Access
// ones (SBC-3 table 13).
bool ReadsMedium(uint8_t opcode) {
  switch (opcode) {
    case 0x08:  // READ(6)
    case 0x28:  // READ(10)
    case 0xA8:  // READ(12)
    case 0x88:  // READ(16)
    case 0x2F:  // VERIFY(10)
    case 0xAF:  // VERIFY(12)
    case 0x8F:  // VERIFY(16)
      return true;
    default:
      return false;
  }
}

// Whether SPC-4 5.13.1 (table 63) and SBC-3 4.17 (table 13) have the command conflict, from the
// LUN's reservations as they stood before it, for commands that read or change the medium.
bool MustConflict(scsi::Lun& lun, const scsi::Nexus& nexus, uint8_t opcode) {
  const bool writes = MayWrite(opcode);
  if (!writes && !ReadsMedium(opcode)) return false;
  scsi::Reservations& res = lun.reservations();
  std::lock_guard lock(res.mu());
  // SPC-2 5.5.1: a logical unit reserved through another I_T nexus refuses both.
  if (res.spc2_reserved() && !res.spc2_reserved_by(nexus)) return true;
  if (!res.pr_reserved()) return false;
  const uint8_t type = res.pr_type();
  const scsi::Reservations::Registrant* reg = res.FindRegistrant(&nexus);
  const bool registered = reg != nullptr;
  const bool holder = registered && reg->holder;
  const bool exclusive_access = type == scsi::kPrExclusiveAccess ||
                                type == scsi::kPrExclusiveAccessRegistrantsOnly ||
                                type == scsi::kPrExclusiveAccessAllRegistrants;
  const bool registrants_have_access = type == scsi::kPrWriteExclusiveRegistrantsOnly ||
                                       type == scsi::kPrExclusiveAccessRegistrantsOnly ||
                                       type == scsi::kPrWriteExclusiveAllRegistrants ||
                                       type == scsi::kPrExclusiveAccessAllRegistrants;
  if (holder || (registered && registrants_have_access)) return false;
  return writes || exclusive_access;
}

// Whether the engine may answer before it looks at the reservations: a pending unit attention
// (SAM-5 5.14) or NACA=1 in the CONTROL byte.
bool AnswersFirst(scsi::Lun& lun, scsi::Nexus& nexus, const scsi::Task& t) {
  scsi::UnitAttention ua;
  if (nexus.PeekUnitAttention(lun, &ua)) return true;
  const size_t len = scsi::CdbLengthForOpcode(t.cdb[0]);
  return len > 0 && (t.cdb[len - 1] & 0x04) != 0;
}

// READ(6/10/12/16): LBA and blocks, or false for another command.
bool DecodeRead(const uint8_t* c, uint64_t* lba, uint32_t* blocks) {
  switch (c[0]) {
    case 0x08:
      *lba = ((c[1] & 0x1Fu) << 16) | (c[2] << 8) | c[3];
      *blocks = c[4] == 0 ? 256 : c[4];  // SBC-3 5.8: 0 means 256
      return true;
    case 0x28:
      *lba = LoadBe32(c + 2);
      *blocks = LoadBe16(c + 7);
      return true;
    case 0xA8:
      *lba = LoadBe32(c + 2);
      *blocks = LoadBe32(c + 6);
      return true;
    case 0x88:
      *lba = LoadBe64(c + 2);
      *blocks = LoadBe32(c + 10);
      return true;
    default:
      return false;
  }
}

// A READ that ended GOOD returned the store's blocks: all of them, or as many as the transport's
// buffer holds when the store cannot hand out its memory.
void CheckReadData(const scsi::Task& t, scsi::Lun& lun, backing::RamStore& store) {
  uint64_t lba = 0;
  uint32_t blocks = 0;
  if (!DecodeRead(t.cdb.data(), &lba, &blocks)) return;
  const uint64_t bytes = uint64_t{blocks} * lun.block_size();
  if (t.in_len != bytes && !(t.in_len == t.buf_cap && t.buf_cap < bytes)) {
    fuzz::Violated("a GOOD READ returned another length than it asked for");
  }
  uint64_t at = lba * lun.block_size();
  for (uint32_t i = 0; i < t.in_seg_count; ++i) {
    if (!StoreHolds(store, at, t.in_segs[i].data, t.in_segs[i].len)) {
      fuzz::Violated("a GOOD READ returned other bytes than the store holds");
    }
    at += t.in_segs[i].len;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Fresh LUNs per input: reservations and mode pages from one input must not leak into the next
  // (a crash would not reproduce from its own file).
  World w;
  for (int i = 0; i < kLuns; ++i) TakeShadow(*w.stores[i], &ShadowOf(i));
  std::vector<uint8_t>& buf = Buffer();
  fuzz::Input in(data, size);
  for (int n = 0; n < 16 && !in.empty(); ++n) {
    const uint8_t sel = in.Byte();
    scsi::Task t{};
    scsi::Nexus& nexus = (sel & 1) != 0 ? w.b : w.a;
    t.nexus = &nexus;
    t.lun = (sel >> 1) & 3;  // 2 and 3: no such LUN
    const auto cdb = in.Bytes(16);
    std::memcpy(t.cdb.data(), cdb.data(), cdb.size());
    t.cdb_len = 16;
    t.expected_length = static_cast<uint32_t>(in.U16()) << ((sel >> 3) & 7);
    if (t.expected_length > kBufBytes) t.expected_length = kBufBytes;
    t.buf = buf.data();
    t.buf_cap = kBufBytes;
    if ((sel & 0x40) != 0) {
      const auto out = in.Piece();
      std::memcpy(buf.data(), out.data(), out.size());
      t.dir = scsi::DataDirection::kWrite;
      t.data_out_len = static_cast<uint32_t>(out.size());
      if (t.expected_length < t.data_out_len) t.expected_length = t.data_out_len;
    } else if (t.expected_length > 0) {
      t.dir = scsi::DataDirection::kRead;
    }
    scsi::Lun* lun = t.lun < kLuns ? w.target.luns[t.lun].get() : nullptr;
    const uint8_t opcode = t.cdb[0];
    const bool conflict = lun != nullptr &&
                          lun->sanitize().mode() == scsi::SanitizeState::Mode::kIdle &&
                          !AnswersFirst(*lun, nexus, t) && MustConflict(*lun, nexus, opcode);
    int completions = 0;
    t.complete = [](scsi::Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    t.complete_ctx = &completions;
    scsi::Engine::Execute(w.target, t);
    if (completions != 1) std::abort();
    if (t.in_seg_count > t.in_segs.size()) std::abort();
    uint64_t in_bytes = 0;
    for (uint32_t i = 0; i < t.in_seg_count; ++i) {
      const auto& seg = t.in_segs[i];
      in_bytes += seg.len;
      // Data-In from the transport's buffer stays inside it.
      const uint8_t* b = buf.data();
      if (seg.data >= b && seg.data < b + kBufBytes && seg.data + seg.len > b + kBufBytes) {
        std::abort();
      }
    }
    if (in_bytes != t.in_len) std::abort();

    const bool good = t.status == scsi::ScsiStatus::kGood;
    if (conflict) {
      if (t.status != scsi::ScsiStatus::kReservationConflict) {
        fuzz::Violated("a command the reservations forbid did not end RESERVATION CONFLICT");
      }
      for (int i = 0; i < kLuns; ++i) {
        if (!MediumUnchanged(*w.stores[i], ShadowOf(i))) {
          fuzz::Violated("a command the reservations forbid changed the medium");
        }
      }
    }
    if (MayWrite(opcode)) {
      for (int i = 0; i < kLuns; ++i) {
        // Only EXTENDED COPY reaches past the LUN it was sent to: a change to another LUN is
        // found by the check at the end of the input, whose shadow is not taken again here.
        if (opcode != 0x83 && i != static_cast<int>(t.lun)) continue;
        if (good || opcode == 0x83) {
          TakeShadow(*w.stores[i], &ShadowOf(i));
        } else if (!MediumUnchanged(*w.stores[i], ShadowOf(i))) {
          fuzz::Violated("a command that did not end GOOD changed the medium");
        }
      }
    }
    if (good && lun != nullptr) CheckReadData(t, *lun, *w.stores[t.lun]);
  }
  // Commands outside MayWrite changed nothing.
  for (int i = 0; i < kLuns; ++i) {
    if (!MediumUnchanged(*w.stores[i], ShadowOf(i))) {
      fuzz::Violated("a command that does not write changed the medium");
    }
  }
  return 0;
}
