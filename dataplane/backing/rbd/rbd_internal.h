// What the files of the rbd store (rbd_store.h) share, and nothing else includes: the records
// RbdStore keeps private (its librados handle, operations in flight, slots, the lock watch), the
// pool its blocking calls run on, and the helpers one file keeps for another. The files, by job:
//   rbd_conf.cc           the librados handle of a conf, client id and keyring, and the conf
//                         options set where the conf file leaves Ceph's default (Cluster::Get);
//   rbd_lock.cc           the exclusive lock: the lock watch, a dead owner's lock broken, a silent
//                         gateway fenced;
//   rbd_image.cc          the image: created, opened, grown, closed, removed; the shared object;
//   rbd_store.cc          the I/O: records, submission to librbd or the pool, completion;
//   offline_rbd_store.cc  OfflineRbdStore, the image that is not open yet.
// Threading: as rbd_store.h says of each record.
#pragma once

#include <rados/librados.h>
#include <rbd/librbd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "dataplane/backing/op_pool.h"
#include "dataplane/backing/rbd/rbd_store.h"
#include "dataplane/runtime/completion_inbox.h"

namespace iscsigw::backing {
namespace rbd_internal {

// Defined in rbd_store.cc. Read-modify-writes, writes that wait behind one, and object map queries
// block a thread of this pool (shared by every rbd store), never a reactor.
boost::asio::thread_pool& RbdPool();

// Defined in rbd_conf.cc: an option as librbd applies it to one image (ImageConfGet), and the bytes
// the OSD writes whole (AtomicUnit).
std::string ImageConfGet(rados_t h, rbd_image_t image, const char* option);
uint64_t AtomicUnit(rados_t h, rbd_image_t image);

// Defined in rbd_lock.cc. The exclusive lock of an image whose last writer died (kill -9, a node
// crash) stays with that writer's client until the OSDs time its watch out
// (osd_client_watch_timeout, 30 s), and librbd's writes wait that long to acquire it. Two cases do
// not wait:
//  - kRestarted, at open: a gateway restarted after a crash comes back with the same host address
//    and a new nonce. An owner with our host and another nonce is probed.
//  - kWritesWaiting, from the lock watch (LockWatch): this gateway's writes have made no progress
//    for kStuckWrites while another client owns the lock (another gateway, the owner of the
//    image until it died: the failover of several gateways). Whatever its host, the owner is
//    probed.
// Probed: when the owner acknowledges neither of two notifies on the image's header, each
// within kLockProbeTimeoutMs, it is not alive (or cut off from the cluster, which is the same to
// its writes), and its lock is broken (rbd_lock_break, which blocklists it: the fencing Ceph's docs
// prescribe for a dead owner, so that nothing it still has in flight can land). A live owner
// keeps its lock: librbd asks it for the lock, as it always does.
enum class BreakIf : uint8_t { kRestarted, kWritesWaiting };

// Blocklists client `gid`, a gateway of the image that did not acknowledge a change of the shared
// reservations (SharedObject::Silent::kFence): every gateway of the image watches its header
// through the librados handle its shared object uses, so the header's watchers give the client's
// address. 0 or -errno (-ENOENT: it watches the header no more).
int BlocklistWatcher(rados_t cluster, rbd_image_t image, uint64_t gid);

// True when it broke a lock.
bool BreakDeadLockOwner(rados_t cluster, rados_ioctx_t io, rbd_image_t image, BreakIf when,
                        const std::string& who);

}  // namespace rbd_internal

// A librados handle shared by every store with the same conf, client id and keyring.
struct RbdStore::Cluster {
  rados_t handle = nullptr;
  // The cluster blocklisted this client (an exclusive lock of it was broken): every request of
  // the handle fails with ESHUTDOWN from now on, so no store opened later may share it.
  std::atomic<bool> fenced{false};
  ~Cluster() {
    if (handle != nullptr) rados_shutdown(handle);
  }

  // Connects (rbd_conf.cc), or hands out the live handle of the same conf, client id and keyring.
  static Result<std::shared_ptr<Cluster>> Get(const RbdStoreOptions& o, const std::string& who);
};

// One operation in flight.
struct RbdStore::Op : runtime::CompletionInbox::Item {
  enum class Kind : uint8_t {
    kRead,
    kWrite,
    kFlush,
    kUnmap,
    kCompareWrite,  // native: rbd_aio_compare_and_write
    kPool,          // ran on RbdPool(); result set there
  };
  RbdStore* store = nullptr;
  Slot* slot = nullptr;
  Kind kind = Kind::kRead;
  bool fua = false;
  bool fua_flushing = false;  // a FUA write whose data landed, now in its flush
  bool gated = false;         // holds the gate shared (writes, unmaps, native compare-and-writes)
  bool counted = false;       // a write the lock watch counts (LockWatchWrites)
  uint64_t offset = 0;
  uint8_t* data = nullptr;  // const for writes
  uint64_t len = 0;
  CompareWriteOp* caw = nullptr;
  uint64_t mismatch = 0;  // written by librbd on a miscompare
  int64_t result = 0;     // librbd's return value: >= 0, or a negative errno value
  IoCompletion done;
  // kPool: what to run there.
  enum class PoolWork : uint8_t { kReadModifyWrite, kWrite, kUnmap, kCompareWrite, kProvision };
  PoolWork work = PoolWork::kWrite;
  ModifyFn modify;
  Extent* extent = nullptr;
  Op* next_free = nullptr;
};

struct RbdStore::Slot {
  Slot(unsigned slot_index, boost::asio::io_context& context, runtime::CompletionInbox& completions)
      : index(slot_index), ioc(&context), inbox(&completions) {}
  unsigned index;
  boost::asio::io_context* ioc;
  runtime::CompletionInbox* inbox;
  OpPool<Op> ops;
  uint64_t native_compare_writes = 0;
  LockWatchWrites* writes = nullptr;  // the lock watch's counters of this slot; null: no watch
};

// Writes of one slot that librbd has (they need the exclusive lock), for the lock watch: counted
// by the slot's reactor, read by the watch.
struct alignas(64) RbdStore::LockWatchWrites {
  std::atomic<uint64_t> started{0};
  std::atomic<uint64_t> done{0};
};

// Who holds the image's exclusive lock, as this gateway sees it (preferred()), and the break of a
// dead holder that this gateway's writes wait for. One thread per store of an image with
// exclusive locking opened for writing. The lock itself stays librbd's, automatic: the first
// writer takes it, and a live holder hands it over when another client's write asks for it.
struct RbdStore::LockWatch {
  std::unique_ptr<LockWatchWrites[]> writes;  // one per slot
  size_t slots = 0;
  std::atomic<bool> preferred{true};
  std::string holder_tag;  // this gateway's id, the value of kHolderKey when it claims the lock
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;  // guarded by mu
  std::thread thread;

  ~LockWatch() { Stop(); }  // a close still queued on the pool at exit never ran Stop

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }

  // Sets `preferred`: true while this client holds the lock or nobody does; *mine: whether this
  // client holds it. False when librbd could not say.
  // Nobody holding it (the gateways just started, or the holder closed the image) would leave
  // every gateway optimized: an initiator would spread its writes over all of them and the lock
  // would pass back and forth with each. So a gateway that finds it free claims it: setting the
  // image metadata key kHolderKey takes the lock when nobody holds it (librbd's maintenance
  // operations acquire it), and is handed to the holder, which keeps it, when one does. The
  // first gateway to look wins.
  bool Look(rbd_image_t image, int* mine);
  // The watch's thread: looks every kLockWatchPeriod until Stop.
  void Run(rados_t cluster, rados_ioctx_t io, rbd_image_t image, const std::string& who);
};

}  // namespace iscsigw::backing
