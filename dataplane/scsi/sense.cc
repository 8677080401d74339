#include "dataplane/scsi/sense.h"

#include <cstring>

namespace iscsigw::scsi {

size_t BuildFixedSense(uint8_t* out, SenseKey key, Asc asc, const FieldPointer* sks) {
  // SPC-4 4.5.3, table 48: fixed format sense data.
  std::memset(out, 0, kFixedSenseLength);
  out[0] = 0x70;  // VALID=0 (no INFORMATION), response code 70h: current error
  out[2] = static_cast<uint8_t>(key) & 0x0F;
  out[7] = kFixedSenseLength - 8;  // ADDITIONAL SENSE LENGTH
  out[12] = asc.asc;
  out[13] = asc.ascq;
  if (sks != nullptr) {
    // SPC-4 4.5.2.4.2, table 45: SKSV, C/D, BPV, BIT POINTER, FIELD POINTER.
    uint8_t b = 0x80;
    if (sks->in_cdb) b |= 0x40;
    if (sks->bit >= 0) b |= 0x08 | (static_cast<uint8_t>(sks->bit) & 0x07);
    out[15] = b;
    out[16] = static_cast<uint8_t>(sks->byte >> 8);
    out[17] = static_cast<uint8_t>(sks->byte);
  }
  return kFixedSenseLength;
}

size_t BuildDescriptorSense(uint8_t* out, SenseKey key, Asc asc) {
  // SPC-4 4.5.2, table 27: descriptor format sense data header.
  std::memset(out, 0, kDescriptorSenseLength);
  out[0] = 0x72;
  out[1] = static_cast<uint8_t>(key) & 0x0F;
  out[2] = asc.asc;
  out[3] = asc.ascq;
  out[7] = 0;  // no sense data descriptors
  return kDescriptorSenseLength;
}

namespace {

void SetCheckConditionWithSks(Task& task, SenseKey key, Asc asc, const FieldPointer* sks) {
  task.status = ScsiStatus::kCheckCondition;
  task.sense_len = static_cast<uint8_t>(BuildFixedSense(task.sense.data(), key, asc, sks));
  task.in_seg_count = 0;
  task.in_len = 0;
}

}  // namespace

void SetCheckCondition(Task& task, SenseKey key, Asc asc) {
  SetCheckConditionWithSks(task, key, asc, nullptr);
}

void SetInvalidFieldInCdb(Task& task, uint16_t byte, int8_t bit) {
  const FieldPointer fp{true, byte, bit};
  SetCheckConditionWithSks(task, SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb, &fp);
}

bool RejectNonZeroCdbBytes(Task& task, uint16_t first, uint16_t last) {
  for (uint16_t i = first; i <= last; ++i) {
    if (task.cdb[i] != 0) {
      SetInvalidFieldInCdb(task, i);
      return true;
    }
  }
  return false;
}

void SetInvalidFieldInParameterList(Task& task, uint16_t byte, int8_t bit) {
  SetParameterListError(task, Asc::kInvalidFieldInParameterList, byte, bit);
}

void SetParameterListError(Task& task, Asc asc, uint16_t byte, int8_t bit) {
  const FieldPointer fp{false, byte, bit};
  SetCheckConditionWithSks(task, SenseKey::kIllegalRequest, asc, &fp);
}

void SetCheckConditionWithInfo(Task& task, SenseKey key, Asc asc, uint64_t information) {
  task.status = ScsiStatus::kCheckCondition;
  task.in_seg_count = 0;
  task.in_len = 0;
  uint8_t* s = task.sense.data();
  if (information <= 0xFFFFFFFFull) {
    // SPC-4 4.5.3: VALID=1 and a 4-byte INFORMATION field in bytes 3..6.
    task.sense_len = static_cast<uint8_t>(BuildFixedSense(s, key, asc, nullptr));
    s[0] |= 0x80;
    for (int i = 0; i < 4; ++i) s[3 + i] = static_cast<uint8_t>(information >> (24 - 8 * i));
    return;
  }
  // SPC-4 4.5.2.2: an information sense data descriptor (type 00h, VALID=1, 8-byte INFORMATION).
  BuildDescriptorSense(s, key, asc);
  uint8_t* d = s + kDescriptorSenseLength;
  std::memset(d, 0, 12);
  d[0] = 0x00;
  d[1] = 0x0A;
  d[2] = 0x80;
  for (int i = 0; i < 8; ++i) d[4 + i] = static_cast<uint8_t>(information >> (56 - 8 * i));
  s[7] = 12;
  task.sense_len = static_cast<uint8_t>(kDescriptorSenseLength + 12);
}

}  // namespace iscsigw::scsi
