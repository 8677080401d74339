// The SCSI engine: an SPC-4 / SBC-3 block device over a BackingStore. No iSCSI, no Asio.
//
// Objects:
//   Lun        - one logical unit: a store, a block size, identity (serial, NAA id), and the
//                state that every I_T nexus shares (unit-attention events). Shared by all
//                reactors; lives as long as any snapshot or task refers to it (shared_ptr).
//   Nexus      - one I_T nexus (initiator port x target port): per-LUN pending unit attentions and
//                the sense data REQUEST SENSE returns. Owned by one iSCSI session; used only on
//                that session's reactor thread.
//   TargetInfo - the immutable view of one target the engine needs (name, port ids, LUN list).
//                Part of the published config snapshot.
//   Engine     - stateless dispatch: Execute() runs one command through a 256-entry opcode table.
//
// Threading: Execute runs on the reactor thread that owns task.nexus. Cross-nexus state in Lun is
// published through an atomic epoch that the fast path reads once per command (no lock, no write).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/shared_object.h"
#include "dataplane/scsi/lun_state.h"
#include "dataplane/scsi/mode_pages.h"
#include "dataplane/scsi/reservations.h"
#include "dataplane/scsi/sanitize.h"
#include "dataplane/scsi/task.h"

namespace iscsigw::scsi {

inline constexpr uint64_t kMaxLuns = 256;  // LUN ids 0..255 (peripheral device addressing)

struct LunConfig {
  uint64_t id = 0;
  uint32_t block_size = 512;  // 512 or 4096
  // The medium's physical block: block_size (0 means that), or 4096 over 512-byte logical blocks
  // (512e), reported as LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT 3 (SBC-3 5.16.2) and in the
  // Block Limits granularities, so that initiators align their I/O to it.
  uint32_t physical_block_size = 0;
  bool read_only = false;
  // False: RESERVE/RELEASE(6)/(10) and PERSISTENT RESERVE IN/OUT are not supported (INVALID
  // COMMAND OPERATION CODE, and REPORT SUPPORTED OPERATION CODES leaves them out). For an rbd
  // LUN that other gateways export whose shared object could not be opened: a reservation taken
  // through this gateway would not fence writes through another.
  bool reservations = true;
  // Set for an rbd LUN that other gateways export (backing::RbdStore::shared_object): the
  // persistent reservations live in that object, every gateway keeps a copy it checks commands
  // against, and a PERSISTENT RESERVE OUT completes once it is written there and every other
  // gateway has applied it (reservations.cc). APTPL is then always offered (PTPL_C=1): the state
  // is in the cluster. RESERVE/RELEASE, whose reservation lasts as long as one I_T nexus, are not
  // offered. Weak: the store owns the object.
  std::weak_ptr<backing::SharedObject> shared_state;
  std::string serial;   // VPD 0x80 unit serial number (ASCII, <= 32 chars)
  uint64_t naa_id = 0;  // VPD 0x83 NAA IEEE Registered designator (NAA type 6 high 64 bits)
  std::string vendor = "ISCSIGW";       // INQUIRY T10 vendor id (8 chars, space padded on the wire)
  std::string product = "iscsigw-lun";  // INQUIRY product id (16 chars)
  std::string revision = "0001";        // INQUIRY product revision (4 chars)
  // Durable per-LUN state (APTPL reservations, saved mode pages); null: nothing survives a
  // restart (PTPL_C=0, saved mode values not supported).
  std::shared_ptr<LunStateStore> state_store;
  // Aborts other nexuses' tasks for PREEMPT AND ABORT; null: only the registrations are preempted.
  std::shared_ptr<TaskAborter> task_aborter;
  // Runs fn later, in a fresh turn of reactor `slot`'s event loop. Long operations (SANITIZE,
  // WRITE SAME, VERIFY, EXTENDED COPY) on stores that complete inline give the reactor back through
  // it between pieces; empty: they run to the end in one turn (tests).
  using PostFn = std::function<void(unsigned slot, std::function<void()> fn)>;
  PostFn post;
};

// Additional sense code + qualifier of a unit attention.
struct UnitAttention {
  uint8_t asc = 0;
  uint8_t ascq = 0;
};

class Nexus;

class Lun : public std::enable_shared_from_this<Lun> {
 public:
  Lun(LunConfig config, std::shared_ptr<backing::BackingStore> store);
  ~Lun();
  Lun(const Lun&) = delete;
  Lun& operator=(const Lun&) = delete;

  const LunConfig& config() const { return config_; }
  uint64_t id() const { return config_.id; }
  // Unique in the process, per Lun object: a LUN deleted and created again under the same id is
  // another logical unit to every I_T nexus (Nexus::Sync).
  uint64_t generation() const { return generation_; }
  uint32_t block_size() const { return config_.block_size; }
  // Logical blocks per physical block (1, or 8 for 512e) and its log2.
  uint32_t blocks_per_physical() const {
    return config_.physical_block_size > config_.block_size && config_.block_size != 0
               ? config_.physical_block_size / config_.block_size
               : 1;
  }
  uint8_t blocks_per_physical_exponent() const {
    uint8_t e = 0;
    while ((uint32_t{1} << e) < blocks_per_physical()) ++e;
    return e;
  }
  uint64_t num_blocks() const;
  backing::BackingStore& store() { return *store_; }

  // Whether the LUN serves the reservation commands (LunConfig::reservations, shared_state).
  bool Offers(uint8_t opcode) const;
  // Whether the persistent reservations are shared with other gateways (LunConfig::shared_state),
  // and the object they live in (null once the store has closed).
  bool shared_reservations() const { return shared_; }
  std::shared_ptr<backing::SharedObject> shared_state() const;
  // A live LUN's store reopened (docs/live-lun-changes.md): the shared object went with the old
  // store. DetachShared lets go of it (returns once no call of this LUN's listener runs), before
  // the old store closes; AttachShared listens to the new store's object and reads the state
  // (NOT READY for what depends on it until known). Control-plane thread, not a reactor.
  void DetachShared();
  void AttachShared(const std::shared_ptr<backing::SharedObject>& so);

  // Whether the medium is write protected by configuration (LunConfig::read_only at first; a live
  // change sets it). One relaxed load.
  bool read_only() const { return read_only_.load(std::memory_order_relaxed); }
  void set_read_only(bool on) { read_only_.store(on, std::memory_order_relaxed); }
  // SYNCHRONIZE CACHE with IMMED flushes still in flight (HoldForDetachedFlush); a reopen waits
  // for them.
  uint32_t detached_flushes() {
    std::lock_guard lock(detached_mu_);
    return detached_flushes_;
  }
  // Whether APTPL=1 is honoured (PTPL_C): a state store, or the shared object.
  bool persists_reservations() const { return config_.state_store != nullptr || shared_; }

  // Establishes a unit attention for every I_T nexus, or every nexus but `except` (may be null).
  // Any thread. Rare (resets, capacity change); takes the small per-LUN lock.
  void RaiseUnitAttention(UnitAttention ua, const Nexus* except);

  // Establishes a unit attention for the I_T nexuses `who` names, except `except` (may be null);
  // for the reservation unit attentions of SPC-4 5.13, aimed at registrants.
  void RaiseUnitAttentionFor(UnitAttention ua, const NexusMatch& who, const Nexus* except);

  // The access state last reported for the LUN through this gateway (Engine::CheckAccessState).
  std::atomic<bool>& reported_preferred() { return reported_preferred_; }
  unsigned& access_state_differs() { return access_state_differs_; }  // CheckAccessState's count

  // State every I_T nexus shares (mode_pages.h, reservations.h; their own locks).
  ModePages& mode_pages() { return mode_pages_; }
  Reservations& reservations() { return reservations_; }
  // The sanitize operation state (sanitize.h); a background sanitize holds a shared_ptr to the LUN.
  SanitizeState& sanitize() { return sanitize_; }
  // Store write errors, for SYNCHRONIZE CACHE: a write that failed on the store is never reported
  // durable by a later flush. NoteWriteError counts one (any thread). Each I_T nexus learns of the
  // errors counted since it last did at its next SYNCHRONIZE CACHE (Nexus::TakeWriteErrors), as
  // Linux reports a writeback error once to each open file: every initiator whose writes may be
  // among the lost ones hears of it, not only the first to flush. TakeWriteErrors here is the
  // same for a command without a nexus: true once per batch, LUN-wide.
  void NoteWriteError() { write_errors_.fetch_add(1, std::memory_order_acq_rel); }
  uint64_t write_errors() const { return write_errors_.load(std::memory_order_acquire); }
  bool TakeWriteErrors() {
    const uint64_t now = write_errors_.load(std::memory_order_acquire);
    uint64_t seen = write_errors_reported_.load(std::memory_order_acquire);
    while (seen < now) {
      if (write_errors_reported_.compare_exchange_weak(seen, now, std::memory_order_acq_rel)) {
        return true;
      }
    }
    return false;
  }

  // SYNCHRONIZE CACHE with IMMED ends its command before the store's flush does, so no task keeps
  // the LUN (and its store) alive for that flush: a LUN removed meanwhile would be freed under it.
  // HoldForDetachedFlush (at the flush's start, on reactor `slot`) keeps the LUN alive while any
  // such flush is in flight; ReleaseDetachedFlush (its completion) lets go, and the last hold is
  // dropped in a later turn of the reactor through config().post (inline without one), never
  // inside the store's own completion. Rare (Linux never sets IMMED): a small per-LUN lock.
  void HoldForDetachedFlush(unsigned slot);
  void ReleaseDetachedFlush();
  // Such flushes in flight in the process, for shutdown: the reactors must run their completions.
  static uint64_t DetachedFlushesInFlight();

  // Makes the durable part of this LUN's state (lun_state.cc) durable through config().state_store
  // and runs done on reactor `slot`; false (done not called) when there is no state store.
  bool SaveState(unsigned slot, backing::IoCompletion done);

  // Implementation detail shared with Nexus: event epoch and log.
  uint64_t ua_epoch() const { return ua_epoch_.load(std::memory_order_acquire); }
  // Appends to `out` the events after `seen` that apply to `nexus`; returns the current epoch.
  uint64_t CollectUnitAttentions(uint64_t seen, const Nexus* nexus,
                                 std::vector<UnitAttention>* out) const;

 private:
  // Loads config_.state_store's blob into mode_pages_ and reservations_ (lun_state.cc).
  void RestoreState();
  // The shared reservations may be stale until the shared object hands over a reread.
  void MarkSharedStateUnknown();

  // Events kept for nexuses that have not synced yet; older ones are dropped.
  static constexpr size_t kMaxUaLog = 64;
  struct UaEvent {
    uint64_t epoch;
    UnitAttention ua;
    const Nexus* except;
    std::shared_ptr<const NexusMatch> only;  // null: every nexus
  };
  const LunConfig config_;
  const uint64_t generation_;
  const std::shared_ptr<backing::BackingStore> store_;
  const bool shared_;
  std::atomic<bool> read_only_;
  mutable std::mutex shared_mu_;
  std::weak_ptr<backing::SharedObject> shared_state_;  // guarded by shared_mu_
  uint64_t listener_token_ = 0;  // guarded by shared_mu_: the shared object's listener
  std::atomic<uint64_t> ua_epoch_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> write_errors_reported_{0};
  mutable std::mutex ua_mu_;
  std::vector<UaEvent> ua_log_;  // guarded by ua_mu_; bounded (oldest dropped)
  ModePages mode_pages_;
  Reservations reservations_;
  SanitizeState sanitize_;
  std::atomic<bool> reported_preferred_{true};
  unsigned access_state_differs_ = 0;
  std::mutex detached_mu_;
  uint32_t detached_flushes_ = 0;       // guarded by detached_mu_
  unsigned detached_slot_ = 0;          // guarded by detached_mu_: the last flush's reactor
  std::shared_ptr<Lun> detached_hold_;  // guarded by detached_mu_: set while flushes > 0
  std::mutex save_mu_;     // orders SaveState calls: a later call always carries newer state
  uint64_t save_seq_ = 0;  // guarded by save_mu_
};

// What the copy manager remembers of one EXTENDED COPY (LID1) for RECEIVE COPY RESULTS (SPC-4
// 6.18.2-6.18.5). List identifiers are scoped to the I_T nexus (SPC-4 6.4.3.2), so the records
// live in the Nexus.
struct CopyRecord {
  enum class State : uint8_t { kFree, kInProgress, kSucceeded, kFailed };
  State state = State::kFree;
  bool has_list_id = false;  // LIST ID USAGE 11b: no list identifier, never reported
  bool hold = false;         // LIST ID USAGE 00b: kept for RECEIVE COPY RESULTS after completion
  uint8_t list_id = 0;
  uint16_t segments_processed = 0;
  uint32_t transfer_bytes = 0;  // bytes written to copy destinations so far
  uint64_t finished_seq = 0;    // completion order, to replace the oldest record first
  uint8_t sense_len = 0;        // the CHECK CONDITION sense of a failed copy
  std::array<uint8_t, kMaxSenseLength> sense{};
};

class Nexus {
 public:
  // initiator_port: "<InitiatorName>,i,0x<ISID hex>" (SPC-4 iSCSI initiator port name).
  // relative_port_id: the target port's relative port identifier (VPD 0x83).
  Nexus(std::string initiator_port, uint16_t relative_port_id);

  const std::string& initiator_port() const { return initiator_port_; }
  uint16_t relative_port_id() const { return relative_port_id_; }
  // Expires when this nexus goes away: state tied to the I_T nexus (an SPC-2 reservation, SPC-4
  // 5.13.3) holds a weak reference and is gone with it.
  std::weak_ptr<const void> token() const { return token_; }

  // Pending unit attention for `lun` (oldest first); a new nexus starts with POWER ON, RESET, OR
  // BUS DEVICE RESET OCCURRED (29h/00h) on every LUN. Returns false when none is pending.
  bool PeekUnitAttention(Lun& lun, UnitAttention* ua);
  void PopUnitAttention(Lun& lun);
  // Establishes a unit attention on this nexus only.
  void AddUnitAttention(uint64_t lun_id, UnitAttention ua);
  // Clears every pending unit attention of this nexus for lun_id (e.g. after a reset it issued).
  void ClearUnitAttentions(uint64_t lun_id);
  // Clears the pending unit attentions of this nexus for `lun` that equal `ua` (REPORT LUNS and
  // REPORTED LUNS DATA HAS CHANGED, SPC-4 6.33).
  void ClearUnitAttention(Lun& lun, UnitAttention ua);
  // Whether store write errors were counted on `lun` (Lun::NoteWriteError) since this nexus last
  // took them, or since it first used the LUN; takes them.
  bool TakeWriteErrors(Lun& lun);

  // EXTENDED COPY records (xcopy.cc). At most kMaxCopies copies run at once per nexus; finished
  // records with held data are kept until reported or until a new copy needs the slot.
  static constexpr size_t kMaxCopies = 16;
  // The in-progress or held record with this list identifier, or null.
  CopyRecord* FindCopy(uint8_t list_id);
  // A record for a new copy: a free slot, else the oldest finished one; null when all kMaxCopies
  // are in progress.
  CopyRecord* ClaimCopy();
  // Marks `record` finished (state kSucceeded or kFailed set by the caller) in completion order.
  void FinishCopy(CopyRecord& record);

 private:
  // Pending unit attentions per LUN; beyond this the oldest is dropped (SAM-5 5.14 lets a logical
  // unit bound the queue).
  static constexpr size_t kMaxPendingUnitAttentions = 8;
  struct PerLun {
    uint64_t generation = 0;  // the Lun these fields are of (Lun::generation); 0: none yet
    bool power_on_pending = true;
    bool synced = false;  // seen_epoch and seen_write_errors taken from the LUN on first use
    uint64_t seen_epoch = 0;
    uint64_t seen_write_errors = 0;
    std::vector<UnitAttention> pending;  // bounded; reserved once
  };
  void PushPending(PerLun& s, UnitAttention ua);
  PerLun& Slot(uint64_t lun_id);
  void Sync(Lun& lun, PerLun& s);

  std::string initiator_port_;
  uint16_t relative_port_id_;
  std::shared_ptr<const void> token_ = std::make_shared<const char>(0);
  std::vector<PerLun> luns_;  // index = LUN id, sized kMaxLuns at construction
  std::array<CopyRecord, kMaxCopies> copies_{};
  uint64_t copy_seq_ = 0;
};

struct TargetInfo {
  std::string name;                        // target IQN
  uint16_t tpgt = 1;                       // target portal group tag
  uint16_t relative_port_id = 1;           // SCSI relative target port identifier
  uint16_t target_port_group = 1;          // ALUA target port group: one per gateway (VPD 0x83)
  std::vector<std::shared_ptr<Lun>> luns;  // sorted by id

  Lun* FindLun(uint64_t id) const;
};

class Engine {
 public:
  // Runs task.cdb against target's LUN task.lun for task.nexus; always ends with task.Complete().
  // A missing LUN answers as SPC-4 requires (INQUIRY peripheral qualifier 011b, REPORT LUNS and
  // REQUEST SENSE served, everything else LOGICAL UNIT NOT SUPPORTED).
  static void Execute(const TargetInfo& target, Task& task);

  // LOGICAL UNIT RESET: unit attention 29h/03h (BUS DEVICE RESET FUNCTION OCCURRED) for every
  // nexus but `issuer` (null: every nexus, as SAM-5 requires of a LOGICAL UNIT RESET task
  // management function); the caller aborts the tasks.
  // A LUN whose reservations the gateways share tells the other gateways too: `hold` is released
  // once they have raised the unit attention (or did not answer in time), so that the task
  // management response that holds it goes out after that.
  static void ResetLun(Lun& lun, const Nexus* issuer, std::shared_ptr<void> hold = nullptr);

  // CLEAR TASK SET: the caller aborts the tasks of this gateway's sessions; a LUN whose
  // reservations the gateways share has the other gateways abort theirs, and `hold` is released
  // once their aborted tasks have ended (or they did not answer in time and were fenced).
  static void ClearTaskSet(Lun& lun, std::shared_ptr<void> hold);

  // The LUN's capacity changed (grown by the control plane): CAPACITY DATA HAS CHANGED (2Ah/09h)
  // for every I_T nexus (SBC-3 4.7). Any thread.
  static void CapacityChanged(Lun& lun);

  // Compares the LUN's ALUA access state through this gateway (its store's preferred()) with the
  // one last reported. A state that differs in `settle` consecutive calls becomes the reported
  // one, with ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h) for every I_T nexus (SPC-4 5.15.2.5,
  // implicit transitions); true then. The settling keeps an image whose lock passes back and forth
  // (writes through two gateways at once) from raising a unit attention with each pass. One
  // caller at a time; the gateway calls it periodically for every LUN.
  static bool CheckAccessState(Lun& lun, unsigned settle = 1);
};

}  // namespace iscsigw::scsi
