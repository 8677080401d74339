// RbdSharedObject: a SharedObject in RADOS, an object that several gateways read, write and watch:
// "iscsigw_lun.<image id>" in the pool and namespace of an rbd image they all export (RbdStore),
// or "iscsigw_config", the configuration they share (RbdStore::OpenSharedObject). How the
// gateways use them: docs/multi-gateway.md.
//
//   Read            one read op; the version is the object's user version (rados_get_last_version)
//                   (a missing object reads as "", version 0)
//   WriteIfVersion  assert_version (version 0: exclusive create) + write_full in one write op
//                   (-ERANGE/-EOVERFLOW/-EEXIST: -ECANCELED)
//   Notify          rados_notify2 with "<origin> <version> <data length>\n<data><events>"; the
//                   watchers that timed out come from the OSD's reply, and with Silent::kFence
//                   each is handed to the fence (SetFence), and every member (JoinMembers) that
//                   neither answered nor timed out, so no longer watches, is blocklisted by the
//                   address it joined with
//   members         "<oid>.gateways", an object whose omap maps each member's client global id to
//                   its address: the gateways that must answer a change. A gateway joins once it
//                   watches, and leaves before it unwatches; one that dies stays listed until a
//                   notify fences it, which drops it from the list
//   listener        a watch (rados_watch2) on the object; every notify is acknowledged once the
//                   listener has run and released its ack (so Notify returns after the others'
//                   listeners ran: they applied the change, or, for the shared configuration,
//                   queued its reread; and the tasks a change aborted there have ended). An ack
//                   released later than the callback is sent from the thread that releases it
//                   (rados_notify_ack queues the op and does not wait for the OSD);
//                   the object's own notifies are acknowledged without running it. A watch error
//                   (the OSD connection lost: notifies may have been missed) re-establishes the
//                   watch on the object's thread, retrying each second, then rereads the object
//                   and hands it to the listener.
// The object is created (empty) when missing. It outlives the image's LUNs; removing the image
// does not remove it.
// Lifetime: the destructor stops the thread (queued jobs are dropped), removes the watch and waits
// for running callbacks: it talks to the cluster, so the RbdStore that owns the object destroys
// it where it closes the image (never on a reactor). Other holders keep weak references.
#pragma once

#include <rados/librados.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "dataplane/backing/shared_object.h"

namespace iscsigw::backing {

class RbdSharedObject final : public SharedObject {
 public:
  // Blocking. `keep` holds the librados handle `cluster` alive; the object `oid` is in the pool
  // and namespace of the I/O context `pool_io` (which the object does not keep); `who` prefixes
  // errors.
  static Result<std::shared_ptr<RbdSharedObject>> Open(std::shared_ptr<void> keep, rados_t cluster,
                                                       rados_ioctx_t pool_io,
                                                       const std::string& oid,
                                                       const std::string& who);
  ~RbdSharedObject() override;
  RbdSharedObject(const RbdSharedObject&) = delete;
  RbdSharedObject& operator=(const RbdSharedObject&) = delete;

  const std::string& oid() const { return oid_; }

  int Read(std::string* data, uint64_t* version) override;
  int WriteIfVersion(uint64_t version, const std::string& data, uint64_t* out) override;
  int Notify(uint64_t version, const std::string& data, const std::string& events,
             std::chrono::milliseconds timeout, Silent silent) override;
  // How Notify fences a silent gateway: blocklists the client with this global id, 0 or -errno.
  // Set by the owner that can find the client's address (RbdStore: the image's watchers), and
  // cleared (null) before what it uses goes. Without one, Silent::kFence reports -ETIMEDOUT.
  void SetFence(std::function<int(uint64_t gid)> fence);
  // Lists this client among the members (see above), or takes it off. Blocking; 0 or -errno.
  int JoinMembers();
  int LeaveMembers();
  void Post(std::function<void()> fn) override;
  void Reload() override;
  uint64_t SetListener(Listener listener, std::function<void()> lost) override;
  void ClearListener(uint64_t token) override;
  // rados_watch_check of the current watch: the objecter pings it every objecter_tick_interval
  // (5 s), and the answer is how long ago the OSD last acknowledged one.
  int WatchCheck() override;

  // The largest data Read returns (a longer object reads as -EFBIG) and WriteIfVersion takes.
  static constexpr size_t kMaxData = 1 << 20;

 private:
  RbdSharedObject() = default;
  static void OnNotify(void* arg, uint64_t notify_id, uint64_t cookie, uint64_t notifier,
                       void* data, size_t len);
  static void OnWatchError(void* arg, uint64_t cookie, int err);
  // On the object's thread: watches again if the watch was lost, then reads the object and hands
  // it to the listener. What fails is tried again a second later (ResyncLater), without holding
  // up the jobs queued meanwhile.
  void Resync();
  void ResyncLater();
  // Creates the object if it is missing and watches it (cookie_). 0 or -errno.
  int Watch();
  // With Silent::kFence: blocklists every member that is not this client and is neither in
  // `answered` nor in `timed_out` (Notify's reply), and drops it from the members. 0, or
  // -ETIMEDOUT when one could not be read or fenced.
  int FenceSilentMembers(const std::vector<uint64_t>& answered,
                         const std::vector<uint64_t>& timed_out);
  void RunJobs();

  // What a notify's acknowledgement needs, for acks released after the callback: io is cleared
  // (under mu) before the destructor destroys it.
  struct AckTarget {
    std::mutex mu;
    rados_ioctx_t io = nullptr;
    std::string oid;
    std::string who;
  };

  std::shared_ptr<void> keep_;
  rados_t cluster_ = nullptr;
  rados_ioctx_t io_ = nullptr;
  std::shared_ptr<AckTarget> ack_target_ = std::make_shared<AckTarget>();
  std::string oid_;
  std::string who_;
  std::string origin_;  // "<librados instance id>.<this>": names this object's notifies
  std::mutex op_mu_;    // an op and the rados_get_last_version after it
  std::mutex fence_mu_;
  std::function<int(uint64_t gid)> fence_;  // guarded by fence_mu_
  std::mutex watch_mu_;
  uint64_t cookie_ = 0;         // guarded by watch_mu_; 0: no watch
  bool watch_lost_ = false;     // guarded by watch_mu_: its error callback ran
  std::mutex listener_mu_;      // held while the listener runs
  Listener listener_;           // guarded by listener_mu_
  std::function<void()> lost_;  // guarded by listener_mu_
  uint64_t token_ = 0;          // guarded by listener_mu_
  std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by jobs_mu_
  bool stop_ = false;                       // guarded by jobs_mu_
  // guarded by jobs_mu_: when a Resync that failed runs again (at most one pending)
  std::optional<std::chrono::steady_clock::time_point> retry_due_;
  bool reload_queued_ = false;  // guarded by jobs_mu_: a Reload's Resync waits to run
  std::thread thread_;
};

}  // namespace iscsigw::backing
