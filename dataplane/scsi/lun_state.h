// Interfaces through which the SCSI engine reaches what it must not do itself, and the per-LUN
// state that every I_T nexus shares.
//
//   LunStateStore - durable storage for the state a logical unit keeps across restarts: persistent
//                   reservations registered with APTPL=1 (SPC-4 5.13.5) and saved mode page values
//                   (SPC-4 6.9, SP=1). The engine does no I/O: it hands the store one serialized
//                   blob per LUN and is told on the reactor thread when the blob is durable.
//                   Implemented in dataplane/api (files under the state directory).
//   TaskAborter   - aborts the tasks of other I_T nexuses (PREEMPT AND ABORT, SPC-4 5.13.11.2.3;
//                   a CLEAR TASK SET or LOGICAL UNIT RESET made through another gateway);
//                   implemented by the transport.
//   NexusMatch    - names I_T nexuses by initiator port and target port, as registrations and
//                   TransportIDs do (SPC-4 7.6.4.6), for unit attentions and aborts aimed at
//                   nexuses that may not even be logged in.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/backing/backing_store.h"

namespace iscsigw::scsi {

class Lun;
class Nexus;

struct NexusMatch {
  // "<iSCSI name>,i,0x<ISID in lower-case hex>", or with any_isid only "<iSCSI name>" (TransportID
  // format 00b names every initiator port of that initiator device).
  std::string initiator;
  bool any_isid = false;
  uint16_t relative_port_id = 0;  // 0: any target port
  // Every initiator port (a LOGICAL UNIT RESET made through another gateway); `initiator` unused.
  bool any_initiator = false;

  bool Matches(const std::string& initiator_port, uint16_t rel_port) const;
  bool Matches(const Nexus& nexus) const;
};

class LunStateStore {
 public:
  virtual ~LunStateStore() = default;

  // The blob last made durable, or "" when there is none. Called once when the Lun is created, on
  // the control-plane thread (may block). One store object serves one Lun object; its Save seqs
  // count from 1.
  virtual std::string Load() = 0;

  // Makes `blob` the LUN's durable state ("" removes it) and then runs done(0) on reactor `slot`
  // (done(errno) when it could not). Returns at once; never blocks the caller. Blobs carry an
  // increasing `seq` per LUN: a blob is never replaced by one with a smaller seq, whatever order
  // the writes finish in.
  virtual void Save(uint64_t seq, std::string blob, unsigned slot, backing::IoCompletion done) = 0;
};

class TaskAborter {
 public:
  virtual ~TaskAborter() = default;

  // Aborts every task for LUN `lun_id` that arrived on an I_T nexus matching one of `who`, except
  // on `except` (the nexus that asked). Any thread; returns at once (the aborts run on the
  // reactors owning those nexuses). `until_ended` (may be null) is released, on any thread, once
  // every task aborted has ended and can no longer change the medium (SAM-5 5.6): what answers
  // for the abort holds it and waits for that.
  virtual void AbortTasks(uint64_t lun_id, const std::vector<NexusMatch>& who, const Nexus* except,
                          std::shared_ptr<void> until_ended) = 0;
  // CLEAR TASK SET made through another gateway (SAM-5 7.4): every task for `lun` is aborted, and
  // each I_T nexus that had one gets COMMANDS CLEARED BY ANOTHER INITIATOR (TAS=0). Reactor
  // thread; `until_ended` as above.
  virtual void ClearTaskSet(Lun& lun, std::shared_ptr<void> until_ended) = 0;
};

}  // namespace iscsigw::scsi
