#include "dataplane/scsi/engine.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <utility>

#include "base/log.h"
#include "dataplane/scsi/handlers.h"
#include "dataplane/scsi/op_table.h"
#include "dataplane/scsi/opcodes.h"
#include "dataplane/scsi/sbc_ops.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi {

// ---------------------------------------------------------------------------------------------
// Lun

namespace {
std::atomic<uint64_t> next_lun_generation{1};
}  // namespace

Lun::Lun(LunConfig config, std::shared_ptr<backing::BackingStore> store)
    : config_(std::move(config)),
      generation_(next_lun_generation.fetch_add(1, std::memory_order_relaxed)),
      store_(std::move(store)),
      shared_(config_.shared_state.lock() != nullptr),
      read_only_(config_.read_only),
      // Write-back caching is on by default for stores whose writes may sit in a volatile cache
      // (page cache for files); the null store drops writes, so it has nothing to cache.
      mode_pages_(ModePages::Values{store_->kind() != "null"}),
      reported_preferred_(store_->preferred()) {
  RestoreState();
  if (std::shared_ptr<backing::SharedObject> so = config_.shared_state.lock()) AttachShared(so);
}

std::shared_ptr<backing::SharedObject> Lun::shared_state() const {
  std::lock_guard lock(shared_mu_);
  return shared_state_.lock();
}

void Lun::AttachShared(const std::shared_ptr<backing::SharedObject>& so) {
  const uint64_t token = so->SetListener(
      [this](uint64_t version, std::string_view data, std::string_view events,
             std::shared_ptr<void> ack) {
        internal::ApplySharedReservations(*this, version, data, events, std::move(ack));
      },
      // Changes may be missed until the object is reread (which the object does).
      [this] { MarkSharedStateUnknown(); });
  {
    std::lock_guard lock(shared_mu_);
    shared_state_ = so;
    listener_token_ = token;
  }
  // What the gateways hold now; a change that arrives meanwhile has a newer version and wins.
  std::string data;
  uint64_t version = 0;
  if (int r = so->Read(&data, &version); r == 0) {
    internal::ApplySharedReservations(*this, version, data, "", nullptr);
  } else {
    // Until the state is known, commands that depend on it are answered NOT READY.
    log::Scsi().error("lun {}: reading the shared persistent reservations: errno {}; retrying",
                      config_.id, -r);
    MarkSharedStateUnknown();
    so->Reload();
  }
}

void Lun::DetachShared() {
  std::shared_ptr<backing::SharedObject> so;
  uint64_t token = 0;
  {
    std::lock_guard lock(shared_mu_);
    so = shared_state_.lock();
    shared_state_.reset();
    token = listener_token_;
  }
  MarkSharedStateUnknown();
  // Returns once no call of the listener runs: none reaches this object after.
  if (so != nullptr) so->ClearListener(token);
}

void Lun::MarkSharedStateUnknown() {
  std::lock_guard lock(reservations_.mu());
  reservations_.set_unknown();
}

Lun::~Lun() { DetachShared(); }

namespace {
std::atomic<uint64_t> detached_flushes_in_flight{0};
}  // namespace

uint64_t Lun::DetachedFlushesInFlight() {
  return detached_flushes_in_flight.load(std::memory_order_acquire);
}

void Lun::HoldForDetachedFlush(unsigned slot) {
  detached_flushes_in_flight.fetch_add(1, std::memory_order_acq_rel);
  std::lock_guard lock(detached_mu_);
  if (detached_flushes_++ == 0) detached_hold_ = weak_from_this().lock();
  detached_slot_ = slot;
}

void Lun::ReleaseDetachedFlush() {
  detached_flushes_in_flight.fetch_sub(1, std::memory_order_acq_rel);
  std::shared_ptr<Lun> last;
  unsigned slot = 0;
  {
    std::lock_guard lock(detached_mu_);
    if (detached_flushes_ == 0 || --detached_flushes_ > 0) return;
    last = std::move(detached_hold_);
    slot = detached_slot_;
  }
  // Possibly the LUN's last reference: dropped after the store's completion has returned.
  if (config_.post) config_.post(slot, [last = std::move(last)]() mutable { last.reset(); });
}

uint64_t Lun::num_blocks() const {
  return config_.block_size == 0 ? 0 : store_->size_bytes() / config_.block_size;
}

void Lun::RaiseUnitAttention(UnitAttention ua, const Nexus* except) {
  std::lock_guard<std::mutex> lock(ua_mu_);
  const uint64_t epoch = ua_epoch_.load(std::memory_order_relaxed) + 1;
  if (ua_log_.size() >= kMaxUaLog) ua_log_.erase(ua_log_.begin());
  ua_log_.push_back(UaEvent{epoch, ua, except, nullptr});
  ua_epoch_.store(epoch, std::memory_order_release);
}

void Lun::RaiseUnitAttentionFor(UnitAttention ua, const NexusMatch& who, const Nexus* except) {
  auto only = std::make_shared<const NexusMatch>(who);
  std::lock_guard<std::mutex> lock(ua_mu_);
  const uint64_t epoch = ua_epoch_.load(std::memory_order_relaxed) + 1;
  if (ua_log_.size() >= kMaxUaLog) ua_log_.erase(ua_log_.begin());
  ua_log_.push_back(UaEvent{epoch, ua, except, std::move(only)});
  ua_epoch_.store(epoch, std::memory_order_release);
}

uint64_t Lun::CollectUnitAttentions(uint64_t seen, const Nexus* nexus,
                                    std::vector<UnitAttention>* out) const {
  std::lock_guard<std::mutex> lock(ua_mu_);
  for (const UaEvent& ev : ua_log_) {
    if (ev.epoch <= seen || ev.except == nexus) continue;
    if (ev.only && (nexus == nullptr || !ev.only->Matches(*nexus))) continue;
    out->push_back(ev.ua);
  }
  return ua_epoch_.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Nexus

Nexus::Nexus(std::string initiator_port, uint16_t relative_port_id)
    : initiator_port_(std::move(initiator_port)),
      relative_port_id_(relative_port_id),
      luns_(kMaxLuns) {}

Nexus::PerLun& Nexus::Slot(uint64_t lun_id) { return luns_[lun_id]; }

void Nexus::PushPending(PerLun& s, UnitAttention ua) {
  // SAM-5 5.14: a pending POWER ON, RESET, OR BUS DEVICE RESET OCCURRED already tells the initiator
  // that every other state may have changed; further resets add nothing.
  if (s.power_on_pending && ua.asc == Asc::kPowerOnReset.asc) return;
  if (s.pending.capacity() == 0) s.pending.reserve(kMaxPendingUnitAttentions);
  if (s.pending.size() >= kMaxPendingUnitAttentions) s.pending.erase(s.pending.begin());
  s.pending.push_back(ua);
}

void Nexus::Sync(Lun& lun, PerLun& s) {
  if (s.generation != lun.generation()) {
    // Another logical unit under this id (the one this nexus knew was deleted): it starts as a
    // new one does, with POWER ON, its own epoch and write errors (SAM-5 5.14).
    s = PerLun{};
    s.generation = lun.generation();
  }
  const uint64_t epoch = lun.ua_epoch();
  if (!s.synced) {
    // Events raised before this nexus first used the LUN are covered by its POWER ON unit
    // attention (a new I_T nexus starts from the power-on state, SAM-5 5.14).
    s.synced = true;
    s.seen_epoch = epoch;
    s.seen_write_errors = lun.write_errors();  // earlier errors were not of its writes
    return;
  }
  if (epoch == s.seen_epoch) return;  // fast path: one acquire load per command
  std::vector<UnitAttention> fresh;   // rare path (resets, capacity changes)
  s.seen_epoch = lun.CollectUnitAttentions(s.seen_epoch, this, &fresh);
  for (const UnitAttention& ua : fresh) PushPending(s, ua);
}

bool Nexus::TakeWriteErrors(Lun& lun) {
  PerLun& s = Slot(lun.id());
  Sync(lun, s);
  const uint64_t now = lun.write_errors();
  if (now == s.seen_write_errors) return false;
  s.seen_write_errors = now;
  return true;
}

bool Nexus::PeekUnitAttention(Lun& lun, UnitAttention* ua) {
  if (lun.id() >= kMaxLuns) return false;
  PerLun& s = Slot(lun.id());
  Sync(lun, s);
  if (s.power_on_pending) {
    *ua = UnitAttention{Asc::kPowerOnReset.asc, Asc::kPowerOnReset.ascq};
    return true;
  }
  if (s.pending.empty()) return false;
  *ua = s.pending.front();
  return true;
}

void Nexus::PopUnitAttention(Lun& lun) {
  if (lun.id() >= kMaxLuns) return;
  PerLun& s = Slot(lun.id());
  if (s.power_on_pending) {
    s.power_on_pending = false;
  } else if (!s.pending.empty()) {
    s.pending.erase(s.pending.begin());
  }
}

void Nexus::AddUnitAttention(uint64_t lun_id, UnitAttention ua) {
  if (lun_id >= kMaxLuns) return;
  PushPending(Slot(lun_id), ua);
}

void Nexus::ClearUnitAttentions(uint64_t lun_id) {
  if (lun_id >= kMaxLuns) return;
  PerLun& s = Slot(lun_id);
  s.power_on_pending = false;
  s.pending.clear();
}

void Nexus::ClearUnitAttention(Lun& lun, UnitAttention ua) {
  if (lun.id() >= kMaxLuns) return;
  PerLun& s = Slot(lun.id());
  Sync(lun, s);
  std::erase_if(s.pending,
                [ua](const UnitAttention& p) { return p.asc == ua.asc && p.ascq == ua.ascq; });
}

// ---------------------------------------------------------------------------------------------
// TargetInfo

Lun* TargetInfo::FindLun(uint64_t id) const {
  // LUN ids are usually dense from 0, so try the direct index before the binary search.
  if (id < luns.size() && luns[id] && luns[id]->id() == id) return luns[id].get();
  auto it = std::lower_bound(luns.begin(), luns.end(), id,
                             [](const std::shared_ptr<Lun>& l, uint64_t v) { return l->id() < v; });
  if (it != luns.end() && (*it)->id() == id) return it->get();
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Engine

namespace {

using internal::Command;
using internal::Disposition;
using internal::Handler;
using internal::OpEntry;
using internal::PrClass;

// Adds service action `sa` to the entry of a command with a SERVICE ACTION field.
constexpr void AddServiceAction(OpEntry& e, uint8_t sa) { e.sas[e.sa_count++] = sa; }

// The entry of a command that reads or writes the medium or reports its capacity.
constexpr OpEntry Medium(Handler handler) {
  OpEntry e{handler};
  e.needs_medium = true;
  return e;
}

constexpr std::array<OpEntry, 256> MakeOpTable() {
  std::array<OpEntry, 256> t{};
  t[kTestUnitReady] = {internal::TestUnitReady};
  t[kRequestSense] = {internal::RequestSense, true, true};
  t[kInquiry] = {internal::Inquiry, true, true};
  t[kReportLuns] = {internal::ReportLuns, true, true};
  t[kModeSense6] = {internal::ModeSense6};
  t[kModeSense10] = {internal::ModeSense10};
  t[kStartStopUnit] = {internal::StartStopUnit};
  t[kReadCapacity10] = Medium(internal::ReadCapacity10);
  t[kServiceActionIn16] = Medium(internal::ServiceActionIn16);
  t[kRead6] = Medium(internal::Read6);
  t[kRead10] = Medium(internal::Read10);
  t[kRead12] = Medium(internal::Read12);
  t[kRead16] = Medium(internal::Read16);
  t[kWrite6] = Medium(internal::Write6);
  t[kWrite10] = Medium(internal::Write10);
  t[kWrite12] = Medium(internal::Write12);
  t[kWrite16] = Medium(internal::Write16);
  t[kWriteAtomic16] = Medium(internal::WriteAtomic16);
  t[kSynchronizeCache10] = Medium(internal::SynchronizeCache10);
  t[kSynchronizeCache16] = Medium(internal::SynchronizeCache16);
  AddServiceAction(t[kServiceActionIn16], kSaReadCapacity16);
  t[kModeSelect6] = {internal::ModeSelect6};
  t[kModeSelect10] = {internal::ModeSelect10};
  t[kReserve6] = {internal::Reserve};
  t[kRelease6] = {internal::Release};
  t[kReserve10] = {internal::Reserve};
  t[kRelease10] = {internal::Release};
  t[kPersistentReserveIn] = {internal::PersistentReserveIn};
  for (uint8_t sa = 0; sa <= 3; ++sa) AddServiceAction(t[kPersistentReserveIn], sa);
  t[kPersistentReserveOut] = {internal::PersistentReserveOut};
  for (uint8_t sa = 0; sa <= 7; ++sa) AddServiceAction(t[kPersistentReserveOut], sa);
  t[kPreventAllowMediumRemoval] = {internal::PreventAllowMediumRemoval};
  t[kMaintenanceIn] = {internal::MaintenanceIn};
  AddServiceAction(t[kMaintenanceIn], kSaReportTargetPortGroups);
  AddServiceAction(t[kMaintenanceIn], kSaReportSupportedOperationCodes);
  AddServiceAction(t[kMaintenanceIn], kSaReportSupportedTaskManagementFunctions);
  // SBC-3 provisioning, verify and read-modify-write commands (sbc_provisioning.cc,
  // sbc_verify.cc).
  AddServiceAction(t[kServiceActionIn16], kSaGetLbaStatus);
  t[kUnmap] = Medium(internal::Unmap);
  t[kWriteSame10] = Medium(internal::WriteSame10);
  t[kWriteSame16] = Medium(internal::WriteSame16);
  t[kSanitize] = Medium(internal::Sanitize);
  AddServiceAction(t[kSanitize], 0x01);  // OVERWRITE
  AddServiceAction(t[kSanitize], 0x02);  // BLOCK ERASE
  AddServiceAction(t[kSanitize], 0x1F);  // EXIT FAILURE MODE
  t[kReadDefectData10] = {internal::ReadDefectData10};
  t[kReadDefectData12] = {internal::ReadDefectData12};
  t[kCompareAndWrite] = Medium(internal::CompareAndWrite);
  t[kOrWrite16] = Medium(internal::OrWrite16);
  t[kVerify10] = Medium(internal::Verify10);
  t[kVerify12] = Medium(internal::Verify12);
  t[kVerify16] = Medium(internal::Verify16);
  t[kWriteAndVerify10] = Medium(internal::WriteAndVerify10);
  t[kWriteAndVerify12] = Medium(internal::WriteAndVerify12);
  t[kWriteAndVerify16] = Medium(internal::WriteAndVerify16);
  t[kPreFetch10] = Medium(internal::PreFetch10);
  t[kPreFetch16] = Medium(internal::PreFetch16);
  // SPC-4 third-party copy, LID1 (xcopy.cc).
  t[kThirdPartyCopyOut] = Medium(internal::ExtendedCopy);
  AddServiceAction(t[kThirdPartyCopyOut], kSaExtendedCopyLid1);
  t[kThirdPartyCopyIn] = {internal::ReceiveCopyResults};
  AddServiceAction(t[kThirdPartyCopyIn], kSaCopyStatusLid1);
  AddServiceAction(t[kThirdPartyCopyIn], kSaOperatingParameters);
  AddServiceAction(t[kThirdPartyCopyIn], kSaFailedSegmentDetailsLid1);
  return t;
}

constexpr std::array<OpEntry, 256> kOpTable = MakeOpTable();

void SetReservationConflict(Task& task) {
  // SAM-5 5.3.1: RESERVATION CONFLICT carries no sense data.
  task.status = ScsiStatus::kReservationConflict;
  task.sense_len = 0;
  task.in_seg_count = 0;
  task.in_len = 0;
}

void Finish(Task& task) { task.Complete(); }

}  // namespace

void Engine::Execute(const TargetInfo& target, Task& task) {
  task.ResetResult();
  const uint8_t opcode = task.cdb[0];
  const OpEntry& entry = kOpTable[opcode];

  Lun* lun = target.FindLun(task.lun);
  task.unit = lun;
  if (lun == nullptr && !entry.missing_lun_ok) {
    // SPC-4 4.5.6 / SAM-5 5.9.x: commands other than INQUIRY, REPORT LUNS and REQUEST SENSE to an
    // incorrect logical unit end with LOGICAL UNIT NOT SUPPORTED.
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kLogicalUnitNotSupported);
    return Finish(task);
  }

  if (lun != nullptr && task.nexus != nullptr && !entry.ua_exempt) {
    // SAM-5 5.14: any other command (even an unsupported one) reports the oldest pending unit
    // attention as CHECK CONDITION / UNIT ATTENTION, which clears it.
    UnitAttention ua;
    if (task.nexus->PeekUnitAttention(*lun, &ua)) {
      task.nexus->PopUnitAttention(*lun);
      SetCheckCondition(task, SenseKey::kUnitAttention, Asc{ua.asc, ua.ascq});
      return Finish(task);
    }
  }

  if (entry.handler == nullptr || (lun != nullptr && !lun->Offers(opcode))) {
    // SPC-4 4.5.6: an operation code the device server does not implement.
    SetCheckCondition(task, SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
    return Finish(task);
  }

  const uint8_t need = CdbLengthForOpcode(opcode);
  if (task.cdb_len < need) {
    // The transport delivered fewer CDB bytes than the operation code defines.
    SetInvalidFieldInCdb(task, task.cdb_len);
    return Finish(task);
  }
  if (need > 0 && (task.cdb[need - 1] & 0x04) != 0) {
    // SAM-5 (CONTROL byte): NACA=1 requires ACA support, which we do not report (NormACA=0 in
    // INQUIRY), so the command is terminated with INVALID FIELD IN CDB.
    SetInvalidFieldInCdb(task, need - 1, 2);
    return Finish(task);
  }

  if (lun != nullptr && lun->sanitize().mode() != SanitizeState::Mode::kIdle &&
      internal::SanitizeRefuses(*lun, task)) {
    // SBC-4 4.11: a sanitize operation in progress, or sanitize failure mode.
    return Finish(task);
  }

  if (lun != nullptr && lun->reservations().active()) {
    if (lun->reservations().unknown() &&
        (entry.needs_medium || opcode == kPersistentReserveIn || opcode == kTestUnitReady)) {
      // The reservations the gateways share are not known (not read yet, or the watch that
      // keeps them current was lost): whether this command conflicts is not known. NOT READY,
      // BECOMING READY is retried by initiators (TEST UNIT READY says so too, for path
      // checkers); the state is reread every second.
      internal::SetStoreError(task, ETIMEDOUT, false);
      return Finish(task);
    }
    if (internal::ReservationConflict(*lun, task.nexus, task.cdb.data())) {
      // SPC-4 5.13.1 / SPC-2 5.5.1: the logical unit is reserved through another I_T nexus.
      SetReservationConflict(task);
      return Finish(task);
    }
  }

  if (entry.needs_medium && lun != nullptr) {
    // An rbd image not opened yet: its capacity is not known and no block can be reached. One
    // virtual call and a relaxed load per command; 0 for every store that is always ready.
    if (const int err = lun->store().ready(); err != 0) {
      internal::SetStoreError(task, err, false);
      return Finish(task);
    }
  }

  if (entry.handler(Command{target, lun, task}) == Disposition::kDone) Finish(task);
}

namespace internal {
const std::array<OpEntry, 256>& OpTable() { return kOpTable; }
}  // namespace internal

void Engine::ResetLun(Lun& lun, const Nexus* issuer, std::shared_ptr<void> hold) {
  // SAM-5 5.8 (LOGICAL UNIT RESET): every other I_T nexus gets BUS DEVICE RESET FUNCTION OCCURRED.
  lun.RaiseUnitAttention(UnitAttention{Asc::kBusDeviceReset.asc, Asc::kBusDeviceReset.ascq},
                         issuer);
  // SPC-2 5.5.1: a logical unit reset releases an SPC-2 reservation; persistent reservations
  // survive it (SPC-4 5.13.1).
  std::lock_guard lock(lun.reservations().mu());
  lun.reservations().spc2_release();
  // Through the other gateways too: their I_T nexuses are nexuses of this logical unit, and their
  // tasks are in its task set.
  if (lun.shared_reservations()) internal::ShareTaskSetAbort(lun, true, std::move(hold));
}

void Engine::ClearTaskSet(Lun& lun, std::shared_ptr<void> hold) {
  // SAM-5 7.4: the logical unit has one task set (control mode page TST=000b), which holds the
  // tasks of the I_T nexuses through the other gateways too.
  if (lun.shared_reservations()) internal::ShareTaskSetAbort(lun, false, std::move(hold));
}

void Engine::CapacityChanged(Lun& lun) {
  lun.RaiseUnitAttention(
      UnitAttention{Asc::kCapacityDataChanged.asc, Asc::kCapacityDataChanged.ascq}, nullptr);
}

bool Lun::Offers(uint8_t opcode) const {
  switch (opcode) {
    case kReserve6:
    case kRelease6:
    case kReserve10:
    case kRelease10:
      return config_.reservations && !shared_;
    case kPersistentReserveIn:
    case kPersistentReserveOut:
      return config_.reservations;
    default:
      return true;
  }
}

bool Engine::CheckAccessState(Lun& lun, unsigned settle) {
  const bool now = lun.store().preferred();
  unsigned& differs = lun.access_state_differs();
  if (lun.reported_preferred().load() == now) {
    differs = 0;
    return false;
  }
  if (++differs < settle) return false;
  differs = 0;
  lun.reported_preferred().store(now);
  lun.RaiseUnitAttention(UnitAttention{Asc::kAsymmetricAccessStateChanged.asc,
                                       Asc::kAsymmetricAccessStateChanged.ascq},
                         nullptr);
  return true;
}

}  // namespace iscsigw::scsi
