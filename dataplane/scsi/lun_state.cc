// The durable part of a LUN's state: one text blob per LUN, handed to the LunStateStore.
//
//   iscsigw-lun-state 1
//   mode wce=<0|1>                       saved mode values (only when they differ from defaults)
//   mode swp=<0|1>
//   pr ...                               APTPL registrations and reservation (reservations.cc)
//
// An empty blob means "nothing to keep" (the store removes what it had).
#include <string>

#include "dataplane/scsi/engine.h"

namespace iscsigw::scsi {

namespace {
constexpr char kMagic[] = "iscsigw-lun-state 1\n";
}  // namespace

bool NexusMatch::Matches(const std::string& initiator_port, uint16_t rel_port) const {
  if (relative_port_id != 0 && relative_port_id != rel_port) return false;
  if (any_initiator) return true;
  if (!any_isid) return initiator_port == initiator;
  // "<name>,i,0x<isid>": the name part must be exactly `initiator`.
  return initiator_port.size() > initiator.size() &&
         initiator_port.compare(0, initiator.size(), initiator) == 0 &&
         initiator_port.compare(initiator.size(), 3, ",i,") == 0;
}

bool NexusMatch::Matches(const Nexus& nexus) const {
  return Matches(nexus.initiator_port(), nexus.relative_port_id());
}

bool Lun::SaveState(unsigned slot, backing::IoCompletion done) {
  LunStateStore* store = config_.state_store.get();
  if (store == nullptr) return false;
  // Under save_mu_, the snapshot and its seq go out together: a later SaveState sees state at
  // least as new and carries a larger seq, so the store keeps the newest whatever finishes first.
  std::lock_guard lock(save_mu_);
  std::string body = mode_pages_.Serialize();
  if (!shared_) {  // shared reservations live in the shared object
    std::lock_guard pr_lock(reservations_.mu());
    body += reservations_.Serialize();
  }
  std::string blob = body.empty() ? std::string() : kMagic + body;
  store->Save(++save_seq_, std::move(blob), slot, done);
  return true;
}

void Lun::RestoreState() {
  if (config_.state_store == nullptr) return;
  const std::string blob = config_.state_store->Load();
  if (blob.rfind(kMagic, 0) != 0) return;  // empty, or not ours: start from defaults
  mode_pages_.Restore(blob);
  // Without the reservation commands nobody could release a reservation saved while the LUN had
  // them (the gateway then alone): it is not restored, so that it cannot fence writes for good.
  // Shared reservations come from the shared object instead (Lun::Lun).
  if (!config_.reservations || shared_) return;
  std::lock_guard lock(reservations_.mu());
  reservations_.Restore(blob);
}

}  // namespace iscsigw::scsi
