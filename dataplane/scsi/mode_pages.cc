// MODE SENSE(6)/(10) and MODE SELECT(6)/(10) (SPC-4 6.9-6.12) over the mode pages of SPC-4 7.5 and
// SBC-3 6.4: read-write error recovery (01h), disconnect-reconnect (02h), caching (08h), control
// (0Ah), control extension (0Ah/01h) and informational exceptions control (1Ch).
//
// The caching page's WCE bit and the control page's SWP bit are changeable. Saved values exist when
// the LUN has a state store (LunConfig::state_store): PS=1 in every page, MODE SENSE PC=11b reports
// them, and MODE SELECT with SP=1 makes them durable before it completes.
#include "dataplane/scsi/mode_pages.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/endian.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi {

std::string ModePages::Serialize() const {
  const Values s = saved();
  std::string out;
  if (s.wce != defaults_.wce) out += std::string("mode wce=") + (s.wce ? "1" : "0") + "\n";
  if (s.swp != defaults_.swp) out += std::string("mode swp=") + (s.swp ? "1" : "0") + "\n";
  return out;
}

void ModePages::Restore(const std::string& blob) {
  std::istringstream in(blob);
  std::string line;
  Values v = defaults_;
  bool any = false;
  while (std::getline(in, line)) {
    if (line == "mode wce=1" || line == "mode wce=0") {
      v.wce = line.back() == '1';
      any = true;
    } else if (line == "mode swp=1" || line == "mode swp=0") {
      v.swp = line.back() == '1';
      any = true;
    }
  }
  if (!any) return;
  SetSaved(v);
  // SPC-4 7.5.1: at power on the current values are the saved values.
  SetCurrent(v);
}

namespace internal {
namespace {

// Page control (SPC-4 6.11, table 98).
constexpr uint8_t kPcCurrent = 0, kPcChangeable = 1, kPcDefault = 2, kPcSaved = 3;

constexpr uint8_t kPageAll = 0x3F;
constexpr uint8_t kSubpageAll = 0xFF;

struct PageDef {
  uint8_t page;
  uint8_t subpage;
  uint8_t len;  // whole page including its header
};

// Ascending page code, then subpage code: the order MODE SENSE returns them in (SPC-4 6.11).
constexpr PageDef kPages[] = {
    {0x01, 0x00, 12},  // read-write error recovery, SBC-3 6.4.7
    {0x02, 0x00, 16},  // disconnect-reconnect, SPC-4 7.5.9
    {0x08, 0x00, 20},  // caching, SBC-3 6.4.5
    {0x0A, 0x00, 12},  // control, SPC-4 7.5.8
    {0x0A, 0x01, 32},  // control extension, SPC-4 7.5.10
    {0x1C, 0x00, 12},  // informational exceptions control, SPC-4 7.5.14
};
constexpr size_t kMaxPageLen = 32;

const PageDef* FindPage(uint8_t page, uint8_t subpage) {
  for (const PageDef& p : kPages) {
    if (p.page == page && p.subpage == subpage) return &p;
  }
  return nullptr;
}

// Writes one page for page control `pc` with values `v` into d[0..def.len).
void BuildPage(const PageDef& def, uint8_t pc, const ModePages::Values& v, bool savable,
               uint8_t* d) {
  std::memset(d, 0, def.len);
  const bool spf = def.subpage != 0;
  d[0] = static_cast<uint8_t>((savable ? 0x80 : 0) | (spf ? 0x40 : 0) | def.page);
  if (spf) {
    d[1] = def.subpage;
    StoreBe16(d + 2, static_cast<uint16_t>(def.len - 4));
  } else {
    d[1] = static_cast<uint8_t>(def.len - 2);
  }
  const bool mask = pc == kPcChangeable;
  switch (def.page) {
    case 0x01:  // no error recovery to tune: every field 0 (no retries, no reassignment)
    case 0x02:  // iSCSI has no bus to disconnect from (RFC 7143 keeps burst sizes in login keys)
      break;
    case 0x08:
      // WCE (bit 2) is the one changeable field; RCD=0: reads may come from the cache.
      if (mask || v.wce) d[2] = 0x04;
      break;
    case 0x0A:
      if (def.subpage == 0x00 && !mask) {
        d[2] = 0x02;  // TST=000b (one task set), D_SENSE=0 (fixed format), GLTSD=1 (no log saving)
        d[3] = 0x10;  // QUEUE ALGORITHM MODIFIER=1: unrestricted reordering, QERR=00b
      }
      // SWP (byte 4 bit 3) is changeable: with SWP=1 the medium is write protected (SPC-4 7.5.8).
      if (def.subpage == 0x00 && (mask || v.swp)) d[4] = 0x08;
      // Control extension: TCMOS=0, SCSIP=0, IALUAE=0, INITIAL COMMAND PRIORITY 0, MAXIMUM SENSE
      // DATA LENGTH 0 (no limit below what the transport carries).
      break;
    case 0x1C:
      // DEXCPT=1: informational exception reporting is disabled (the gateway raises none);
      // MRIE=0.
      if (!mask) d[2] = 0x08;
      break;
  }
}

// Whether saved values exist (SPC-4 6.11: without them PC=11b and SP=1 are refused).
bool Savable(const Lun& lun) { return lun.config().state_store != nullptr; }

Disposition ModeSense(const Command& cmd, bool ten) {
  // SPC-4 6.11 (MODE SENSE(6)) and 6.12 (MODE SENSE(10)).
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  const uint8_t allowed_byte1 = ten ? 0x18 : 0x08;  // LLBAA (10 only), DBD
  if ((cdb[1] & ~allowed_byte1) != 0) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  if (ten && (cdb[4] != 0 || cdb[5] != 0 || cdb[6] != 0)) {
    SetInvalidFieldInCdb(task, cdb[4] != 0 ? 4 : cdb[5] != 0 ? 5 : 6);
    return Disposition::kDone;
  }
  const bool dbd = (cdb[1] & 0x08) != 0;
  const bool llbaa = ten && (cdb[1] & 0x10) != 0;
  const uint8_t pc = cdb[2] >> 6;
  const uint8_t page = cdb[2] & 0x3F;
  const uint8_t subpage = cdb[3];
  const uint16_t alloc = ten ? LoadBe16(cdb + 7) : cdb[4];

  if (pc == kPcSaved && !Savable(lun)) {
    // SPC-4 6.11: saved values are not implemented without a state store.
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kSavingParametersNotSupported);
    return Disposition::kDone;
  }

  // Which pages: 3Fh/00h all pages without subpages, 3Fh/FFh all pages and subpages, xxh/FFh one
  // page with all its subpages, xxh/yyh one (sub)page (SPC-4 table 99).
  bool any = false;
  for (const PageDef& p : kPages) {
    const bool page_ok = page == kPageAll || p.page == page;
    const bool sub_ok = subpage == kSubpageAll || p.subpage == subpage;
    if (page_ok && sub_ok) any = true;
  }
  if (!any) {
    const bool page_exists =
        page == kPageAll ||
        std::any_of(std::begin(kPages), std::end(kPages), [&](auto& p) { return p.page == page; });
    if (page_exists) {
      SetInvalidFieldInCdb(task, 3);
    } else {
      SetInvalidFieldInCdb(task, 2, 5);
    }
    return Disposition::kDone;
  }

  ModePages::Values v;
  switch (pc) {
    case kPcCurrent:
      v = lun.mode_pages().current();
      break;
    case kPcDefault:
      v = lun.mode_pages().defaults();
      break;
    case kPcSaved:
      v = lun.mode_pages().saved();
      break;
    default:
      break;
  }

  uint8_t data[256];
  const size_t header = ten ? 8 : 4;
  std::memset(data, 0, header);
  size_t pos = header;

  // Block descriptor (SBC-3 6.4.2): short (8 bytes) or, with LLBAA in MODE SENSE(10), long (16).
  // Nothing in it is changeable.
  size_t bd_len = 0;
  if (!dbd) {
    const uint64_t blocks = pc == kPcChangeable ? 0 : lun.num_blocks();
    const uint32_t bs = pc == kPcChangeable ? 0 : lun.block_size();
    if (llbaa) {
      bd_len = 16;
      std::memset(data + pos, 0, 16);
      StoreBe64(data + pos, blocks);
      StoreBe32(data + pos + 12, bs);
    } else {
      bd_len = 8;
      StoreBe32(data + pos, blocks > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<uint32_t>(blocks));
      StoreBe32(data + pos + 4, bs & 0x00FFFFFF);  // byte 4 reserved, LOGICAL BLOCK LENGTH 5..7
    }
    pos += bd_len;
  }

  for (const PageDef& p : kPages) {
    const bool page_ok = page == kPageAll || p.page == page;
    const bool sub_ok = subpage == kSubpageAll || p.subpage == subpage;
    if (!page_ok || !sub_ok) continue;
    BuildPage(p, pc, v, Savable(lun), data + pos);
    pos += p.len;
  }

  // Device-specific parameter (SBC-3 6.4.1): WP for a write-protected LUN (read-only, or SWP set in
  // the control page), DPOFUA=1 because DPO and FUA are accepted on READ/WRITE.
  const bool wp = lun.read_only() || lun.mode_pages().software_write_protect();
  const uint8_t device_specific = (wp ? 0x80 : 0x00) | 0x10;
  if (ten) {
    StoreBe16(data, static_cast<uint16_t>(pos - 2));  // MODE DATA LENGTH excludes itself
    data[2] = 0;                                      // MEDIUM TYPE
    data[3] = device_specific;
    data[4] = (bd_len == 16) ? 0x01 : 0x00;  // LONGLBA
    StoreBe16(data + 6, static_cast<uint16_t>(bd_len));
  } else {
    data[0] = static_cast<uint8_t>(pos - 1);
    data[1] = 0;
    data[2] = device_specific;
    data[3] = static_cast<uint8_t>(bd_len);
  }
  ReturnData(task, data, pos, alloc);
  return Disposition::kDone;
}

void ParameterListLengthError(Task& task) {
  SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
}

void SaveDone(void* ctx, int err) {
  Task& task = *static_cast<Task*>(ctx);
  // The new values are current; only saving them failed (SPC-4 6.9 leaves the outcome to the
  // device server): report it rather than claim they are saved.
  if (err != 0) SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
  task.Complete();
}

Disposition ModeSelect(const Command& cmd, bool ten) {
  // SPC-4 6.9 (MODE SELECT(6)) and 6.10 (MODE SELECT(10)).
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  if ((cdb[1] & ~0x11) != 0) {  // only PF (bit 4) and SP (bit 0) are defined
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  const size_t reserved_end = ten ? 7 : 4;
  for (size_t i = 2; i < reserved_end; ++i) {
    if (cdb[i] != 0) {
      SetInvalidFieldInCdb(task, static_cast<uint16_t>(i));
      return Disposition::kDone;
    }
  }
  const bool pf = (cdb[1] & 0x10) != 0;
  const bool sp = (cdb[1] & 0x01) != 0;
  const uint32_t len = ten ? LoadBe16(cdb + 7) : cdb[4];
  if (!pf) {
    // PF=0 would make the pages vendor specific (SPC-4 6.9); we only take the standard format.
    SetInvalidFieldInCdb(task, 1, 4);
    return Disposition::kDone;
  }
  if (sp && !Savable(lun)) {
    // SPC-4 6.9: SP=1 on a logical unit that cannot save pages.
    SetInvalidFieldInCdb(task, 1, 0);
    return Disposition::kDone;
  }
  task.transfer_bytes = len;
  if (len == 0) return Disposition::kDone;  // SPC-4 6.9: no data, nothing changes
  if (task.data_out_len < len || task.buf == nullptr) {
    ParameterListLengthError(task);
    return Disposition::kDone;
  }
  const uint8_t* d = task.buf;

  // Mode parameter header (SPC-4 7.5.5): MODE DATA LENGTH is reserved in MODE SELECT, MEDIUM TYPE
  // is 00h for a direct-access device, and in the device-specific parameter WP is ignored while
  // DPOFUA and the rest are reserved (SBC-3 6.4.1).
  const size_t header = ten ? 8 : 4;
  if (len < header) {
    ParameterListLengthError(task);
    return Disposition::kDone;
  }
  size_t bd_len;
  bool longlba = false;
  if (ten) {
    if (d[0] != 0 || d[1] != 0) return BadParameter(task, d[0] ? 0 : 1);
    if (d[2] != 0) return BadParameter(task, 2);
    if ((d[3] & 0x7F) != 0) return BadParameter(task, 3);
    if ((d[4] & 0xFE) != 0 || d[5] != 0) {
      return BadParameter(task, d[5] ? 5 : 4);
    }
    longlba = (d[4] & 0x01) != 0;
    bd_len = LoadBe16(d + 6);
  } else {
    if (d[0] != 0) return BadParameter(task, 0);
    if (d[1] != 0) return BadParameter(task, 1);
    if ((d[2] & 0x7F) != 0) return BadParameter(task, 2);
    bd_len = d[3];
  }
  const size_t bd_unit = longlba ? 16 : 8;
  if (bd_len != 0 && bd_len != bd_unit) {
    // One block descriptor at most: the LUN has one block size for the whole medium.
    SetInvalidFieldInParameterList(task, ten ? 6 : 3);
    return Disposition::kDone;
  }
  if (header + bd_len > len) {
    ParameterListLengthError(task);
    return Disposition::kDone;
  }
  if (bd_len != 0) {
    // SBC-3 6.4.2: the block descriptor may restate the capacity and block length; neither can be
    // changed here (NUMBER OF LOGICAL BLOCKS 0 means "no change").
    const uint8_t* bd = d + header;
    const uint64_t blocks = lun.num_blocks();
    uint64_t want_blocks;
    uint32_t want_bs;
    size_t bs_off;
    if (longlba) {
      want_blocks = LoadBe64(bd);
      if (LoadBe32(bd + 8) != 0) {
        return BadParameter(task, static_cast<uint16_t>(header + 8));
      }
      want_bs = LoadBe32(bd + 12);
      bs_off = 12;
    } else {
      want_blocks = LoadBe32(bd);
      if (bd[4] != 0) {
        return BadParameter(task, static_cast<uint16_t>(header + 4));
      }
      want_bs = LoadBe24(bd + 5);
      bs_off = 5;
      if (want_blocks == 0xFFFFFFFFu && blocks >= 0xFFFFFFFFull) want_blocks = blocks;
    }
    if (want_blocks != 0 && want_blocks != blocks) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(header));
      return Disposition::kDone;
    }
    if (want_bs != lun.block_size()) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(header + bs_off));
      return Disposition::kDone;
    }
  }

  // Pages: each must be one we have, with our page length, and differ from the current values only
  // in changeable bits (SPC-4 6.9). Nothing changes unless the whole list is valid.
  const ModePages::Values current = lun.mode_pages().current();
  ModePages::Values next = current;
  size_t pos = header + bd_len;
  while (pos < len) {
    const uint8_t b0 = d[pos];
    const bool spf = (b0 & 0x40) != 0;
    const size_t hdr = spf ? 4 : 2;
    if (pos + hdr > len) {
      ParameterListLengthError(task);
      return Disposition::kDone;
    }
    if ((b0 & 0x80) != 0) {  // SPC-4 7.5.7: PS is reserved in MODE SELECT
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(pos), 7);
      return Disposition::kDone;
    }
    const uint8_t page = b0 & 0x3F;
    const uint8_t subpage = spf ? d[pos + 1] : 0;
    const PageDef* def = FindPage(page, subpage);
    if (def == nullptr || (def->subpage != 0) != spf) {
      SetInvalidFieldInParameterList(
          task, static_cast<uint16_t>(spf && def == nullptr && FindPage(page, 0) ? pos + 1 : pos));
      return Disposition::kDone;
    }
    const size_t plen = spf ? LoadBe16(d + pos + 2) : d[pos + 1];
    if (plen != def->len - hdr) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(spf ? pos + 2 : pos + 1));
      return Disposition::kDone;
    }
    if (pos + def->len > len) {
      ParameterListLengthError(task);
      return Disposition::kDone;
    }
    uint8_t cur[kMaxPageLen];
    uint8_t changeable[kMaxPageLen];
    BuildPage(*def, kPcCurrent, current, false, cur);
    BuildPage(*def, kPcChangeable, current, false, changeable);
    for (size_t i = hdr; i < def->len; ++i) {
      const uint8_t diff = static_cast<uint8_t>((d[pos + i] ^ cur[i]) & ~changeable[i]);
      if (diff != 0) {
        int8_t bit = 7;
        while (((diff >> bit) & 1) == 0) --bit;
        SetInvalidFieldInParameterList(task, static_cast<uint16_t>(pos + i), bit);
        return Disposition::kDone;
      }
    }
    if (def->page == 0x08) next.wce = (d[pos + 2] & 0x04) != 0;
    if (def->page == 0x0A && def->subpage == 0x00) next.swp = (d[pos + 4] & 0x08) != 0;
    pos += def->len;
  }

  if (lun.mode_pages().SetCurrent(next)) {
    // SPC-4 6.9: the other I_T nexuses learn that the parameters they see have changed.
    lun.RaiseUnitAttention(
        UnitAttention{Asc::kModeParametersChanged.asc, Asc::kModeParametersChanged.ascq},
        task.nexus);
  }
  if (sp) {
    // SPC-4 6.9: SP=1 saves every savable page, which here means the current values.
    lun.mode_pages().SetSaved(lun.mode_pages().current());
    if (lun.SaveState(task.slot, backing::IoCompletion{SaveDone, &task})) {
      return Disposition::kPending;
    }
  }
  return Disposition::kDone;
}

}  // namespace

Disposition ModeSense6(const Command& cmd) { return ModeSense(cmd, false); }
Disposition ModeSense10(const Command& cmd) { return ModeSense(cmd, true); }
Disposition ModeSelect6(const Command& cmd) { return ModeSelect(cmd, false); }
Disposition ModeSelect10(const Command& cmd) { return ModeSelect(cmd, true); }

}  // namespace internal
}  // namespace iscsigw::scsi
