// Reservations: RESERVE(6)/(10) and RELEASE(6)/(10) with SPC-2 semantics, PERSISTENT RESERVE IN
// (SPC-4 6.16) and PERSISTENT RESERVE OUT (SPC-4 6.17) for all six reservation types, and the
// RESERVATION CONFLICT check every command goes through while a reservation exists (SPC-4 5.13.1,
// SBC-3 4.17, SPC-2 5.5.1).
//
// Not offered: SPEC_I_PT (registering other I_T nexuses in one command; SIP_C=0 in REPORT
// CAPABILITIES) and element scope. APTPL needs a state store or a shared object (PTPL_C follows).
//
// A LUN that several gateways export (LunConfig::shared_state) keeps its persistent reservations
// in the shared object: PERSISTENT RESERVE OUT runs on the object's thread as a compare-and-swap
// of the whole state, then hands the new state, and the unit attentions and aborts it raises, to
// the other gateways and waits for them (RunSharedProut). Each gateway checks commands against
// its own copy, which that hand-over and a reread after a lost watch keep current. The protocol,
// step by step, and its failure cases: docs/multi-gateway.md.
#include "dataplane/scsi/reservations.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <sstream>

#include "base/endian.h"
#include "base/log.h"
#include "base/on_release.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/op_table.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi {

// ---------------------------------------------------------------------------------------------
// Reservations state

namespace {
bool SameToken(const std::weak_ptr<const void>& a, const std::weak_ptr<const void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}
}  // namespace

bool Reservations::spc2_reserved() {
  if (spc2_held_ && spc2_holder_.expired()) {
    // SPC-4 5.13.3: an I_T nexus loss releases the reservation its nexus held.
    spc2_held_ = false;
    spc2_holder_.reset();
    UpdateActive();
  }
  return spc2_held_;
}

bool Reservations::spc2_reserved_by(const Nexus& nexus) {
  return spc2_reserved() && SameToken(spc2_holder_, nexus.token());
}

void Reservations::spc2_reserve(const Nexus& nexus) {
  spc2_holder_ = nexus.token();
  spc2_held_ = true;
  UpdateActive();
}

void Reservations::spc2_release() {
  spc2_held_ = false;
  spc2_holder_.reset();
  UpdateActive();
}

Reservations::Registrant* Reservations::FindRegistrant(const Nexus* nexus) {
  if (nexus == nullptr) return nullptr;
  for (Registrant& r : regs_) {
    if (r.nexus.Matches(*nexus)) return &r;
  }
  return nullptr;
}

void Reservations::set_pr(bool reserved, uint8_t type) {
  pr_reserved_ = reserved;
  pr_type_ = reserved ? type : 0;
  if (!reserved) {
    for (Registrant& r : regs_) r.holder = false;
  }
  UpdateActive();
}

void Reservations::UpdateActive() {
  active_.store(spc2_held_ || pr_reserved_ || unknown_.load(std::memory_order_acquire),
                std::memory_order_release);
}

std::string Reservations::Serialize() const {
  if (!aptpl_) return "";
  char line[64];
  std::snprintf(line, sizeof(line), "pr aptpl gen=%" PRIu32 "\n", generation_);
  return line + SerializeRegistrations();
}

std::string Reservations::SerializeShared() const {
  char line[64];
  std::snprintf(line, sizeof(line), "pr shared gen=%" PRIu32 " aptpl=%d\n", generation_,
                aptpl_ ? 1 : 0);
  return line + SerializeRegistrations();
}

std::string Reservations::SerializeRegistrations() const {
  std::string out;
  char line[128];
  for (const Registrant& r : regs_) {
    std::snprintf(line, sizeof(line),
                  "pr reg key=%016" PRIx64 " tg=%d rel=%u any=%d holder=%d port=", r.key,
                  r.all_tg_pt ? 1 : 0, static_cast<unsigned>(r.nexus.relative_port_id),
                  r.nexus.any_isid ? 1 : 0, r.holder ? 1 : 0);
    out += line;
    out += r.nexus.initiator;
    out += "\n";
  }
  if (pr_reserved_) {
    std::snprintf(line, sizeof(line), "pr res type=%u\n", static_cast<unsigned>(pr_type_));
    out += line;
  }
  return out;
}

void Reservations::Restore(const std::string& blob) { Load(blob, false); }

void Reservations::RestoreShared(std::string_view blob) {
  unknown_.store(false, std::memory_order_release);
  Load(blob, true);
}

void Reservations::Load(std::string_view blob, bool shared) {
  std::istringstream in{std::string(blob)};
  std::string line;
  bool found = false;
  bool aptpl = false;
  uint32_t gen = 0;
  std::vector<Registrant> regs;
  int type = -1;
  while (std::getline(in, line)) {
    unsigned g = 0, rel = 0, t = 0;
    int tg = 0, any = 0, holder = 0, n = 0, a = 0;
    uint64_t key = 0;
    if (!shared && std::sscanf(line.c_str(), "pr aptpl gen=%u", &g) == 1) {
      found = aptpl = true;
      gen = g;
    } else if (shared && std::sscanf(line.c_str(), "pr shared gen=%u aptpl=%d", &g, &a) == 2) {
      found = true;
      aptpl = a != 0;
      gen = g;
    } else if (std::sscanf(line.c_str(),
                           "pr reg key=%16" SCNx64 " tg=%d rel=%u any=%d holder=%d port=%n", &key,
                           &tg, &rel, &any, &holder, &n) == 5 &&
               n > 0 && static_cast<size_t>(n) < line.size()) {
      Registrant r;
      r.key = key;
      r.all_tg_pt = tg != 0;
      r.nexus = NexusMatch{line.substr(n), any != 0, static_cast<uint16_t>(rel)};
      r.holder = holder != 0;
      regs.push_back(std::move(r));
    } else if (std::sscanf(line.c_str(), "pr res type=%u", &t) == 1) {
      type = static_cast<int>(t);
    }
  }
  // A saved blob without APTPL restores nothing; a shared one is the whole state (empty: none).
  if (!found && !shared) return;
  if (!found) regs.clear();
  aptpl_ = aptpl;
  generation_ = gen;
  regs_ = std::move(regs);
  const bool valid_type = type == kPrWriteExclusive || type == kPrExclusiveAccess ||
                          RegistrantsOnlyType(static_cast<uint8_t>(type)) ||
                          AllRegistrantsType(static_cast<uint8_t>(type));
  const bool has_holder =
      std::any_of(regs_.begin(), regs_.end(), [](const Registrant& r) { return r.holder; });
  if (valid_type && has_holder) {
    pr_reserved_ = true;
    pr_type_ = static_cast<uint8_t>(type);
  } else {
    pr_reserved_ = false;
    pr_type_ = 0;
    for (Registrant& r : regs_) r.holder = false;
  }
  UpdateActive();
}

namespace internal {
namespace {

// PERSISTENT RESERVE OUT service actions (SPC-4 6.17.2, table 177).
enum ProutAction : uint8_t {
  kRegister = 0x0,
  kReserve = 0x1,
  kRelease = 0x2,
  kClear = 0x3,
  kPreempt = 0x4,
  kPreemptAndAbort = 0x5,
  kRegisterAndIgnore = 0x6,
  kRegisterAndMove = 0x7,
};

constexpr uint8_t kProtocolIscsi = 0x5;

bool ValidType(uint8_t type) {
  return type == kPrWriteExclusive || type == kPrExclusiveAccess ||
         Reservations::RegistrantsOnlyType(type) || Reservations::AllRegistrantsType(type);
}

// Exclusive Access family: even reads conflict for non-holders.
bool ExclusiveAccessType(uint8_t type) {
  return type == kPrExclusiveAccess || type == kPrExclusiveAccessRegistrantsOnly ||
         type == kPrExclusiveAccessAllRegistrants;
}

void SetConflict(Task& task) {
  task.status = ScsiStatus::kReservationConflict;
  task.sense_len = 0;
  task.in_seg_count = 0;
  task.in_len = 0;
}

// Appends the TransportID of `m` (SPC-4 7.6.4.6, iSCSI): format 01b "<name>,i,0x<isid>" for one
// initiator port, format 00b "<name>" for all of them; null terminated, padded to a multiple of 4,
// at least 20 bytes.
void AppendTransportId(const NexusMatch& m, std::vector<uint8_t>* out) {
  const size_t n = m.initiator.size() + 1;
  size_t padded = (n + 3) & ~size_t{3};
  if (padded < 16) padded = 16;
  const size_t base = out->size();
  out->resize(base + 4 + padded, 0);
  uint8_t* d = out->data() + base;
  d[0] = static_cast<uint8_t>((m.any_isid ? 0x00 : 0x40) | kProtocolIscsi);
  StoreBe16(d + 2, static_cast<uint16_t>(padded));
  std::memcpy(d + 4, m.initiator.data(), m.initiator.size());
}

// Parses an iSCSI TransportID (SPC-4 7.6.4.6) at d[0..len); the parameter list offset `at` is for
// the sense field pointer. Returns false with the task's sense set.
bool ParseTransportId(Task& task, const uint8_t* d, size_t len, size_t at, NexusMatch* out) {
  if (len < 4) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
    return false;
  }
  const uint8_t format = d[0] >> 6;
  if ((d[0] & 0x0F) != kProtocolIscsi || (d[0] & 0x30) != 0 || format > 1) {
    SetInvalidFieldInParameterList(task, static_cast<uint16_t>(at));
    return false;
  }
  const size_t add = LoadBe16(d + 2);
  if (add % 4 != 0 || add < 4) {
    SetInvalidFieldInParameterList(task, static_cast<uint16_t>(at + 2));
    return false;
  }
  if (4 + add > len) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
    return false;
  }
  const char* s = reinterpret_cast<const char*>(d + 4);
  const size_t slen = strnlen(s, add);
  if (slen == 0 || slen == add) {  // empty or not null terminated
    SetInvalidFieldInParameterList(task, static_cast<uint16_t>(at + 4));
    return false;
  }
  std::string name(s, slen);
  if (format == 1) {
    // "<name>,i,0x<isid>": the ISID compares in lower case, as the transport formats it.
    const size_t sep = name.find(",i,0x");
    if (sep == std::string::npos || sep == 0 || name.size() - sep - 5 != 12) {
      SetInvalidFieldInParameterList(task, static_cast<uint16_t>(at + 4));
      return false;
    }
    for (size_t i = sep + 5; i < name.size(); ++i) {
      name[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
    }
  } else if (name.find(',') != std::string::npos) {
    SetInvalidFieldInParameterList(task, static_cast<uint16_t>(at + 4));
    return false;
  }
  *out = NexusMatch{std::move(name), format == 0, 0};
  return true;
}

// What a PERSISTENT RESERVE OUT does to other I_T nexuses (SPC-4 5.13.11): unit attentions for
// registrants, and for PREEMPT AND ABORT the preempted nexuses whose tasks are aborted. Raised on
// this gateway once the change is in effect, and on the others through the shared object.
struct ProutEffects {
  std::vector<std::pair<UnitAttention, NexusMatch>> uas;
  std::vector<NexusMatch> aborted;
};

// Queues `asc` for every registrant matching `pred`.
template <typename Pred>
void RaiseForRegistrants(ProutEffects& fx, const std::vector<Reservations::Registrant>& regs,
                         Asc asc, Pred pred) {
  for (const auto& r : regs) {
    if (pred(r)) fx.uas.emplace_back(UnitAttention{asc.asc, asc.ascq}, r.nexus);
  }
}

void PersistDone(void* ctx, int err) {
  Task& task = *static_cast<Task*>(ctx);
  // The change took effect but could not be made durable: say so instead of GOOD, since APTPL
  // promised it would survive a power loss.
  if (err != 0) SetCheckCondition(task, SenseKey::kHardwareError, Asc::kInternalTargetFailure);
  task.Complete();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Conflict check

bool ReservationConflict(Lun& lun, const Nexus* nexus, const uint8_t* cdb) {
  const uint8_t opcode = cdb[0];
  const uint8_t sa = HasServiceActionField(opcode) ? (cdb[1] & 0x1F) : 0xFF;
  Reservations& res = lun.reservations();
  std::lock_guard lock(res.mu());

  if (res.spc2_reserved() && (nexus == nullptr || !res.spc2_reserved_by(*nexus))) {
    // SPC-2 5.5.1: another I_T nexus holds the logical unit; only commands that report on it (or
    // RELEASE, which does nothing) get through. PERSISTENT RESERVE OUT conflicts (SPC-4 5.13.3).
    switch (opcode) {
      case kInquiry:
      case kRequestSense:
      case kReportLuns:
      case 0x4D:  // LOG SENSE
      case kPersistentReserveIn:
      case kMaintenanceIn:
      case kRelease6:
      case kRelease10:
        return false;
      case kPreventAllowMediumRemoval:
        return (cdb[4] & 0x03) != 0;
      default:
        return true;
    }
  }
  if (res.spc2_reserved() && opcode == kPersistentReserveOut) return true;  // SPC-4 5.13.3

  if (!res.pr_reserved()) return false;
  const uint8_t type = res.pr_type();
  const Reservations::Registrant* reg = res.FindRegistrant(nexus);
  // SPC-4 5.13.1 (table 63): the holder, and every registrant of a registrants-only or
  // all-registrants reservation, has full access.
  if (reg != nullptr && (reg->holder || Reservations::RegistrantsOnlyType(type) ||
                         Reservations::AllRegistrantsType(type))) {
    return false;
  }
  switch (PrClassFor(opcode, sa)) {
    case PrClass::kAllowed:
      return false;
    case PrClass::kRead:
      return ExclusiveAccessType(type);
    case PrClass::kConflict:
      return true;
    case PrClass::kSpecial:
      break;
  }
  switch (opcode) {
    case kPersistentReserveOut:  // the service action decides (SPC-4 table 64)
    case kRelease6:              // GOOD or RESERVATION CONFLICT, decided by Release()
    case kRelease10:
      return false;
    case kPreventAllowMediumRemoval:  // SBC-3 table 13: PREVENT=0 allowed, else conflict
      return (cdb[4] & 0x03) != 0;
    case kStartStopUnit:  // SBC-3 table 13: START=1 with POWER CONDITION 0h allowed
      return !((cdb[4] & 0x01) != 0 && (cdb[4] >> 4) == 0);
    default:  // RESERVE(6)/(10)
      return true;
  }
}

// ---------------------------------------------------------------------------------------------
// RESERVE / RELEASE (SPC-2 7.21, 7.22, 7.11, 7.12)

namespace {

// RESERVE/RELEASE(6): bytes 1..4 hold obsolete third-party and extent fields; (10): byte 1 has
// 3RDPTY and LONGID, bytes 2..8 the third-party device id and parameter list length. Third-party
// and extent reservations are not supported: any of them set is an invalid field.
bool CheckReserveCdb(Task& task) {
  const uint8_t* cdb = task.cdb.data();
  const size_t end = (cdb[0] == kReserve6 || cdb[0] == kRelease6) ? 5 : 9;
  for (size_t i = 1; i < end; ++i) {
    if (cdb[i] != 0) {
      SetInvalidFieldInCdb(task, static_cast<uint16_t>(i));
      return false;
    }
  }
  return true;
}

}  // namespace

Disposition Reserve(const Command& cmd) {
  Task& task = cmd.task;
  if (!CheckReserveCdb(task)) return Disposition::kDone;
  Reservations& res = cmd.lun->reservations();
  std::lock_guard lock(res.mu());
  // SPC-4 5.13.3 (compatible reservation handling, CRH=1): RESERVE conflicts with any persistent
  // reservation or registration.
  if (task.nexus == nullptr || res.pr_reserved() || !res.registrants().empty() ||
      (res.spc2_reserved() && !res.spc2_reserved_by(*task.nexus))) {
    SetConflict(task);
    return Disposition::kDone;
  }
  res.spc2_reserve(*task.nexus);  // SPC-2 7.21: a reserve by the holder succeeds again
  return Disposition::kDone;
}

Disposition Release(const Command& cmd) {
  Task& task = cmd.task;
  if (!CheckReserveCdb(task)) return Disposition::kDone;
  Reservations& res = cmd.lun->reservations();
  std::lock_guard lock(res.mu());
  if (res.pr_reserved()) {
    // SPC-4 5.13.3: GOOD without releasing anything for the persistent reservation holder and for
    // registrants of registrants-only/all-registrants types; RESERVATION CONFLICT otherwise.
    const Reservations::Registrant* reg = res.FindRegistrant(task.nexus);
    const bool ok =
        reg != nullptr && (reg->holder || Reservations::RegistrantsOnlyType(res.pr_type()) ||
                           Reservations::AllRegistrantsType(res.pr_type()));
    if (!ok) SetConflict(task);
    return Disposition::kDone;
  }
  // SPC-2 7.22: the holder releases; from any other I_T nexus RELEASE is a no-op with GOOD.
  if (task.nexus != nullptr && res.spc2_reserved_by(*task.nexus)) res.spc2_release();
  return Disposition::kDone;
}

// ---------------------------------------------------------------------------------------------
// PERSISTENT RESERVE IN (SPC-4 6.16)

Disposition PersistentReserveIn(const Command& cmd) {
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  if ((cdb[1] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  if (RejectNonZeroCdbBytes(task, 2, 6)) return Disposition::kDone;
  const uint8_t sa = cdb[1] & 0x1F;
  const uint16_t alloc = LoadBe16(cdb + 7);
  std::vector<uint8_t> out(8, 0);
  Reservations& res = lun.reservations();
  {
    std::lock_guard lock(res.mu());
    StoreBe32(out.data(), res.generation());
    switch (sa) {
      case 0x00:  // READ KEYS (6.16.2)
        for (const auto& r : res.registrants()) {
          const size_t at = out.size();
          out.resize(at + 8);
          StoreBe64(out.data() + at, r.key);
        }
        break;
      case 0x01:  // READ RESERVATION (6.16.3)
        if (res.pr_reserved()) {
          out.resize(8 + 16, 0);
          uint64_t key = 0;  // all-registrants: the RESERVATION KEY is zero (5.13.7)
          if (!Reservations::AllRegistrantsType(res.pr_type())) {
            for (const auto& r : res.registrants()) {
              if (r.holder) key = r.key;
            }
          }
          StoreBe64(out.data() + 8, key);
          out[8 + 13] = res.pr_type();  // SCOPE 0h (LU_SCOPE) in bits 7..4
        }
        break;
      case 0x02: {  // REPORT CAPABILITIES (6.16.4)
        out.assign(8, 0);
        StoreBe16(out.data(), 8);
        // CRH=1 (RESERVE/RELEASE per 5.13.3) where they are offered, SIP_C=0, ATP_C=1, PTPL_C
        // with a state store or a shared object.
        out[2] = (lun.Offers(kReserve6) ? 0x10 : 0x00) | 0x04 |
                 (lun.persists_reservations() ? 0x01 : 0x00);
        // TMV=1, ALLOW COMMANDS 001b (TEST UNIT READY allowed through WE/EA), PTPL_A.
        out[3] = 0x80 | 0x10 | (res.aptpl() ? 0x01 : 0x00);
        out[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02;  // WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX
        out[5] = 0x01;                              // EX_AC_AR
        ReturnData(task, out.data(), out.size(), alloc);
        return Disposition::kDone;
      }
      case 0x03:  // READ FULL STATUS (6.16.5)
        for (const auto& r : res.registrants()) {
          const size_t at = out.size();
          out.resize(at + 24, 0);
          uint8_t* d = out.data() + at;
          StoreBe64(d, r.key);
          d[12] = static_cast<uint8_t>((r.all_tg_pt ? 0x02 : 0) |
                                       (res.pr_reserved() && r.holder ? 0x01 : 0));
          if (res.pr_reserved() && r.holder) d[13] = res.pr_type();
          StoreBe16(d + 18, r.nexus.relative_port_id != 0 ? r.nexus.relative_port_id
                                                          : cmd.target.relative_port_id);
          AppendTransportId(r.nexus, &out);
          StoreBe32(out.data() + at + 20, static_cast<uint32_t>(out.size() - at - 24));
        }
        break;
      default:
        SetInvalidFieldInCdb(task, 1, 4);
        return Disposition::kDone;
    }
  }
  StoreBe32(out.data() + 4, static_cast<uint32_t>(out.size() - 8));  // ADDITIONAL LENGTH
  ReturnData(task, out.data(), out.size(), alloc);
  return Disposition::kDone;
}

// ---------------------------------------------------------------------------------------------
// PERSISTENT RESERVE OUT (SPC-4 6.17, 5.13.7-5.13.11)

namespace {

// A PERSISTENT RESERVE OUT's parameters, validated.
struct ProutRequest {
  uint8_t sa = 0;
  uint8_t type = 0;
  uint64_t rk = 0;    // RESERVATION KEY
  uint64_t sark = 0;  // SERVICE ACTION RESERVATION KEY
  bool aptpl = false;
  bool all_tg_pt = false;
  bool unreg = false;     // REGISTER AND MOVE
  uint16_t move_rel = 0;  // REGISTER AND MOVE
  NexusMatch move_to;     // REGISTER AND MOVE
};

// One PERSISTENT RESERVE OUT service action at work on `res` (the caller holds res.mu()): what it
// asks, who asks, and where its outcome goes. Each service action below sets the task's status
// when the command fails, queues in `fx` what other nexuses must learn, and sets *persist when
// reservation state changed.
struct ProutCall {
  Reservations& res;
  const ProutRequest& q;
  const Nexus& me;
  Task& task;
  ProutEffects& fx;
  bool* persist;
  Reservations::Registrant* reg;  // the issuer's registration; null when it has none

  // A registration changed: the generation PERSISTENT RESERVE IN reports moves, and the state is
  // to be saved.
  void Changed() const {
    res.bump_generation();
    *persist = true;
  }
  // Whether the issuer is registered and presented its own key; RESERVATION CONFLICT when not
  // (every service action but REGISTER and REGISTER AND IGNORE EXISTING KEY).
  bool Registered() const {
    if (reg != nullptr && reg->key == q.rk) return true;
    SetConflict(task);
    return false;
  }
};

// REGISTER and REGISTER AND IGNORE EXISTING KEY (SPC-4 5.13.7): register, change the key, or
// unregister (5.13.11.3).
void ProutRegister(const ProutCall& c) {
  Reservations& res = c.res;
  auto& regs = res.registrants();
  const uint64_t sark = c.q.sark;
  // An unregistered nexus must present key 0 (REGISTER); a registered one its own key (REGISTER);
  // REGISTER AND IGNORE EXISTING KEY skips the check.
  if (c.q.sa == kRegister && c.q.rk != (c.reg != nullptr ? c.reg->key : 0)) {
    SetConflict(c.task);
    return;
  }
  if (c.reg == nullptr) {
    if (sark == 0) return;  // nothing to register, nothing to do
    const bool ar = res.pr_reserved() && Reservations::AllRegistrantsType(res.pr_type());
    Reservations::Registrant r;
    r.key = sark;
    r.all_tg_pt = c.q.all_tg_pt;
    r.nexus = NexusMatch{c.me.initiator_port(), false,
                         static_cast<uint16_t>(c.q.all_tg_pt ? 0 : c.me.relative_port_id())};
    regs.push_back(std::move(r));
    // A new registrant of an all-registrants reservation holds it too (5.13.9).
    if (ar) regs.back().holder = true;
  } else if (sark != 0) {
    c.reg->key = sark;
  } else {
    // Unregister (5.13.11.3). The holder's reservation goes with it, unless all registrants hold
    // it and others remain.
    const bool was_holder = c.reg->holder && res.pr_reserved();
    const uint8_t old_type = res.pr_type();
    regs.erase(regs.begin() + (c.reg - regs.data()));
    if (was_holder && (!Reservations::AllRegistrantsType(old_type) || regs.empty())) {
      res.set_pr(false, 0);
      // 5.13.11.2.2: releasing a registrants-only reservation tells the other registrants.
      if (Reservations::RegistrantsOnlyType(old_type)) {
        RaiseForRegistrants(c.fx, regs, Asc::kReservationsReleased,
                            [](const auto&) { return true; });
      }
    }
  }
  res.set_aptpl(c.q.aptpl);
  c.Changed();
}

// RESERVE (SPC-4 5.13.9): only a registrant with its key; a reservation of another type or by
// another holder conflicts; the same reservation again is a no-op.
void ProutReserve(const ProutCall& c) {
  Reservations& res = c.res;
  if (!c.Registered()) return;
  if (res.pr_reserved()) {
    if (!c.reg->holder || res.pr_type() != c.q.type) SetConflict(c.task);
    return;
  }
  if (Reservations::AllRegistrantsType(c.q.type)) {
    for (auto& r : res.registrants()) r.holder = true;
  } else {
    c.reg->holder = true;
  }
  res.set_pr(true, c.q.type);
  *c.persist = true;
}

// RELEASE (SPC-4 5.13.11.2): the holder lets the reservation go; the other registrants of a
// registrants-only or all-registrants one learn of it.
void ProutRelease(const ProutCall& c) {
  Reservations& res = c.res;
  if (!c.Registered()) return;
  if (!res.pr_reserved() || !c.reg->holder) return;  // no-op, GOOD
  if (res.pr_type() != c.q.type) {
    SetCheckCondition(c.task, SenseKey::kIllegalRequest,
                      Asc::kInvalidReleaseOfPersistentReservation);
    return;
  }
  const uint8_t old_type = res.pr_type();
  res.set_pr(false, 0);
  if (Reservations::RegistrantsOnlyType(old_type) || Reservations::AllRegistrantsType(old_type)) {
    RaiseForRegistrants(c.fx, res.registrants(), Asc::kReservationsReleased,
                        [](const auto&) { return true; });
  }
  *c.persist = true;
}

// CLEAR (SPC-4 5.13.11): every registration and the reservation go; the others learn of it.
void ProutClear(const ProutCall& c) {
  if (!c.Registered()) return;
  auto& regs = c.res.registrants();
  const Reservations::Registrant* self = c.reg;
  RaiseForRegistrants(c.fx, regs, Asc::kReservationsPreempted,
                      [self](const auto& r) { return &r != self; });
  regs.clear();
  c.res.set_pr(false, 0);
  c.Changed();
}

// PREEMPT and PREEMPT AND ABORT (SPC-4 5.13.11.4): the registrations with SERVICE ACTION
// RESERVATION KEY go, and the issuer may take the reservation. The nexuses preempted are queued
// in fx.aborted; the caller aborts their tasks for PREEMPT AND ABORT.
void ProutPreempt(const ProutCall& c) {
  Reservations& res = c.res;
  if (!c.Registered()) return;
  auto& regs = res.registrants();
  const uint64_t sark = c.q.sark;
  const size_t self = static_cast<size_t>(c.reg - regs.data());
  const bool reserved = res.pr_reserved();
  const uint8_t old_type = res.pr_type();
  uint64_t holder_key = 0;
  for (const auto& r : regs) {
    if (r.holder) holder_key = r.key;
  }
  // Whether the issuer takes the reservation: key 0 against an all-registrants reservation (every
  // other registration goes), or the holder's key against any other type.
  bool take = false;
  bool all_others = false;
  if (reserved && Reservations::AllRegistrantsType(old_type)) {
    take = all_others = sark == 0;
  } else if (reserved) {
    take = sark == holder_key;
  }
  if (!take && sark == 0) {  // 5.13.11.4.4: key 0 names no registration
    SetInvalidFieldInParameterList(c.task, 8);
    return;
  }
  bool named = all_others;
  std::vector<Reservations::Registrant> keep;
  size_t self_in_keep = 0;
  for (size_t i = 0; i < regs.size(); ++i) {
    const auto& r = regs[i];
    if (r.key == sark) named = true;
    if (i != self && (all_others || r.key == sark)) {
      c.fx.aborted.push_back(r.nexus);
      c.fx.uas.emplace_back(
          UnitAttention{Asc::kRegistrationsPreempted.asc, Asc::kRegistrationsPreempted.ascq},
          r.nexus);
      continue;
    }
    if (i == self) self_in_keep = keep.size();
    keep.push_back(r);
  }
  if (!named) {  // 5.13.11.4.4: nobody registered with that key
    SetConflict(c.task);
    return;
  }
  regs = std::move(keep);
  if (take) {
    if (old_type != c.q.type) {
      // 5.13.11.4.3: a new type releases the old reservation for those still registered.
      for (size_t i = 0; i < regs.size(); ++i) {
        if (i == self_in_keep) continue;
        c.fx.uas.emplace_back(
            UnitAttention{Asc::kReservationsReleased.asc, Asc::kReservationsReleased.ascq},
            regs[i].nexus);
      }
    }
    res.set_pr(false, 0);
    res.set_pr(true, c.q.type);
    if (Reservations::AllRegistrantsType(c.q.type)) {
      for (auto& r : regs) r.holder = true;
    } else {
      regs[self_in_keep].holder = true;
    }
  } else if (reserved &&
             std::none_of(regs.begin(), regs.end(), [](const auto& r) { return r.holder; })) {
    res.set_pr(false, 0);
  }
  c.Changed();
}

// REGISTER AND MOVE (SPC-4 5.13.8): the holder hands its reservation to another I_T nexus,
// registering it with SERVICE ACTION RESERVATION KEY.
void ProutRegisterAndMove(const ProutCall& c) {
  Reservations& res = c.res;
  const ProutRequest& q = c.q;
  if (!c.Registered()) return;
  if (!res.pr_reserved() || !c.reg->holder || Reservations::AllRegistrantsType(res.pr_type())) {
    SetConflict(c.task);
    return;
  }
  if (q.sark == 0) {
    SetInvalidFieldInParameterList(c.task, 8);
    return;
  }
  if (q.move_to.Matches(c.me)) {  // moving to itself
    SetInvalidFieldInParameterList(c.task, 24);
    return;
  }
  auto& regs = res.registrants();
  const uint8_t rtype = res.pr_type();
  Reservations::Registrant* dest = nullptr;
  for (auto& r : regs) {
    if (r.nexus.initiator == q.move_to.initiator && r.nexus.any_isid == q.move_to.any_isid &&
        (r.nexus.relative_port_id == 0 || r.nexus.relative_port_id == q.move_rel)) {
      dest = &r;
    }
  }
  c.reg->holder = false;
  if (dest == nullptr) {
    regs.push_back(Reservations::Registrant{q.sark, q.move_to, false, true});
  } else {
    dest->key = q.sark;
    dest->holder = true;
  }
  if (q.unreg) {
    std::erase_if(regs, [&](const auto& r) { return r.nexus.Matches(c.me) && !r.holder; });
  }
  res.set_pr(true, rtype);
  res.set_aptpl(q.aptpl);
  c.Changed();
}

// The service actions by code (SPC-4 6.17.2, table 177).
using ProutHandler = void (*)(const ProutCall&);
constexpr ProutHandler kProutHandlers[] = {
    ProutRegister,         // kRegister
    ProutReserve,          // kReserve
    ProutRelease,          // kRelease
    ProutClear,            // kClear
    ProutPreempt,          // kPreempt
    ProutPreempt,          // kPreemptAndAbort
    ProutRegister,         // kRegisterAndIgnore
    ProutRegisterAndMove,  // kRegisterAndMove
};
static_assert(std::size(kProutHandlers) == kRegisterAndMove + 1);

// The state change of one PERSISTENT RESERVE OUT (SPC-4 5.13.7-5.13.11) on `res` (the caller
// holds res.mu()): sets the task's status when the command fails, queues what other nexuses must
// learn in `fx`, and sets *persist when APTPL state changed. *persist is false on entry.
void ApplyProut(Reservations& res, const ProutRequest& q, const Nexus& me, Task& task,
                ProutEffects& fx, bool* persist) {
  if (res.spc2_reserved()) {  // SPC-4 5.13.3
    SetConflict(task);
    return;
  }
  const bool was_aptpl = res.aptpl();
  if (q.sa < std::size(kProutHandlers)) {
    kProutHandlers[q.sa](ProutCall{res, q, me, task, fx, persist, res.FindRegistrant(&me)});
  }
  // Only a change to state that is, or was, to survive a power loss is saved.
  *persist = *persist && (was_aptpl || res.aptpl());
}

// A hold whose release (the last copy gone, on any thread) runs `then` on the task's reactor.
std::shared_ptr<void> OnReleaseOnReactor(Lun& lun, Task& task, std::function<void()> then) {
  return OnRelease([post = lun.config().post, slot = task.slot, then = std::move(then)] {
    if (post) {
      post(slot, then);
    } else {
      then();  // tests without reactors
    }
  });
}

// Raises the effects of a change on this gateway's nexuses, but not on `except` (the issuer).
// With `abort` (PREEMPT AND ABORT) the preempted nexuses' tasks for the LUN are aborted (SPC-4
// 5.13.11.2.4), and `until_ended` is released once they have ended.
void RaiseEffects(Lun& lun, const ProutEffects& fx, bool abort, const Nexus* except,
                  std::shared_ptr<void> until_ended) {
  for (const auto& [ua, who] : fx.uas) lun.RaiseUnitAttentionFor(ua, who, except);
  if (abort && !fx.aborted.empty() && lun.config().task_aborter) {
    lun.config().task_aborter->AbortTasks(lun.id(), fx.aborted, except, std::move(until_ended));
  }
}

// Shared reservations: the other gateways acknowledge a change within this, or are fenced: a
// gateway that does not answer (killed, and its watch not timed out yet; cut off from the cluster;
// or stopped or stalled while alive, still able to admit the writes the change forbids) has its
// client blocklisted before the command is answered (SharedObject::Silent::kFence). One that
// cannot be fenced fails the command (NOT READY).
constexpr auto kNotifyTimeout = std::chrono::seconds(5);
constexpr auto kFence = backing::SharedObject::Silent::kFence;
// Compare-and-swap attempts before a PERSISTENT RESERVE OUT gives up on a contended object.
constexpr int kMaxSharedAttempts = 32;

// "ua <asc> <ascq> <any> <rel> <initiator>" and "abort <any> <rel> <initiator>" lines.
std::string EncodeEvents(const ProutEffects& fx, bool abort) {
  std::string out;
  char line[64];
  for (const auto& [ua, who] : fx.uas) {
    std::snprintf(line, sizeof(line), "ua %02x %02x %d %u ", ua.asc, ua.ascq, who.any_isid ? 1 : 0,
                  static_cast<unsigned>(who.relative_port_id));
    out += line + who.initiator + "\n";
  }
  for (const auto& who : abort ? fx.aborted : std::vector<NexusMatch>{}) {
    std::snprintf(line, sizeof(line), "abort %d %u ", who.any_isid ? 1 : 0,
                  static_cast<unsigned>(who.relative_port_id));
    out += line + who.initiator + "\n";
  }
  return out;
}

// Completes the task on its reactor, after aborting the tasks of the nexuses in `aborted` there
// (PREEMPT AND ABORT) and once they have ended: the transport's sessions are reached from a
// reactor only, where the task, its nexus and the LUN are still alive.
void CompleteOnReactor(Lun& lun, Task& task, std::vector<NexusMatch> aborted) {
  auto finish = [l = &lun, t = &task, aborted = std::move(aborted)] {
    if (!aborted.empty() && l->config().task_aborter) {
      // SPC-4 5.13.11.4.5: the preempted I_T nexuses' tasks for this LUN are aborted.
      l->config().task_aborter->AbortTasks(l->id(), aborted, t->nexus,
                                           OnReleaseOnReactor(*l, *t, [t] { t->Complete(); }));
      return;
    }
    t->Complete();
  };
  if (lun.config().post) {
    lun.config().post(task.slot, std::move(finish));
  } else {
    finish();  // tests without reactors
  }
}

// NOT READY, BECOMING READY: initiators retry it.
void SetNotReady(Task& task) { SetStoreError(task, ETIMEDOUT, false); }

// What a PERSISTENT RESERVE OUT asked: two commands of one nexus with the same key are, as far
// as the state can tell, one command sent again.
std::string ProutKey(const ProutRequest& q) {
  char head[128];
  std::snprintf(head, sizeof(head), "%02x %02x %016" PRIx64 " %016" PRIx64 " %d%d%d %u %d%d %u ",
                q.sa, q.type, q.rk, q.sark, q.aptpl ? 1 : 0, q.all_tg_pt ? 1 : 0, q.unreg ? 1 : 0,
                static_cast<unsigned>(q.move_rel), q.move_to.any_isid ? 1 : 0,
                q.move_to.any_initiator ? 1 : 0, static_cast<unsigned>(q.move_to.relative_port_id));
  return head + q.move_to.initiator;
}

// Hands a change to the other gateways (see SharedObject::Notify), fencing those that do not
// answer, and trying twice more when it fails for another reason than a gateway not answering.
int HandOver(backing::SharedObject& so, uint64_t version, const std::string& data,
             const std::string& events) {
  int r = so.Notify(version, data, events, kNotifyTimeout, kFence);
  for (int retry = 0; r < 0 && r != -ETIMEDOUT && retry < 2; ++retry) {
    r = so.Notify(version, data, events, kNotifyTimeout, kFence);
  }
  return r;
}

// The retry of a command whose change was written but not handed over (RunSharedProut): while
// the object is still at the version the change wrote, that state goes out with the change's
// events, and the command ends as it did then (GOOD) once the others have it. False, with the
// record dropped, when the object has changed since: what the command did may have been undone
// (a later PREEMPT), so it is applied again, as a new command would be.
bool AnswerFromRecord(Lun& lun, backing::SharedObject& so, Task& task,
                      const Reservations::UnannouncedChange& record) {
  std::string data;
  uint64_t version = 0;
  if (int r = so.Read(&data, &version); r < 0) {
    log::Scsi().warn("lun {}: reading the shared reservations: errno {}", lun.id(), -r);
    SetNotReady(task);
    return true;
  }
  if (version != record.version) {
    std::lock_guard lock(lun.reservations().mu());
    lun.reservations().unannounced() = {};
    return false;
  }
  const std::string& events = record.events;
  if (int r = HandOver(so, version, data, events); r < 0) {
    log::Scsi().error("lun {}: reservation change {} still not handed over: errno {}", lun.id(),
                      version, -r);
    SetNotReady(task);
    return true;
  }
  Reservations& res = lun.reservations();
  std::lock_guard lock(res.mu());
  if (version > res.shared_version() || res.unknown()) {
    res.RestoreShared(data);
    res.set_shared_version(version);
  }
  res.unannounced() = {};
  return true;
}

// A PERSISTENT RESERVE OUT on a LUN the gateways share, on the shared object's thread: read the
// state and its version, apply the command to a copy, write it if the version is unchanged (else
// again from the read), make it this gateway's state, raise the effects here, and hand state and
// effects to the other gateways, waiting until they have applied them: when the command completes,
// a reservation taken through this gateway fences writes through every gateway that answered.
// Errors: the object not readable or writable, NOT READY (initiators retry; nothing changed, or
// the change was written but could not be handed over: then the nexus's retry of the same command
// is not applied again but answered from the record, once the hand-over succeeds); 32 lost
// compare-and-swaps in a row, BUSY.
void RunSharedProut(Lun& lun, backing::SharedObject& so, Task& task, const ProutRequest& q) {
  const Nexus& me = *task.nexus;
  const bool abort = q.sa == kPreemptAndAbort;
  Reservations scratch;
  std::vector<NexusMatch> aborted;
  uint64_t known = 0;  // the version this gateway has
  const std::string nexus = me.initiator_port() + "," + std::to_string(me.relative_port_id());
  const std::string request = ProutKey(q);
  Reservations::UnannouncedChange record;  // this command's change, written but not handed over
  {
    std::lock_guard lock(lun.reservations().mu());
    known = lun.reservations().shared_version();
    Reservations::UnannouncedChange& u = lun.reservations().unannounced();
    if (u.nexus == nexus && u.request == request) {
      record = u;
    } else if (u.nexus == nexus) {
      u = {};  // the nexus has moved on to another command: it is not retrying that one
    }
  }
  if (!record.nexus.empty()) {
    task.status = ScsiStatus::kGood;
    task.sense_len = 0;
    if (AnswerFromRecord(lun, so, task, record)) return CompleteOnReactor(lun, task, {});
  }
  for (int attempt = 1;; ++attempt) {
    task.status = ScsiStatus::kGood;
    task.sense_len = 0;
    std::string data;
    uint64_t version = 0;
    if (int r = so.Read(&data, &version); r < 0) {
      log::Scsi().warn("lun {}: reading the shared reservations: errno {}", lun.id(), -r);
      SetNotReady(task);
      break;
    }
    ProutEffects fx;
    bool persist = false;
    std::string before, after;
    {
      std::lock_guard lock(scratch.mu());
      scratch.RestoreShared(data);
      before = scratch.SerializeShared();
      ApplyProut(scratch, q, me, task, fx, &persist);
      after = task.status == ScsiStatus::kGood ? scratch.SerializeShared() : before;
    }
    uint64_t now = version;
    if (after != before) {
      const int r = so.WriteIfVersion(version, after, &now);
      if (r == -ECANCELED) {
        if (attempt < kMaxSharedAttempts) continue;  // another gateway's change came first
        log::Scsi().warn("lun {}: {} changes of the shared reservations in a row came first",
                         lun.id(), attempt);
        task.status = ScsiStatus::kBusy;
        task.sense_len = 0;
        break;
      }
      if (r < 0) {
        // Whether it was written is not known (a timeout): the object says, unless another
        // change followed (then NOT READY: applying the command again could apply it twice).
        std::string reread;
        uint64_t v2 = 0;
        if (so.Read(&reread, &v2) == 0 && v2 != version && reread == after) {
          now = v2;  // it was written
        } else {
          log::Scsi().warn("lun {}: writing the shared reservations: errno {}", lun.id(), -r);
          SetNotReady(task);
          break;
        }
      }
    }
    {
      Reservations& res = lun.reservations();
      std::lock_guard lock(res.mu());
      if (now > res.shared_version() || res.unknown()) {
        res.RestoreShared(after);
        res.set_shared_version(now);
      }
    }
    if (now != version) {
      RaiseEffects(lun, fx, false, &me, nullptr);
      if (abort) aborted = fx.aborted;
      const std::string events = EncodeEvents(fx, abort);
      if (const int r = HandOver(so, now, after, events); r < 0) {
        // Not every other gateway has it, and one that does not may still admit what it forbids.
        log::Scsi().error(
            "lun {}: reservation change {} written but not handed to the other gateways{}: "
            "errno {}",
            lun.id(), now, r == -ETIMEDOUT ? " (one neither answered nor could be fenced)" : "",
            -r);
        SetNotReady(task);
        // Applying its retry again could apply it twice: the retry is answered from this.
        std::lock_guard lock(lun.reservations().mu());
        lun.reservations().unannounced() = {nexus, request, events, now};
      }
    } else if (version > known) {
      // Nothing changed, but the object is newer than this gateway's copy was: a change whose
      // hand-over failed (an earlier try of this command, maybe) goes out now.
      (void)so.Notify(version, data, "", kNotifyTimeout, kFence);
    }
    break;
  }
  CompleteOnReactor(lun, task, std::move(aborted));  // the last touch of lun and task here
}

Disposition SharedProut(Lun& lun, Task& task, ProutRequest q) {
  std::shared_ptr<backing::SharedObject> so = lun.shared_state();
  if (so == nullptr) {  // the store is closing
    SetStoreError(task, ENOTCONN, true);
    return Disposition::kDone;
  }
  // The task keeps the LUN, whose store keeps the object, until it completes.
  so->Post(
      [l = &lun, o = so.get(), t = &task, q = std::move(q)] { RunSharedProut(*l, *o, *t, q); });
  return Disposition::kPending;
}

}  // namespace

void ApplySharedReservations(Lun& lun, uint64_t version, std::string_view data,
                             std::string_view events, std::shared_ptr<void> ack) {
  bool fresh = version == 0;  // version 0: events without state (a LOGICAL UNIT RESET)
  {
    Reservations& res = lun.reservations();
    std::lock_guard lock(res.mu());
    // A reread (events empty) also settles a state not known until then.
    if (version != 0 && (version > res.shared_version() || (events.empty() && res.unknown()))) {
      res.RestoreShared(data);
      res.set_shared_version(version);
      fresh = true;
    }
  }
  if (!fresh) return;  // a change applied already (a notify sent again)
  std::vector<NexusMatch> aborted;
  bool clear = false;  // a CLEAR TASK SET
  size_t at = 0;
  while (at < events.size()) {
    size_t nl = events.find('\n', at);
    if (nl == std::string_view::npos) nl = events.size();
    const std::string line(events.substr(at, nl - at));
    at = nl + 1;
    unsigned asc = 0, ascq = 0, rel = 0;
    int any = 0, n = 0;
    if (std::sscanf(line.c_str(), "ua %x %x %d %u %n", &asc, &ascq, &any, &rel, &n) == 4 && n > 0 &&
        static_cast<size_t>(n) < line.size()) {
      lun.RaiseUnitAttentionFor(
          UnitAttention{static_cast<uint8_t>(asc), static_cast<uint8_t>(ascq)},
          NexusMatch{line.substr(n), any != 0, static_cast<uint16_t>(rel)}, nullptr);
    } else if (std::sscanf(line.c_str(), "abort %d %u %n", &any, &rel, &n) == 2 && n > 0 &&
               static_cast<size_t>(n) < line.size()) {
      aborted.push_back(NexusMatch{line.substr(n), any != 0, static_cast<uint16_t>(rel)});
    } else if (std::sscanf(line.c_str(), "uaall %x %x", &asc, &ascq) == 2) {
      lun.RaiseUnitAttention(UnitAttention{static_cast<uint8_t>(asc), static_cast<uint8_t>(ascq)},
                             nullptr);
    } else if (line == "abortall") {
      NexusMatch all;
      all.any_initiator = true;
      aborted.push_back(std::move(all));
    } else if (line == "clearall") {
      clear = true;
    }
  }
  if ((clear || !aborted.empty()) && lun.config().task_aborter) {
    // On a reactor: this runs on a librados thread, which must not reach the sessions (their
    // lock, and a LUN whose last reference they may drop). The LUN may be going meanwhile. The
    // change's sender waits for `ack`: until the aborted tasks have ended here (SAM-5 5.6).
    auto abort = [w = lun.weak_from_this(), aborted = std::move(aborted), clear,
                  ack = std::move(ack)] {
      auto l = w.lock();
      if (l == nullptr) return;
      if (clear) l->config().task_aborter->ClearTaskSet(*l, ack);
      if (!aborted.empty()) l->config().task_aborter->AbortTasks(l->id(), aborted, nullptr, ack);
    };
    if (lun.config().post) {
      lun.config().post(0, std::move(abort));
    } else {
      abort();
    }
  }
}

void ShareTaskSetAbort(Lun& lun, bool reset, std::shared_ptr<void> hold) {
  std::shared_ptr<backing::SharedObject> so = lun.shared_state();
  if (so == nullptr) return;
  char line[32] = "clearall\n";
  if (reset) {
    std::snprintf(line, sizeof(line), "uaall %02x %02x\nabortall\n", Asc::kBusDeviceReset.asc,
                  Asc::kBusDeviceReset.ascq);
  }
  const char* what = reset ? "a logical unit reset" : "a cleared task set";
  // Version 0: no state with it. The object's thread keeps the object alive while it runs.
  so->Post([o = so.get(), id = lun.id(), events = std::string(line), what, hold = std::move(hold)] {
    if (int r = o->Notify(0, "", events, kNotifyTimeout, kFence); r < 0) {
      log::Scsi().warn("lun {}: a gateway did not acknowledge {}: {}", id, what, -r);
    }
    (void)hold;  // released with this job: the others have the unit attention, their tasks ended
  });
}

Disposition PersistentReserveOut(const Command& cmd) {
  Task& task = cmd.task;
  Lun& lun = *cmd.lun;
  const uint8_t* cdb = task.cdb.data();
  if ((cdb[1] & 0xE0) != 0) {
    SetInvalidFieldInCdb(task, 1);
    return Disposition::kDone;
  }
  const uint8_t sa = cdb[1] & 0x1F;
  const uint8_t scope = cdb[2] >> 4;
  const uint8_t type = cdb[2] & 0x0F;
  if (cdb[3] != 0 || cdb[4] != 0) {
    SetInvalidFieldInCdb(task, cdb[3] != 0 ? 3 : 4);
    return Disposition::kDone;
  }
  if (sa > kRegisterAndMove) {
    SetInvalidFieldInCdb(task, 1, 4);
    return Disposition::kDone;
  }
  const bool uses_type = sa == kReserve || sa == kRelease || sa == kPreempt ||
                         sa == kPreemptAndAbort || sa == kRegisterAndMove;
  if (uses_type && scope != 0) {  // only LU_SCOPE (6.17.3)
    SetInvalidFieldInCdb(task, 2, 7);
    return Disposition::kDone;
  }
  if (uses_type && !ValidType(type)) {
    SetInvalidFieldInCdb(task, 2, 3);
    return Disposition::kDone;
  }
  const uint32_t len = LoadBe32(cdb + 5);
  task.transfer_bytes = len;
  // 6.17.3: 24 bytes, unless REGISTER AND MOVE (header + TransportID) or SPEC_I_PT (not offered).
  const bool len_ok = sa == kRegisterAndMove ? len >= 24 + 4 : len == 24;
  if (!len_ok || task.data_out_len < len || task.buf == nullptr) {
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
    return Disposition::kDone;
  }
  const uint8_t* d = task.buf;
  const uint64_t rk = LoadBe64(d);
  const uint64_t sark = LoadBe64(d + 8);
  bool aptpl = false;
  bool all_tg_pt = false;
  bool unreg = false;
  uint16_t move_rel = 0;
  NexusMatch move_to;
  if (sa == kRegisterAndMove) {
    // 6.17.4, table 181.
    if (d[16] != 0) return BadParameter(task, 16);
    if ((d[17] & 0xFC) != 0) return BadParameter(task, 17);
    unreg = (d[17] & 0x02) != 0;
    aptpl = (d[17] & 0x01) != 0;
    move_rel = LoadBe16(d + 18);
    const uint32_t tid_len = LoadBe32(d + 20);
    if (tid_len < 4 || 24 + uint64_t{tid_len} > len) {
      SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
      return Disposition::kDone;
    }
    if (!ParseTransportId(task, d + 24, tid_len, 24, &move_to)) return Disposition::kDone;
    if (move_rel != cmd.target.relative_port_id && !(lun.shared_reservations() && move_rel != 0)) {
      // The target has this one port: any other RELATIVE TARGET PORT IDENTIFIER names nothing.
      // (Where gateways share the LUN, each is a port of its own: their ids are gateway ids.)
      SetInvalidFieldInParameterList(task, 18);
      return Disposition::kDone;
    }
    move_to.relative_port_id = move_rel;
    if (aptpl && !lun.persists_reservations()) {
      SetInvalidFieldInParameterList(task, 17, 0);
      return Disposition::kDone;
    }
  } else {
    // 6.17.3, table 180. Bytes 16..19 and 22..23 are obsolete and ignored.
    const uint8_t flags = d[20];
    if ((flags & 0xF2) != 0 || d[21] != 0) {
      SetInvalidFieldInParameterList(task, (flags & 0xF2) != 0 ? 20 : 21);
      return Disposition::kDone;
    }
    if ((flags & 0x08) != 0) {  // SPEC_I_PT: not offered (SIP_C=0)
      SetInvalidFieldInParameterList(task, 20, 3);
      return Disposition::kDone;
    }
    const bool registers = sa == kRegister || sa == kRegisterAndIgnore;
    all_tg_pt = registers && (flags & 0x04) != 0;  // ignored by the other service actions
    aptpl = (flags & 0x01) != 0;
    if (registers && aptpl && !lun.persists_reservations()) {  // PTPL_C=0
      SetInvalidFieldInParameterList(task, 20, 0);
      return Disposition::kDone;
    }
  }
  if (task.nexus == nullptr) {
    SetConflict(task);
    return Disposition::kDone;
  }
  const Nexus& me = *task.nexus;

  const ProutRequest q{sa, type, rk, sark, aptpl, all_tg_pt, unreg, move_rel, std::move(move_to)};
  if (lun.shared_reservations()) return SharedProut(lun, task, q);

  Reservations& res = lun.reservations();
  bool persist = false;
  ProutEffects fx;
  {
    std::lock_guard lock(res.mu());
    ApplyProut(res, q, me, task, fx, &persist);
  }
  if (sa == kPreemptAndAbort && !fx.aborted.empty() && lun.config().task_aborter) {
    // SPC-4 5.13.11.2.4, SAM-5 5.6: the command ends once the tasks it aborted have ended (none
    // of their writes can land after its GOOD), and its state is saved (APTPL) after that.
    RaiseEffects(lun, fx, true, &me, OnReleaseOnReactor(lun, task, [l = &lun, t = &task, persist] {
                   if (!persist || !l->SaveState(t->slot, backing::IoCompletion{PersistDone, t})) {
                     t->Complete();
                   }
                 }));
    return Disposition::kPending;
  }
  RaiseEffects(lun, fx, false, &me, nullptr);
  if (persist && lun.SaveState(task.slot, backing::IoCompletion{PersistDone, &task})) {
    return Disposition::kPending;
  }
  return Disposition::kDone;
}

}  // namespace internal
}  // namespace iscsigw::scsi
