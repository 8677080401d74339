// Changing a live LUN's store settings (read_only, direct, fault) in place: the LUN stays, with
// its reservations, unit attentions, write-error counts and every I_T nexus's view of it, and
// its store is closed and opened anew, never two at once (docs/live-lun-changes.md).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "dataplane/api/dataplane.h"
#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/fault_store.h"
#include "dataplane/backing/shared_object.h"
#include "dataplane/iscsi/gateway.h"
#include "dataplane/runtime/reactor_pool.h"
#include "dataplane/scsi/engine.h"

namespace iscsigw::api {

// The medium of a LUN: the store and, for an rbd image other gateways export, its shared object.
struct OpenedMedium {
  std::shared_ptr<backing::BackingStore> store;
  std::shared_ptr<backing::SharedObject> shared;
};
using OpenMediumFn = std::function<Result<OpenedMedium>(const LunSpec&)>;

struct ReopenContext {
  iscsi::Gateway& gateway;
  runtime::ReactorPool& pool;
  OpenMediumFn open;       // a file or rbd LUN's medium, as `spec` says; blocking
  backing::DeferFn defer;  // for a fault wrapper's delays
  // How long the calls made to the old store may take to end, and its flush. Past it nothing
  // changes and the LUN serves on as it was.
  std::chrono::milliseconds bound{30000};
};

// Whether `a` and `b` give the same LUN and the same store, every setting alike.
bool SameBacking(const LunSpec& a, const LunSpec& b);

// Whether `now` is `was` with other store settings, the same medium and a size at least as large
// (a larger one is grown after the reopen, like any growth).
bool IsReopen(const LunSpec& was, const LunSpec& now);

// Reopens `lun` (its store an InstrumentedStore, as every LUN's is) from `was` to `now`:
//   1. its store closed: every command that needs the medium answers NOT READY, BECOMING READY
//      (SPC-4 04h/01h), which initiators retry;
//   2. every call made before ends (a task drain over every session of the gateway, and any
//      SYNCHRONIZE CACHE with IMMED), and the old store is flushed: what it acknowledged is on
//      the medium, or every I_T nexus hears of a write error at its next SYNCHRONIZE CACHE;
//   3. the old store is closed for good (its descriptors, journal and image handle let go);
//   4. the new one opens (the same medium kept for a ram or null LUN, and for a file or rbd LUN
//      whose read_only and direct stay), behind a fault wrapper when `now` asks for one;
//   5. the LUN serves again; a change of read_only reaches every nexus as MODE PARAMETERS
//      CHANGED (2Ah/01h: the mode parameter header's WP bit).
// Refused, with nothing changed, while a SANITIZE runs or the store is offline (an rbd image not
// open yet, which opens in the background with the settings it has). When the new medium does not
// open, the old settings are opened again and the error returned; when neither opens, the LUN stays
// closed (NOT READY, the reason in its offline_reason) and a later call with any settings tries
// again. Control-plane thread; blocks for up to ctx.bound plus the opens.
Status ReopenLun(const ReopenContext& ctx, scsi::Lun& lun, const LunSpec& was, const LunSpec& now,
                 const std::string& who);

// Whether `lun`'s store was left closed by a reopen that could open nothing.
bool LeftClosed(scsi::Lun& lun);

}  // namespace iscsigw::api
