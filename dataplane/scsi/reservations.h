// Reservation state of one logical unit: the SPC-2 reservation of RESERVE(6)/(10) and the
// persistent reservation and registrations of PERSISTENT RESERVE OUT (SPC-4 5.13).
//
// Threading: shared by every reactor. active() is one acquire load that the READ/WRITE path
// takes per command; only when it is true (a reservation of either kind exists) does a command
// take mu_ to be checked against it. The command handlers (reservations.cc) take mu_ themselves.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/scsi/lun_state.h"

namespace iscsigw::scsi {

// PERSISTENT RESERVE OUT TYPE codes (SPC-4 6.17.2, table 178).
enum PrType : uint8_t {
  kPrWriteExclusive = 0x1,
  kPrExclusiveAccess = 0x3,
  kPrWriteExclusiveRegistrantsOnly = 0x5,
  kPrExclusiveAccessRegistrantsOnly = 0x6,
  kPrWriteExclusiveAllRegistrants = 0x7,
  kPrExclusiveAccessAllRegistrants = 0x8,
};

class Reservations {
 public:
  // One registered I_T nexus (SPC-4 5.13.7).
  struct Registrant {
    uint64_t key = 0;
    NexusMatch nexus;  // relative_port_id 0 when registered with ALL_TG_PT=1
    bool all_tg_pt = false;
    bool holder = false;  // holds the persistent reservation (every registrant for AR types)
  };

  // Fast path: true while an SPC-2 or a persistent reservation exists.
  bool active() const { return active_.load(std::memory_order_acquire); }

  // Everything below: callers hold mu().
  std::mutex& mu() const { return mu_; }

  // The SPC-2 reservation; a holder whose I_T nexus is gone no longer holds it (SPC-4 5.13.3).
  bool spc2_reserved_by(const Nexus& nexus);
  bool spc2_reserved();
  void spc2_reserve(const Nexus& nexus);
  void spc2_release();

  std::vector<Registrant>& registrants() { return regs_; }
  const std::vector<Registrant>& registrants() const { return regs_; }
  Registrant* FindRegistrant(const Nexus* nexus);
  bool pr_reserved() const { return pr_reserved_; }
  uint8_t pr_type() const { return pr_type_; }
  void set_pr(bool reserved, uint8_t type);
  uint32_t generation() const { return generation_; }
  void bump_generation() { ++generation_; }
  bool aptpl() const { return aptpl_; }
  void set_aptpl(bool v) { aptpl_ = v; }

  // "pr ..." lines describing the registrations and reservation (with APTPL=1), else "".
  std::string Serialize() const;
  // Restores what Serialize() wrote (registrations, reservation, APTPL); ignores other lines.
  void Restore(const std::string& blob);

  // The whole persistent reservation state, APTPL or not, as the gateways that export one image
  // share it (LunConfig::shared_state), and its replacement by such a blob ("": none).
  std::string SerializeShared() const;
  void RestoreShared(std::string_view blob);
  // Set while a shared LUN's state could not be read (LunConfig::shared_state): active() is true
  // and the engine answers NOT READY to commands that depend on it, until RestoreShared.
  bool unknown() const { return unknown_.load(std::memory_order_acquire); }
  void set_unknown() {
    unknown_.store(true, std::memory_order_release);
    UpdateActive();
  }
  // The shared object's version the state came from; 0: none yet.
  uint64_t shared_version() const { return shared_version_; }
  void set_shared_version(uint64_t v) { shared_version_ = v; }
  // A PERSISTENT RESERVE OUT this gateway wrote to the shared object but could not hand to the
  // other gateways, so it answered NOT READY: `nexus` sent it, `request` names the command,
  // `events` are what the others were to learn, `version` is the object's version it wrote. Its
  // retry is answered from this record, not applied to the state a second time, as long as the
  // object is still at that version (reservations.cc); empty nexus: none.
  struct UnannouncedChange {
    std::string nexus;
    std::string request;
    std::string events;
    uint64_t version = 0;
  };
  UnannouncedChange& unannounced() { return unannounced_; }

  static bool AllRegistrantsType(uint8_t type) {
    return type == kPrWriteExclusiveAllRegistrants || type == kPrExclusiveAccessAllRegistrants;
  }
  static bool RegistrantsOnlyType(uint8_t type) {
    return type == kPrWriteExclusiveRegistrantsOnly || type == kPrExclusiveAccessRegistrantsOnly;
  }

 private:
  void UpdateActive();
  std::string SerializeRegistrations() const;
  void Load(std::string_view blob, bool shared);

  mutable std::mutex mu_;
  std::atomic<bool> active_{false};
  std::atomic<bool> unknown_{false};
  // Guarded by mu_.
  std::weak_ptr<const void> spc2_holder_;
  bool spc2_held_ = false;
  std::vector<Registrant> regs_;
  bool pr_reserved_ = false;
  uint8_t pr_type_ = 0;
  uint32_t generation_ = 0;
  bool aptpl_ = false;
  uint64_t shared_version_ = 0;
  UnannouncedChange unannounced_;
};

}  // namespace iscsigw::scsi
