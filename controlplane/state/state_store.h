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
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "controlplane/state/limits.h"
#include "dataplane/api/dataplane.h"
#include "dataplane/base/status.h"
#include "iscsigw/v1/state.pb.h"

namespace iscsigw::state {

// Writes `contents` to `path` atomically: <path>.tmp (mode), fsync, rename, fsync of the directory.
Status WriteFileAtomically(const std::string& path, const std::string& contents, int mode);

// The state as persisted: protobuf JSON, secrets included.
std::string StateToJson(const iscsigw::v1::State& state);

// Loads <dir>/state.json. A missing file is an empty state; an unreadable, malformed or invalid
// file is an error whose message names the file and the problem (the caller must not overwrite
// it).
Result<iscsigw::v1::State> LoadStateDir(const std::string& dir);

class StateStore {
 public:
  // `dataplane` may be null (tests of persistence alone). The state must already be normalised
  // and valid (LoadStateDir + MergeBootstrap + Normalize).
  StateStore(std::string dir, iscsigw::v1::State initial, api::Dataplane* dataplane,
             Limits limits = {});

  const std::string& dir() const { return dir_; }
  const Limits& limits() const { return limits_; }
  std::string path() const { return dir_ + "/state.json"; }

  // Applies the initial state to the data plane and persists it. Called once at start.
  Status Start();

  // Runs `edit` on a copy of the state; on Ok the copy is checked against the limits, validated,
  // applied and persisted.
  Status Update(const std::function<Status(iscsigw::v1::State*)>& edit);

  // The current state, shared: it never changes (Update replaces it).
  std::shared_ptr<const iscsigw::v1::State> Snapshot() const;
  iscsigw::v1::State Get() const;

  // Ok when the last write of the state succeeded (or none was needed) and the last probe of the
  // directory did; otherwise why not.
  Status health() const;
  // Writes, fsyncs and removes a probe file in the directory, so that a directory that can no
  // longer be written (read-only, full, gone) shows in health() before a change fails on it.
  // Blocking: call it from a control-plane thread.
  Status ProbeDir();

 private:
  Status Commit(const iscsigw::v1::State& next, const iscsigw::v1::State* previous,
                api::Dataplane::ApplyMode mode = api::Dataplane::ApplyMode::kStrict);

  const std::string dir_;
  api::Dataplane* const dataplane_;
  const Limits limits_;
  std::mutex update_mu_;   // held through a whole Start or Update (the change applied and written)
  mutable std::mutex mu_;  // held only to read or swap what it guards
  std::shared_ptr<const iscsigw::v1::State> state_;  // guarded by mu_; never null
  Status health_;                                    // guarded by mu_: the last write
  Status probe_;                                     // guarded by mu_: the last ProbeDir
};

}  // namespace iscsigw::state
