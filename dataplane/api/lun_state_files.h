// The data plane's implementations of the SCSI engine's outward interfaces (scsi/lun_state.h):
//
//   LunStateFiles  - one file per LUN under <state-dir>/lun-state/ holding the LUN's durable SCSI
//                    state (APTPL persistent reservations, saved mode pages). Writes are atomic
//                    (temp file, fsync, rename, fsync of the directory) and run on one writer
//                    thread of their own, never on a reactor; the completion is posted back to
//                    the reactor that asked.
//   GatewayTaskAborter - PREEMPT AND ABORT's hook: aborts a LUN's tasks on the sessions of a
//                    target whose I_T nexus is one of the preempted ones (or all of them, for a
//                    reset or a CLEAR TASK SET made through another gateway), and tells (through
//                    a TaskDrain) when every one of them has ended.
//
// Threading: ForLun and the constructors run on the control-plane thread; the stores they hand out
// are called from any reactor. Stop() (or the destructor) waits for queued writes.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dataplane/scsi/lun_state.h"

namespace iscsigw::iscsi {
class Gateway;
class TaskDrain;
}  // namespace iscsigw::iscsi

namespace iscsigw::api {

class LunStateFiles {
 public:
  // Runs fn on reactor `slot`.
  using PostFn = std::function<void(unsigned slot, std::function<void()> fn)>;

  // dir: the directory of the state files (created when first needed).
  LunStateFiles(std::string dir, PostFn post);
  ~LunStateFiles();
  LunStateFiles(const LunStateFiles&) = delete;
  LunStateFiles& operator=(const LunStateFiles&) = delete;

  // The store for LUN `lun` of `target`: <dir>/<target>.lun<lun>.
  std::shared_ptr<scsi::LunStateStore> ForLun(const std::string& target, uint32_t lun);

  // The LUN of `store` (from ForLun) is gone: its file is removed on the writer thread, after any
  // write already queued, and later saves through `store` are dropped, so a LUN created later
  // under the same id starts without the old reservations and saved mode pages.
  void Remove(const std::shared_ptr<scsi::LunStateStore>& store);

  // Waits for every queued write. Idempotent.
  void Stop();

  // Replaces the file at `path` with `blob` atomically, or removes it when blob is empty.
  // Returns 0 or an errno value. Exposed for tests.
  static int WriteAtomically(const std::string& path, const std::string& blob);

  struct Shared;  // the writer thread and directory, shared with the stores (lun_state_files.cc)

 private:
  std::shared_ptr<Shared> shared_;
};

class GatewayTaskAborter final : public scsi::TaskAborter {
 public:
  GatewayTaskAborter(iscsi::Gateway& gateway, std::string target)
      : gateway_(gateway), target_(std::move(target)) {}
  void AbortTasks(uint64_t lun_id, const std::vector<scsi::NexusMatch>& who,
                  const scsi::Nexus* except, std::shared_ptr<void> until_ended) override;
  void ClearTaskSet(scsi::Lun& lun, std::shared_ptr<void> until_ended) override;

 private:
  std::shared_ptr<iscsi::TaskDrain> DrainReleasing(std::shared_ptr<void> until_ended);

  iscsi::Gateway& gateway_;
  const std::string target_;
};

}  // namespace iscsigw::api
