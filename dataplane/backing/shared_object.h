// SharedObject: a small object that every gateway exporting one image reads, writes and watches,
// for state that belongs to the logical unit rather than to one gateway (the persistent
// reservations of a LUN that several gateways export: scsi/reservations.cc). RbdStore keeps one
// in RADOS next to a shared image (RbdStore::shared_object).
//
// Read, WriteIfVersion and Notify talk to the cluster and wait for it: never call them on a
// reactor. Post runs a job on the object's own thread, one job at a time, in order.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace iscsigw::backing {

class SharedObject {
 public:
  // A change another gateway made, or (events empty) the object's data reread after the watch was
  // lost and re-established, when changes may have been missed. `version` orders changes: a
  // listener applies data only when it is newer than what it has. Runs on a librados thread or
  // the object's thread, never concurrently with itself. `ack` (null for a reread): the change's
  // Notify is answered once the listener has returned and every copy of `ack` is gone; a
  // listener keeps one while work the change started must end first (tasks it aborted leaving
  // the store), and must not keep it longer than that.
  using Listener = std::function<void(uint64_t version, std::string_view data,
                                      std::string_view events, std::shared_ptr<void> ack)>;

  virtual ~SharedObject() = default;

  // The object's data and version ("" and 0 when it does not exist). 0 or -errno.
  virtual int Read(std::string* data, uint64_t* version) = 0;
  // Replaces the data if the object's version is still `version` (0: creates it), and sets *out
  // to the new version. -ECANCELED when another gateway wrote first; another -errno on failure,
  // when the write may or may not have happened.
  virtual int WriteIfVersion(uint64_t version, const std::string& data, uint64_t* out) = 0;
  // What Notify does about a gateway that does not answer within its timeout (one that died and
  // whose watch the cluster has not timed out yet, one cut off from the cluster, or one stopped
  // or stalled while alive).
  enum class Silent : uint8_t {
    kReport,  // -ETIMEDOUT
    // Fence it: its client is blocklisted in the cluster (RbdSharedObject), so that nothing it
    // sends lands any more, and it counts as answered; -ETIMEDOUT only when one could not be.
    // A gateway that joined the object's members and no longer watches it (its watch timed out
    // before it could hear of it) is fenced the same way.
    kFence,
  };
  // Hands (version, data, events) to every other gateway's listener and waits until each has run
  // it and released its ack, for at most `timeout`. 0, -ETIMEDOUT (see Silent), or another -errno.
  virtual int Notify(uint64_t version, const std::string& data, const std::string& events,
                     std::chrono::milliseconds timeout, Silent silent) = 0;
  // Runs fn on the object's thread. Jobs queued when the object goes do not run.
  virtual void Post(std::function<void()> fn) = 0;
  // Rereads the data on the object's thread and hands it to the listener (events empty); retried
  // each second until a read succeeds. For a reader that could not read it. Calls made while a
  // reread waits to run add none.
  virtual void Reload() = 0;
  // Sets the listener (one at a time), and `lost`, called when changes may be missed from now
  // until the listener gets the reread data (the watch was lost). ClearListener(token) removes
  // both if they are still the ones set with that token, and returns once no call of them runs.
  virtual uint64_t SetListener(Listener listener, std::function<void()> lost) = 0;
  virtual void ClearListener(uint64_t token) = 0;
  // How long ago the cluster last confirmed this gateway's watch on the object, in ms, or -errno
  // while the watch is broken (lost, and not watched again yet). Answers from what the client
  // knows, never waits for the cluster. 0 from an object that cannot tell.
  virtual int WatchCheck() { return 0; }
};

}  // namespace iscsigw::backing
