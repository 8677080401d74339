// SPC-4 primary commands: TEST UNIT READY, INQUIRY (standard data and VPD pages), REPORT LUNS,
// REQUEST SENSE. MODE SENSE/SELECT are in mode_pages.cc.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "base/endian.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi::internal {
namespace {

// SPC-4 7.8.2 (Supported VPD pages) lists these in ascending order.
constexpr uint8_t kSupportedVpdPages[] = {0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2};

// SPC-4 4.4.1: ASCII data fields hold 20h..7Eh, left aligned, padded with spaces.
void PutAscii(uint8_t* dst, std::string_view s, size_t width) {
  for (size_t i = 0; i < width; ++i) {
    const char ch = i < s.size() ? s[i] : ' ';
    dst[i] = (ch >= 0x20 && ch <= 0x7E) ? static_cast<uint8_t>(ch) : '_';
  }
}

// The unit serial number; when none is configured, the NAA id in hex keeps it unique.
size_t SerialNumber(const Lun& lun, char* out, size_t cap) {
  const std::string& serial = lun.config().serial;
  if (!serial.empty()) {
    const size_t n = std::min(serial.size(), cap);
    std::memcpy(out, serial.data(), n);
    return n;
  }
  const int n =
      std::snprintf(out, cap, "%016llx", static_cast<unsigned long long>(lun.config().naa_id));
  return n < 0 ? 0 : std::min(static_cast<size_t>(n), cap - 1);
}

uint8_t PeripheralByte(const Lun* lun) {
  // SPC-4 6.6.2: qualifier 000b / direct access block device (00h); for an incorrect logical unit
  // qualifier 011b / unknown device type (1Fh).
  return lun != nullptr ? 0x00 : 0x7F;
}

size_t StandardInquiry(const Lun* lun, uint8_t* d) {
  // SPC-4 6.6.2, table 140.
  constexpr size_t kLen = 66;  // through four VERSION DESCRIPTORs
  std::memset(d, 0, kLen);
  d[0] = PeripheralByte(lun);
  d[1] = 0x00;         // RMB=0: not removable
  d[2] = 0x06;         // VERSION: SPC-4
  d[3] = 0x10 | 0x02;  // HISUP=1 (hierarchical LUNs), RESPONSE DATA FORMAT=2
  d[4] = kLen - 5;     // ADDITIONAL LENGTH
  d[5] = 0x10 | 0x08;  // TPGS=01b: implicit ALUA (REPORT TARGET PORT GROUPS); 3PC=1: EXTENDED COPY
  d[7] = 0x02;         // CMDQUE=1: full task management model
  LunConfig defaults;
  const LunConfig& cfg = lun != nullptr ? lun->config() : defaults;
  PutAscii(d + 8, cfg.vendor, 8);
  PutAscii(d + 16, cfg.product, 16);
  PutAscii(d + 32, cfg.revision, 4);
  // VERSION DESCRIPTORs (SPC-4 table 144): SAM-5, iSCSI (no version claimed), SPC-4, SBC-3.
  StoreBe16(d + 58, 0x00A0);
  StoreBe16(d + 60, 0x0960);
  StoreBe16(d + 62, 0x0460);
  StoreBe16(d + 64, 0x04C0);
  return kLen;
}

// Appends a designation descriptor header (SPC-4 7.8.6.1, table 459); returns bytes written.
size_t PutDesignatorHeader(uint8_t* d, uint8_t protocol, uint8_t code_set, bool piv,
                           uint8_t association, uint8_t type, uint8_t length) {
  d[0] = static_cast<uint8_t>((protocol << 4) | code_set);
  d[1] = static_cast<uint8_t>((piv ? 0x80 : 0) | (association << 4) | type);
  d[2] = 0;
  d[3] = length;
  return 4;
}

// SCSI name string designator: UTF-8, null terminated, padded with nulls to a multiple of 4
// (SPC-4 7.8.6.11). Longer names than the 255-byte field allows are cut (an IQN is <= 223 bytes).
size_t PutNameString(uint8_t* d, uint8_t association, std::string_view name) {
  constexpr uint8_t kProtocolIscsi = 0x5;
  constexpr uint8_t kCodeSetUtf8 = 0x3;
  constexpr uint8_t kTypeScsiName = 0x8;
  const size_t n = std::min<size_t>(name.size(), 251);
  const size_t padded = (n + 1 + 3) & ~size_t{3};
  size_t pos = PutDesignatorHeader(d, kProtocolIscsi, kCodeSetUtf8, true, association,
                                   kTypeScsiName, static_cast<uint8_t>(padded));
  std::memcpy(d + pos, name.data(), n);
  std::memset(d + pos + n, 0, padded - n);
  return pos + padded;
}

size_t VpdDeviceIdentification(const Command& cmd, uint8_t* d) {
  // SPC-4 7.8.6.
  const Lun& lun = *cmd.lun;
  constexpr uint8_t kAssocLu = 0, kAssocTargetPort = 1, kAssocTargetDevice = 2;
  constexpr uint8_t kCodeSetBinary = 1, kCodeSetAscii = 2;
  d[0] = PeripheralByte(&lun);
  d[1] = 0x83;
  size_t pos = 4;

  // NAA designator (SPC-4 7.8.6.6). naa_id carries the NAA field in its top nibble: type 5 (IEEE
  // Registered) is the whole 8-byte designator; type 6 (IEEE Registered Extended) is 16 bytes, of
  // which naa_id is the first 8 and the VENDOR SPECIFIC IDENTIFIER EXTENSION is left zero.
  if (lun.config().naa_id != 0) {
    const bool extended = (lun.config().naa_id >> 60) == 0x6;
    const uint8_t len = extended ? 16 : 8;
    pos += PutDesignatorHeader(d + pos, 0, kCodeSetBinary, false, kAssocLu, 0x3, len);
    StoreBe64(d + pos, lun.config().naa_id);
    if (extended) std::memset(d + pos + 8, 0, 8);
    pos += len;
  }

  // T10 vendor ID based designator (SPC-4 7.8.6.4): T10 VENDOR IDENTIFICATION + unit serial.
  {
    char serial[64];
    const size_t n = SerialNumber(lun, serial, sizeof(serial));
    pos += PutDesignatorHeader(d + pos, 0, kCodeSetAscii, false, kAssocLu, 0x1,
                               static_cast<uint8_t>(8 + n));
    PutAscii(d + pos, lun.config().vendor, 8);
    std::memcpy(d + pos + 8, serial, n);
    pos += 8 + n;
  }

  // Relative target port identifier (SPC-4 7.8.6.7), for the port this command came through.
  {
    const uint16_t rel = cmd.task.nexus != nullptr ? cmd.task.nexus->relative_port_id()
                                                   : cmd.target.relative_port_id;
    pos += PutDesignatorHeader(d + pos, 0x5, kCodeSetBinary, true, kAssocTargetPort, 0x4, 4);
    d[pos] = 0;
    d[pos + 1] = 0;
    StoreBe16(d + pos + 2, rel);
    pos += 4;
  }

  // Target port group (SPC-4 7.8.6.8): the ALUA group of that port, this gateway's.
  {
    pos += PutDesignatorHeader(d + pos, 0x5, kCodeSetBinary, true, kAssocTargetPort, 0x5, 4);
    d[pos] = 0;
    d[pos + 1] = 0;
    StoreBe16(d + pos + 2, cmd.target.target_port_group);
    pos += 4;
  }

  // SCSI target port name (RFC 7143 / SPC-4 7.8.6.11): "<iqn>,t,0x<TPGT in hex>", and the SCSI
  // target device name: "<iqn>".
  {
    char port[300];
    const int n = std::snprintf(port, sizeof(port), "%s,t,0x%04x", cmd.target.name.c_str(),
                                static_cast<unsigned>(cmd.target.tpgt));
    const size_t len = n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof(port) - 1);
    pos += PutNameString(d + pos, kAssocTargetPort, std::string_view(port, len));
    pos += PutNameString(d + pos, kAssocTargetDevice, cmd.target.name);
  }

  StoreBe16(d + 2, static_cast<uint16_t>(pos - 4));
  return pos;
}

size_t VpdPage(const Command& cmd, uint8_t page, uint8_t* d) {
  const Lun& lun = *cmd.lun;
  const uint32_t bs = lun.block_size();
  std::memset(d, 0, 64);
  d[0] = PeripheralByte(&lun);
  d[1] = page;
  switch (page) {
    case 0x00:  // SPC-4 7.8.14 Supported VPD pages
      StoreBe16(d + 2, sizeof(kSupportedVpdPages));
      std::memcpy(d + 4, kSupportedVpdPages, sizeof(kSupportedVpdPages));
      return 4 + sizeof(kSupportedVpdPages);
    case 0x80: {  // SPC-4 7.8.15 Unit Serial Number
      char serial[64];
      const size_t n = SerialNumber(lun, serial, sizeof(serial));
      StoreBe16(d + 2, static_cast<uint16_t>(n));
      PutAscii(d + 4, std::string_view(serial, n), n);
      return 4 + n;
    }
    case 0x83:
      return VpdDeviceIdentification(cmd, d);
    case 0x8F:  // SPC-4 7.8.17 Third-party Copy
      return VpdThirdPartyCopy(cmd, d);
    case 0xB0: {  // SBC-3 6.5.3 Block Limits
      StoreBe16(d + 2, 0x3C);
      // At least a physical block (SBC-3 6.5.3: transfers of a multiple of it are optimal).
      const uint32_t granularity =
          std::max<uint32_t>(bs < 4096 ? 4096 / bs : 1, cmd.lun->blocks_per_physical());
      StoreBe16(d + 6, static_cast<uint16_t>(granularity));  // OPTIMAL TRANSFER LENGTH GRANULARITY
      StoreBe32(d + 8, static_cast<uint32_t>(kMaxTransferBytes / bs));  // MAXIMUM TRANSFER LENGTH
      StoreBe32(d + 12, static_cast<uint32_t>(kOptimalTransferBytes / bs));  // OPTIMAL TRANSFER
      d[4] = 0x00;  // WSNZ=0: WRITE SAME of zero blocks writes to the end of the medium
      d[5] = static_cast<uint8_t>(kMaxCompareAndWriteBlocks);  // MAXIMUM COMPARE AND WRITE LENGTH
      if (cmd.lun->store().thin_provisioned()) {
        StoreBe32(d + 20, kMaxUnmapBlocks);       // MAXIMUM UNMAP LBA COUNT
        StoreBe32(d + 24, kMaxUnmapDescriptors);  // MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT
        // OPTIMAL UNMAP GRANULARITY, and UGAVALID with UNMAP GRANULARITY ALIGNMENT 0.
        StoreBe32(d + 28,
                  static_cast<uint32_t>(std::max<uint64_t>(
                      cmd.lun->blocks_per_physical(), cmd.lun->store().unmap_granularity() / bs)));
        StoreBe32(d + 32, 0x80000000u);
      }
      StoreBe64(d + 36, kMaxWriteSameBytes / bs);  // MAXIMUM WRITE SAME LENGTH
      // SBC-4 6.6.4: MAXIMUM ATOMIC TRANSFER LENGTH and ATOMIC ALIGNMENT from the store; ATOMIC
      // TRANSFER LENGTH GRANULARITY 0 (any length); the atomic boundary fields 0 (WRITE ATOMIC
      // with a non-zero ATOMIC BOUNDARY is refused).
      const AtomicBlocks atomic = AtomicBlocksOf(*cmd.lun);
      StoreBe32(d + 44, atomic.max);
      StoreBe32(d + 48, atomic.alignment);
      return 64;
    }
    case 0xB1:  // SBC-3 6.5.2 Block Device Characteristics
      StoreBe16(d + 2, 0x3C);
      StoreBe16(d + 4, 0x0001);  // MEDIUM ROTATION RATE: non-rotating medium
      // SBC-4 6.6.2: WABEREQ=01b, a read of a block that SANITIZE BLOCK ERASE erased returns GOOD
      // (zeros); WACEREQ=00b, CRYPTOGRAPHIC ERASE is not supported (sbc_sanitize.cc).
      d[7] = 0x40;
      return 64;
    case 0xB2:  // SBC-3 6.5.4 Logical Block Provisioning
      StoreBe16(d + 2, 0x0004);
      if (cmd.lun->store().thin_provisioned()) {
        d[5] = 0x80 | 0x40 | 0x20 | 0x04;  // LBPU, LBPWS, LBPWS10, LBPRZ (ANC_SUP=0, DP=0)
        d[6] = 0x02;                       // PROVISIONING TYPE: thin provisioned
      }
      return 8;
    default:
      return 0;
  }
}

}  // namespace

void ReturnData(Task& task, const uint8_t* data, size_t len, size_t alloc_len) {
  const size_t n = std::min({len, alloc_len, static_cast<size_t>(task.buf_cap)});
  if (n > 0) std::memcpy(task.buf, data, n);
  task.SetDataInFromBuf(static_cast<uint32_t>(n));
}

Disposition TestUnitReady(const Command& cmd) {
  // SPC-4 6.47: GOOD when the logical unit is ready. The engine has already reported a pending
  // unit attention and any reservation conflict, which come before readiness (SAM-5 5.14); what
  // is left is whether the store reaches its medium (an rbd image still being opened answers NOT
  // READY, LOGICAL UNIT IS IN PROCESS OF BECOMING READY).
  if (const int err = cmd.lun->store().ready(); err != 0) SetStoreError(cmd.task, err, false);
  return Disposition::kDone;
}

Disposition Inquiry(const Command& cmd) {
  // SPC-4 6.6.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const bool evpd = (cdb[1] & 0x01) != 0;
  const uint8_t page = cdb[2];
  const uint16_t alloc = LoadBe16(cdb + 3);
  if ((cdb[1] & 0x02) != 0) {  // CMDDT (obsolete, SPC-3 6.4.1): command support data not offered
    SetInvalidFieldInCdb(task, 1, 1);
    return Disposition::kDone;
  }
  if (!evpd && page != 0) {  // SPC-4 6.6.1: PAGE CODE must be zero when EVPD is zero
    SetInvalidFieldInCdb(task, 2);
    return Disposition::kDone;
  }
  uint8_t data[1024];
  size_t len = 0;
  if (!evpd) {
    len = StandardInquiry(cmd.lun, data);
  } else if (cmd.lun == nullptr) {
    // SPC-4 6.6.1: an incorrect logical unit answers with peripheral qualifier 011b; there is no
    // page content to describe.
    std::memset(data, 0, 4);
    data[0] = PeripheralByte(nullptr);
    data[1] = page;
    len = 4;
  } else {
    len = VpdPage(cmd, page, data);
    if (len == 0) {  // SPC-4 6.6.1: unsupported VPD page
      SetInvalidFieldInCdb(task, 2);
      return Disposition::kDone;
    }
  }
  ReturnData(task, data, len, alloc);
  return Disposition::kDone;
}

Disposition ReportLuns(const Command& cmd) {
  // SPC-4 6.33.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const uint8_t select = cdb[2];
  const uint32_t alloc = LoadBe32(cdb + 6);
  if (alloc < 16) {  // SPC-4 6.33: ALLOCATION LENGTH shall be at least 16
    SetInvalidFieldInCdb(task, 6);
    return Disposition::kDone;
  }
  bool list_luns = false;
  switch (select) {
    case 0x00:  // logical units with LUNs of the addressing methods we use
    case 0x02:  // all logical units
      list_luns = true;
      break;
    case 0x01:  // well known logical units only: we have none
      break;
    default:
      SetInvalidFieldInCdb(task, 2);
      return Disposition::kDone;
  }
  static_assert(kMaxLuns <= 16384, "LUN ids must fit flat space addressing");
  uint8_t data[8 + 8 * kMaxLuns] = {};
  size_t count = 0;
  if (list_luns) {
    for (const auto& lun : cmd.target.luns) {
      if (count == kMaxLuns || lun == nullptr || lun->id() >= 16384) continue;
      uint8_t* e = data + 8 + 8 * count;
      // SAM-5 4.7.7: peripheral device addressing (00b) for ids < 256, flat space (01b) above.
      if (lun->id() < 256) {
        e[0] = 0x00;
        e[1] = static_cast<uint8_t>(lun->id());
      } else {
        e[0] = static_cast<uint8_t>(0x40 | (lun->id() >> 8));
        e[1] = static_cast<uint8_t>(lun->id());
      }
      ++count;
    }
  }
  if (list_luns && task.nexus != nullptr) {
    // SPC-4 6.33: the initiator now has the current inventory, so a pending REPORTED LUNS DATA
    // HAS CHANGED unit attention of this I_T nexus is cleared on every logical unit.
    for (const auto& lun : cmd.target.luns) {
      if (lun != nullptr) task.nexus->ClearUnitAttention(*lun, UnitAttention{0x3F, 0x0E});
    }
  }
  StoreBe32(data, static_cast<uint32_t>(8 * count));  // LUN LIST LENGTH
  ReturnData(task, data, 8 + 8 * count, alloc);
  return Disposition::kDone;
}

Disposition RequestSense(const Command& cmd) {
  // SPC-4 6.39. Status and sense are delivered with every iSCSI response (autosense), so the only
  // states REQUEST SENSE reports are a pending unit attention, which it clears (SAM-5 5.14), and
  // the sanitize state of the LUN.
  Task& task = cmd.task;
  const uint8_t* cdb = task.cdb.data();
  const bool desc = (cdb[1] & 0x01) != 0;
  const uint8_t alloc = cdb[4];
  SenseKey key = SenseKey::kNoSense;
  Asc asc = Asc::kNoAdditionalSenseInformation;
  bool has_progress = false;
  uint16_t progress = 0;
  if (cmd.lun == nullptr) {
    // SPC-4 6.39: for an incorrect logical unit, GOOD status with ILLEGAL REQUEST / LOGICAL UNIT
    // NOT SUPPORTED as the parameter data.
    key = SenseKey::kIllegalRequest;
    asc = Asc::kLogicalUnitNotSupported;
  } else {
    UnitAttention ua;
    if (task.nexus != nullptr && task.nexus->PeekUnitAttention(*cmd.lun, &ua)) {
      task.nexus->PopUnitAttention(*cmd.lun);
      key = SenseKey::kUnitAttention;
      asc = Asc{ua.asc, ua.ascq};
    } else {
      // SBC-4 4.11.3: a sanitize operation in progress (with its progress indication), or
      // sanitize failure mode.
      has_progress = SanitizeSense(*cmd.lun, &key, &asc, &progress) && key == SenseKey::kNotReady;
    }
  }
  // DESC=1 asks for descriptor format (SPC-4 4.5.1), which we support.
  uint8_t data[kFixedSenseLength];
  size_t len;
  if (desc) {
    len = BuildDescriptorSense(data, key, asc);
    if (has_progress) {
      // SPC-4 4.5.2.5: sense key specific sense data descriptor carrying the progress indication.
      data[7] = 8;
      data[8] = 0x02;
      data[9] = 0x06;
      data[10] = 0;
      data[11] = 0;
      data[12] = 0x80;  // SKSV
      data[13] = static_cast<uint8_t>(progress >> 8);
      data[14] = static_cast<uint8_t>(progress);
      data[15] = 0;
      len = 16;
    }
  } else {
    len = BuildFixedSense(data, key, asc, nullptr);
    if (has_progress) {  // SPC-4 4.5.2.4.4: PROGRESS INDICATION in the sense-key specific field
      data[15] = 0x80;
      data[16] = static_cast<uint8_t>(progress >> 8);
      data[17] = static_cast<uint8_t>(progress);
    }
  }
  ReturnData(task, data, len, alloc);
  return Disposition::kDone;
}

}  // namespace iscsigw::scsi::internal
