// StateStore: the gateway's desired state (iscsigw.v1.State) in memory, persisted to
// <state-dir>/state.json and applied to the data plane. Every change goes through Update(): the
// edited copy is validated, applied to the data plane, and written to disk (temp file, fsync,
// rename, fsync of the directory); when any step fails nothing changes, neither in memory, nor on
// disk, nor in the data plane. The file holds CHAP secrets and is created with mode 0600. A change
// that would grow the state past its Limits (controlplane/state/limits.h) is refused with
// RESOURCE_EXHAUSTED.
//
// Threading: any thread; Update calls are serialised by an internal mutex (they are rare) that
// readers never take: an Update waiting for storage (an rbd cluster that does not answer) holds up
// neither Snapshot() nor health(), which see the last committed state. The state is held as an
// immutable snapshot: Snapshot() shares it under a short lock without copying (readers of
// thousands of targets must not copy them all), Get() copies it.
//
// Shared configuration (EnableShared, --shared-config; shared_config.h says which targets): the
// shared targets live in a SharedObject (iscsigw_config in RADOS) and the state file keeps the
// rest. An Update whose edit changes a shared target reads the object; when another gateway
// changed it since this gateway's copy, the change is taken in and the edit runs again on it.
// Otherwise the edited state is applied to the data plane and written with compare-and-swap on
// the object's version (another gateway wrote first: the data plane goes back and the edit runs
// again, up to 32 times, then UNAVAILABLE); the others are notified and reread the object. On a
// notify, or after a lost watch, this gateway rereads the object on the object's own thread and
// applies what changed leniently (kStartup: an image that cannot be opened makes its LUN
// offline); the sessions of a target deleted through another gateway are asked to log out first.
// The notify is acknowledged once the reread is queued: the others apply a change moments after
// the Update returns. Until the object is first read (the cluster may be down at start, it is
// retried every 5 s) the local targets serve, health() says why not, and changes to shared
// targets are UNAVAILABLE.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "base/status.h"
#include "controlplane/state/limits.h"
#include "dataplane/api/dataplane.h"
#include "iscsigw/v1/state.pb.h"

namespace iscsigw::state {

// Writes `contents` to `path` atomically: <path>.tmp (mode), fsync, rename, fsync of the directory.
// The temp file is always a new one (O_EXCL | O_NOFOLLOW, a leftover removed first): a link planted
// under its name is never followed, nor a file someone else opened written. *replaced (when given)
// says whether `path` holds the new contents: an error after the rename (the directory's fsync)
// leaves them in place, not yet durable.
Status WriteFileAtomically(const std::string& path, const std::string& contents, int mode,
                           bool* replaced = nullptr);

namespace internal {
// The fsync that makes a rename durable (::fsync); tests make it fail, as a failing disk would.
extern int (*fsync_dir)(int fd);
}  // namespace internal

// docs/security.md, "The state directory": whether the daemon (euid, egid) may trust a directory
// whose stat is `st` to hold its state (CHAP secrets, what LUNs exist): a directory, owned by the
// daemon's user (or by root with the daemon's group, as Kubernetes prepares an fsGroup volume),
// writable by no other user and by its group only when that group is the daemon's own.
// FAILED_PRECONDITION naming `dir`, the owner and mode otherwise.
Status CheckTrustedDir(const std::string& dir, const struct stat& st, uid_t euid, gid_t egid);
// The same for the directory `dir` on disk and the running process.
Status CheckTrustedDir(const std::string& dir);

// The state as persisted: protobuf JSON, secrets included.
std::string StateToJson(const iscsigw::v1::State& state);

// Loads <dir>/state.json. A missing file is an empty state; an unreadable, malformed or invalid
// file is an error whose message names the file and the problem (the caller must not overwrite
// it).
Result<iscsigw::v1::State> LoadStateDir(const std::string& dir);

// Whether the watch on the shared configuration in `where` fails: `lost` (the object said so
// and has not re-established it yet), broken (`check` is -errno, SharedObject::WatchCheck) or not
// confirmed by the cluster for longer than StateStore::kWatchStaleAfter (`check` in ms).
Status WatchStatus(const std::string& where, bool lost, int check);

class StateStore {
 public:
  // `dataplane` may be null (tests of persistence alone). The state must already be normalised
  // and valid (LoadStateDir + MergeBootstrap + Normalize).
  StateStore(std::string dir, iscsigw::v1::State initial, api::Dataplane* dataplane,
             Limits limits = {});
  ~StateStore();

  const std::string& dir() const { return dir_; }
  const Limits& limits() const { return limits_; }
  std::string path() const { return dir_ + "/state.json"; }

  // Applies the initial state to the data plane and persists it. Called once at start.
  Status Start();

  // Runs `edit` on a copy of the state; on Ok the copy is checked against the limits, validated,
  // applied and persisted. With a shared configuration the edit may run more than once.
  Status Update(const std::function<Status(iscsigw::v1::State*)>& edit);

  // Shares the targets whose LUNs are rbd with the other gateways through the object that `open`
  // opens (blocking; called again every 5 s until it and the first read succeed, on a thread of
  // the store's, which then rereads the object every kSharedRereadSeconds in case a notify was
  // missed). `where` names it in messages. `redeclared`: the bootstrap's declarations of targets
  // that changed since the last start (targets) and the previous ones (bootstrap record), applied
  // to the object's copies as MergeBootstrap would to local ones. Call once, after Start.
  using SharedOpener = std::function<Result<std::shared_ptr<api::SharedObject>>()>;
  void EnableShared(std::string where, SharedOpener open, iscsigw::v1::State redeclared);
  // Stops sharing: no reread runs after it returns, and the object is closed. Before the data
  // plane stops; idempotent.
  void StopShared();
  // True when `target` (qualified) is served from the shared configuration.
  bool IsShared(const std::string& target) const;

  static constexpr int kSharedRereadSeconds = 30;
  // How long the sessions of a target deleted through another gateway have to log out.
  static constexpr std::chrono::seconds kRemovedTargetLogoutWait{5};

  // The current state, shared: it never changes (Update replaces it).
  std::shared_ptr<const iscsigw::v1::State> Snapshot() const;
  iscsigw::v1::State Get() const;

  // Ok when the last write of the state succeeded (or none was needed) and the last probe of the
  // directory did; otherwise why not.
  Status health() const;
  // Whether the last ProbeDir succeeded (true before the first).
  bool dir_writable() const;

  // The shared configuration as readiness and the metrics see it (docs/operations.md, "Health
  // and probes"). Never waits for the cluster, nor for a change under way.
  struct SharedHealth {
    bool enabled = false;  // EnableShared was called (--shared-config)
    bool loaded = false;   // the object was read and applied at least once since the start
    uint64_t version = 0;  // the object's version this gateway serves (0 before it is loaded)
    // The last time the object was loaded: read and applied, or reread and found at the version
    // already applied. A read whose content fails to apply does not count. The epoch before the
    // first load.
    std::chrono::system_clock::time_point last_load;
    // Ok while loaded and neither the last read, its adoption nor the watch fails; otherwise why
    // not.
    Status status;
  };
  SharedHealth shared_health() const;
  // A watch the cluster has not confirmed for this long counts as failing: the client pings it
  // every objecter_tick_interval (5 s), so three pings went unanswered, and an OSD drops a watch
  // it has not heard from within osd_client_watch_timeout (30 s by default), after which changes
  // made through other gateways are missed. Readiness turns before that happens.
  static constexpr std::chrono::seconds kWatchStaleAfter{20};
  // Writes, fsyncs and removes a probe file in the directory, so that a directory that can no
  // longer be written (read-only, full, gone) shows in health() before a change fails on it.
  // Blocking: call it from a control-plane thread.
  Status ProbeDir();

 private:
  // Applies `next` and writes `to_file` (next itself when null) to the state file; the data plane
  // goes back to `previous` when the write fails. When the file was replaced but its directory
  // could not be synced, the change stays (the file holds it): *in_effect is set and the error
  // says so; the caller publishes `next` all the same.
  Status Commit(const iscsigw::v1::State& next, const iscsigw::v1::State* previous,
                api::Dataplane::ApplyMode mode = api::Dataplane::ApplyMode::kStrict,
                const iscsigw::v1::State* to_file = nullptr, bool* in_effect = nullptr);
  void Publish(iscsigw::v1::State next);
  // With update_mu_ held.
  // move_in: write the object even when only local rbd targets are waiting to move in.
  Status UpdateShared(const std::function<Status(iscsigw::v1::State*)>& edit, bool move_in = false);
  // Moves local rbd targets that could not move in at start into the object.
  void MoveInPending();
  // Takes in the object's data at `version`: merged with the local targets and applied (kStartup).
  Status Adopt(const std::string& data, uint64_t version);
  // Rereads the object and adopts it when it changed (or the last adoption failed), then sends
  // a pending notify. Takes update_mu_.
  void Refresh();
  void RereadShared();
  // Sends the notify of the last change written, if any. Takes update_mu_ briefly.
  void NotifyOthers();
  void SharedLoop(const SharedOpener& open);
  Status Attach(std::shared_ptr<api::SharedObject> obj);
  // Local rbd targets into the object, and redeclared_ onto its copies; with update_mu_ held.
  Status MoveIn();
  // Drops from local_ (and the state file) the rbd targets that gave way to shared ones.
  void PruneLocal();
  // Sessions of the targets that `next` no longer has are asked to log out, and waited for.
  void LogOutOfRemovedTargets(const iscsigw::v1::State& next);
  Status SharedError(Status s);  // logged and made the shared status
  void SetSharedStatus(Status s);
  // A read of the object (Ok) or its failure, for shared_health(); with update_mu_.
  void NoteSharedRead(const Status& read);
  // The version this gateway serves now (shared_version_), for shared_health(): a load; with
  // update_mu_.
  void NoteSharedVersion();
  // The object was found at the version this gateway serves, applied (a load); with update_mu_.
  void NoteSharedLoad();

  const std::string dir_;
  api::Dataplane* const dataplane_;
  const Limits limits_;
  std::mutex update_mu_;   // held through a whole Start or Update (the change applied and written)
  mutable std::mutex mu_;  // held only to read or swap what it guards
  std::shared_ptr<const iscsigw::v1::State> state_;  // guarded by mu_; never null
  Status health_;                                    // guarded by mu_: the last write
  Status probe_;                                     // guarded by mu_: the last ProbeDir

  // Shared configuration. sharing_ is set once by EnableShared (under update_mu_ and mu_).
  bool sharing_ = false;
  std::string shared_where_;
  Status shared_status_;  // guarded by mu_: Ok once the object has been read
  // Guarded by update_mu_:
  std::shared_ptr<api::SharedObject> shared_obj_;  // null until attached
  uint64_t listener_token_ = 0;
  iscsigw::v1::State local_;        // what the state file holds
  iscsigw::v1::State shared_copy_;  // the object's targets at shared_version_
  uint64_t shared_version_ = 0;
  std::set<std::string> shared_names_;   // the shared targets served (in state_)
  uint64_t notify_version_ = 0;          // a written version the others are not notified of yet
  bool attaching_ = false;               // in Attach: health stays "not read yet" until it ends
  bool outcome_unknown_ = false;         // a write that may have happened: reread and adopt
  iscsigw::v1::State redeclared_;        // changed declarations not yet in the object
  std::mutex notify_mu_;                 // held by NotifyOthers while it holds the object
  std::set<std::string> shared_served_;  // guarded by mu_: shared_names_ as published
  // What shared_health() reports, guarded by mu_ (it never takes update_mu_):
  bool shared_loaded_ = false;
  uint64_t shared_served_version_ = 0;
  std::chrono::system_clock::time_point shared_last_load_;
  Status shared_read_;       // the last read of the object, once loaded
  bool watch_lost_ = false;  // from the object's lost() until its listener runs again
  std::shared_ptr<api::SharedObject> watched_;  // shared_obj_, for its WatchCheck
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread shared_thread_;
};

}  // namespace iscsigw::state
