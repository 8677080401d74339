// RbdStore: a LUN on a Ceph RBD image, through librbd's C asynchronous API.
//
// Opening (Open, on a control-plane thread; it blocks): a librados handle for the client id with
// the cluster's conf file and keyring path, an I/O context on the pool (and namespace), the image
// (rbd_open; created first with rbd_create4 when asked and missing). Stores that name the same
// conf, client id, keyring and `shared` share one librados handle (one set of librados threads and
// sockets), which goes with the last of them. So that a cluster that is not there fails instead of
// waiting forever, these are set where the conf file leaves Ceph's built-in default (a value in
// the conf file wins):
//   client_mount_timeout  15 s (Ceph: 300 s)  connecting: a missing mon fails Open within it;
//   rados_osd_op_timeout  30 s (Ceph: 0, wait forever)  each OSD request: past it an I/O fails with
//                         ETIMEDOUT; 30 s is the Linux initiator's default command timeout, so an
//                         OSD that comes back sooner only delays the command;
//   rados_mon_op_timeout  30 s (Ceph: 0, wait forever)  each mon request (image open, resize).
// And, for speed, also only where the conf file does not set them:
//   rbd_cache_writethrough_until_flush  false (Ceph: true)  librbd's cache acknowledges writes
//                         from the first one (see Completions), not only after the initiator's
//                         first flush: the LUN's caching mode page states the cache (WCE=1),
//                         initiators flush it, and with WCE=0 every write is FUA. That heuristic
//                         is for guests that may never flush; SCSI says when a write is durable.
//   objecter_inflight_ops, objecter_inflight_op_bytes  0, unbounded (Ceph: 1024, 100 MiB)
//                         librados makes this throttle blocking: a reactor would wait in it. What
//                         is in flight is bounded by the sessions' command windows instead, and
//                         what the cache has acknowledged by rbd_cache_max_dirty.
//   rbd_non_blocking_aio  false (Ceph: true)  librbd dispatches on the reactor that calls it,
//                         instead of queueing each call to its own thread: one thread switch less
//                         per I/O (4 KiB random reads at QD32: +8 points of rbd bench's figure).
//                         Only where nothing on that path can wait: not while either objecter
//                         throttle is set, nor with rbd_cache_block_writes_upfront (a conf that
//                         sets rbd_non_blocking_aio false with one of those is warned about).
//                         librbd's layers queue what they cannot do yet (the exclusive lock, a
//                         refresh, QoS, the cache's dirty limit) rather than wait for it.
//   librados_thread_count  1 (Ceph: 2), on a host of fewer than 4 cores  the completions' and
//                         librbd's thread: a second one competes with the reactors for the cores
//                         (on 2 cores: 37-47 us of the gateway's CPU per 4 KiB random read at
//                         QD32 against 50-60 us). Elsewhere Ceph's 2 stands.
//   rbd_cache  false (Ceph: true), for an image that other gateways export too (shared): the
//                         cache is in this gateway's memory, where the others cannot read the
//                         writes it acknowledged and has not sent (a conf that sets it true for
//                         such an image is warned about). Writes are then acknowledged once the
//                         OSDs have them, and every read comes from the OSDs.
// A value in the conf file wins, even one equal to Ceph's default (the file is read for it).
// At open (not read-only, the image with exclusive locking), an exclusive lock held by a client
// of this host with another nonce (this gateway before a crash) that does not answer a notify on
// the image's header within 2 s is broken (rbd_lock_break, which blocklists it); librbd would
// otherwise make the first write wait for the OSDs to time the dead client's watch out (30 s).
// A live holder, or one on another host, keeps the lock.
// and, always, rbd_skip_partial_discard = false: librbd otherwise ignores a discard that does not
// cover whole objects, and an unmapped block must read back as zeros (LBPRZ=1).
//
// Slots: a call made on slot i completes on reactor i's thread. Calls map to librbd as:
//   Read  -> rbd_aio_read;   Write -> rbd_aio_write, and for FUA then rbd_aio_flush;
//   Flush -> rbd_aio_flush;   Unmap -> rbd_aio_discard (thin provisioned; a partial object is
//   zeroed and stays allocated: the unmap granularity is the image's object size).
//   librbd's cache (rbd_cache, Ceph 16's default policy writearound) acknowledges a write before
//   the OSDs have it: that is the volatile write cache the caching mode page reports (WCE=1), and
//   FUA and SYNCHRONIZE CACHE flush it (LIBRADOS_OP_FLAG_FADVISE_FUA is only a hint to it).
//   The cache hands a failed write's error to the next flush that ends, once: with the cache on,
//   a flush (or a FUA write's flush) that fails for any reason completes with EIO, a write error,
//   never ETIMEDOUT or ESHUTDOWN that an initiator would retry or take to another path into GOOD.
//   WriteAtomic -> rbd_aio_write of a range inside one stripe unit: one request to one object,
//   which the OSD applies whole (atomic_limits: max and alignment the stripe unit; none with
//   rbd_cache_policy writeback, whose cache may write a range back in pieces).
//   CompareAndWrite -> rbd_aio_compare_and_write, atomic on the cluster against every client,
//   where librbd takes the range (Ceph 16: at most 512 bytes, inside one 512-byte sector: one block
//   of a 512-byte LUN). A longer range, and ReadModifyWrite (ORWRITE), run as a read-modify-write
//   of blocking librbd calls on a small pool behind the store's WriteGate: atomic against every
//   write of this process, not against other clients of the image.
//   GetProvisioning -> rbd_diff_iterate2 over the object map (whole objects) on that pool, where
//   the image has a valid object map with fast-diff; without one every block reads as mapped.
//   Grow -> rbd_resize (blocking; control-plane thread).
// Completions: librbd runs a completion's callback on one of its own threads. The callback takes
// the result, releases librbd's completion and posts the operation to the submitting reactor's
// CompletionInbox (an intrusive MPSC list and an eventfd), which runs the IoCompletion on that
// reactor. No librbd call made on a reactor waits for the cluster: rbd_aio_* dispatch and send.
// Allocation: each operation in flight lives in a per-slot record from a free list that grows, in
// chunks, only when a slot has more in flight than ever before (bounded by the sessions' command
// windows): nothing is allocated on our side per I/O. librbd allocates its own completion
// (rbd_aio_create_completion) and request objects for every call; that is inside librbd, and its
// C API offers no way around it.
// A cluster that goes away: nothing blocks a reactor; an I/O waits for the OSDs up to
// rados_osd_op_timeout and then completes with ETIMEDOUT (retryable NOT READY to the initiator;
// a flush with the cache on: EIO, above). A client the cluster blocklisted (another client broke
// its exclusive lock, or an operator) gets ESHUTDOWN for everything: the store is fenced (ready()),
// as is every store sharing that librados handle. Open, CreateImage and RemoveImage that meet
// ESHUTDOWN mark the handle fenced and try once more on a new one; a fenced handle is never handed
// out again.
//
// Several gateways (options.gateway_id not 0): any number of gateways may open one image. Which of
// them writes is librbd's exclusive lock (automatic: a live holder hands it over when another
// client's write asks); an image without the exclusive-lock feature is refused for writing
// (FAILED_PRECONDITION), since nothing would fence a former writer's late writes. A lock watch
// thread per store (an image with exclusive locking, opened for writing) looks every 500 ms:
// preferred() is false while another client holds the lock, true while this one does; that is the
// ALUA state the SCSI layer reports (active/optimized or active/non-optimized). A free lock is
// claimed (see LockWatch::Look). When this gateway's writes have made no progress for 2 s while
// another client holds the lock, that client is probed, and its lock broken when it does not answer
// (see BreakDeadLockOwner): the failover when the owning gateway dies, without waiting for the OSDs
// to time its watch out. What belongs to the logical unit rather than to one gateway (its
// persistent reservations) lives in a SharedObject next to the image (rbd_shared_object.h).
// Lifetime: the io_contexts must outlive the store, and the store must outlive every I/O started on
// it (the LUN that owns the store is kept alive by the tasks that use it). The destructor closes
// the image (rbd_close flushes and waits for librbd's requests in flight; with the cluster gone up
// to the OSD op timeout): on the calling thread, or on the pool when that is one of the store's
// reactors (the last task of a removed LUN). No exception escapes.
// Secrets: the keyring path is handed to librados and is never logged nor put into an error
// message; this code never reads the keyring.
// The implementation is split by job (conf, lock, image, I/O, offline): rbd_internal.h lists the
// files.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/shared_object.h"
#include "dataplane/backing/write_gate.h"
#include "dataplane/runtime/completion_inbox.h"

namespace iscsigw::backing {

struct RbdStoreOptions {
  std::string pool;
  std::string ns;  // RADOS namespace in the pool; empty: the default one
  std::string image;
  std::string conf;       // ceph.conf path; empty: librados' default search ($CEPH_CONF, /etc/ceph)
  std::string client_id;  // "admin", or "client.admin"; empty: admin
  std::string keyring;    // keyring path; empty: what the conf file says
  // Create the image (size_bytes long, the cluster's default features) when it does not exist.
  bool create = false;
  // Size of the LUN. 0: the image's size. An image smaller than size_bytes is an error.
  uint64_t size_bytes = 0;
  bool read_only = false;  // the image opened read-only; writes complete with EROFS
  // Not 0: this gateway's id among several that export the image (--gateway-id). librbd's cache
  // is off then (rbd_cache = false, where the conf file does not set it), since a write it
  // acknowledged and has not sent yet is invisible to the other gateways' reads, and the reads
  // it may cache miss their writes; and the lock watch runs (see "Several gateways").
  uint16_t gateway_id = 0;
  bool shared() const { return gateway_id != 0; }
};

class RbdStore final : public BackingStore {
 public:
  // Connects, opens (or creates) the image and takes the inbox of each io_context in `slots`
  // (index = slot). Errors name what failed: "rbd store rbd/vol1: connecting to the cluster of
  // /etc/ceph/ceph.conf (mon host [v2:10.0.0.1:3300]) as client.admin: Connection timed out"
  // (kUnavailable), "... pool nope does not exist" / "image ... does not exist" (kNotFound).
  static Result<std::unique_ptr<RbdStore>> Open(const RbdStoreOptions& options,
                                                const std::vector<boost::asio::io_context*>& slots);

  // Blocking, for the control plane: creates `options.image` (options.size_bytes long) unless it
  // exists; true when this call created it.
  static Result<bool> CreateImage(const RbdStoreOptions& options);
  // Blocking: removes `options.image` (gone already is success). While the image has watchers
  // (a store of it closing, or another client) it retries for up to busy_wait, then refuses
  // (kFailedPrecondition), as it does for an image with snapshots.
  static Status RemoveImage(const RbdStoreOptions& options, std::chrono::milliseconds busy_wait);

  // Blocking: a SharedObject `oid` in options.pool (and options.ns) of the cluster that options
  // name (conf, client id, keyring), created when missing and watched; it holds the librados
  // handle. For the configuration that gateways share (--shared-config). Destroy it off the
  // reactors: it talks to the cluster.
  static Result<std::shared_ptr<SharedObject>> OpenSharedObject(const RbdStoreOptions& options,
                                                                const std::string& oid);

  ~RbdStore() override;
  RbdStore(const RbdStore&) = delete;
  RbdStore& operator=(const RbdStore&) = delete;

  std::string_view kind() const override { return "rbd"; }
  uint64_t size_bytes() const override { return size_bytes_.load(std::memory_order_relaxed); }
  bool persistent() const override { return true; }
  // ESHUTDOWN once the cluster has blocklisted the store's client (a request failed with it):
  // fenced, every request fails from then on, and the SCSI layer answers NOT READY, MANUAL
  // INTERVENTION REQUIRED. The stores sharing the client are fenced with it; a store opened later
  // gets a client of its own.
  int ready() const override;
  std::string offline_reason() const override;
  // False while another client holds the image's exclusive lock (see "Several gateways").
  bool preferred() const override;
  bool read_only() const { return read_only_; }
  // "pool/image" or "pool/namespace/image", for messages.
  const std::string& name() const { return name_; }
  uint64_t object_size() const { return object_size_; }
  // The index in a compared range of the first differing byte, from librbd's mismatch offset.
  uint64_t MiscompareIndex(uint64_t mismatch, uint64_t offset, uint64_t len) const;
  // The object in RADOS that the gateways exporting this image share (shared_object.h), for the
  // LUN's persistent reservations; null unless options.gateway_id is set. Hold it weakly: this
  // store destroys it where it closes the image.
  std::shared_ptr<SharedObject> shared_object() const { return shared_object_; }
  // Whether GetProvisioning asks the object map (false: everything reads as mapped).
  bool provisioning_from_object_map() const { return use_object_map_; }

  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override;
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override;
  void Flush(unsigned slot, IoCompletion done) override;
  AtomicLimits atomic_limits() const override { return {atomic_unit_, atomic_unit_}; }
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   IoCompletion done) override;

  bool thin_provisioned() const override { return true; }
  uint64_t unmap_granularity() const override { return object_size_; }
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override;
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       IoCompletion done) override;
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override;
  void CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                       IoCompletion done) override;
  // rbd_resize when the image is smaller than new_size_bytes.
  int Grow(uint64_t new_size_bytes) override;

  // Operations of `slot` in flight now, and the records its free list holds (tests; read on that
  // slot's reactor).
  uint32_t in_flight(unsigned slot) const;
  uint32_t op_records(unsigned slot) const;
  // COMPARE AND WRITEs of `slot` that librbd compared on the cluster (tests).
  uint64_t native_compare_writes(unsigned slot) const;

 private:
  struct Op;
  struct Slot;
  struct Cluster;
  struct LockWatchWrites;
  struct LockWatch;
  RbdStore() = default;
  template <typename Attempt>
  static auto WithCluster(const RbdStoreOptions& o, const std::string& who, Attempt attempt)
      -> decltype(attempt(std::shared_ptr<Cluster>()));
  // Open's work once cluster_ is set: the pool, the image (created if asked), its properties.
  Status OpenImage(const RbdStoreOptions& o, const std::vector<runtime::CompletionInbox*>& inboxes,
                   const std::vector<boost::asio::io_context*>& slots, const std::string& who);
  Op* TakeOp(Slot& slot);
  void Submit(Op* op);
  void SubmitToPool(Op* op);
  void CountWrite(Op* op);  // for the lock watch, when there is one
  void RunOnPool(Op* op);
  static void Callback(void* completion, void* arg);
  static void Run(runtime::CompletionInbox::Item* item);
  void Finish(Op* op, int err);
  void NoteFenced();
  int FlushError(int err) const;  // a flush's error as the SCSI layer is to see it

  std::shared_ptr<Cluster> cluster_;
  void* ioctx_ = nullptr;  // rados_ioctx_t
  void* image_ = nullptr;  // rbd_image_t
  std::string name_;
  std::string client_;  // "client.admin", for messages
  std::atomic<uint64_t> size_bytes_{0};
  bool read_only_ = false;
  uint64_t object_size_ = 4 << 20;
  uint64_t atomic_unit_ = 0;  // bytes; 0: no atomic writes (see WriteAtomic)
  bool use_object_map_ = false;
  bool volatile_cache_ = false;                  // librbd's cache on for the image (rbd_cache)
  std::shared_ptr<LockWatch> lock_watch_;        // null: no exclusive lock, or read-only
  std::shared_ptr<SharedObject> shared_object_;  // null: not shared
  std::vector<std::unique_ptr<Slot>> slots_;     // slots_[i] used only on reactor i's thread
  WriteGate gate_;                               // any thread
};

// OfflineRbdStore: an rbd LUN whose image could not be opened when the daemon started (the cluster
// down, the pool or image missing). The LUN stays configured so that one unreachable cluster does
// not take the daemon and every other LUN down; until the image opens every I/O completes with
// ENOTCONN, and ready() says ENOTCONN, which the SCSI layer reports (TEST UNIT READY included) as
// NOT READY, LOGICAL UNIT IS IN PROCESS OF BECOMING READY (SPC-4 table 52, 04h/01h: the store is
// retrying).
// A thread of its own (never a reactor: RbdStore::Open blocks up to client_mount_timeout) retries
// RbdStore::Open with a backoff of 1 s doubling to 30 s, and logs each failure at warn when the
// reason changed or a minute has passed. When the image opens, and its size is a multiple of
// block_size, the store is published to the reactors (an atomic pointer; from then on every call
// goes straight to it) and `on_online(offline_size, size)` runs on that thread. An image other
// gateways export (options.shared()) has its shared object from the start, a
// DeferredSharedObject that the open store's object is attached to before the store is published.
// Until then size_bytes() is the configured size, or one block when the image's size is to be
// used; GetLun/ListLuns show that size, and offline_reason() says why.
// Lifetime: the destructor stops the retry and waits for an attempt in progress, except on one of
// the store's reactors (the last task of a removed LUN), where a thread still running finishes on
// its own and is joined once it has returned (by a later such destructor) or at shutdown
// (JoinRetiredRetries); the retired thread keeps nothing of the store alive.
class OfflineRbdStore final : public BackingStore {
 public:
  using OnOnline = std::function<void(uint64_t offline_size, uint64_t size)>;
  OfflineRbdStore(RbdStoreOptions options, std::vector<boost::asio::io_context*> slots,
                  uint32_t block_size, std::string first_error);
  ~OfflineRbdStore() override;
  OfflineRbdStore(const OfflineRbdStore&) = delete;
  OfflineRbdStore& operator=(const OfflineRbdStore&) = delete;

  // Starts the retry; call once, after on_online's target exists. Backoff overrides for tests.
  void Start(OnOnline on_online, std::chrono::milliseconds first_retry = std::chrono::seconds(1),
             std::chrono::milliseconds max_retry = std::chrono::seconds(30));
  bool online() const { return Live() != nullptr; }
  // options.shared(): the image's shared object, attached once the image opens; else null.
  std::shared_ptr<SharedObject> shared_object() const;
  // Why the image is not open (empty once it is). Any thread.
  std::string offline_reason() const override;
  // Joins the retry threads of stores destroyed on a reactor (each returns within one connect
  // attempt once stopped); their count. For shutdown, once the reactors have stopped.
  static size_t JoinRetiredRetries();

  std::string_view kind() const override { return "rbd"; }
  uint64_t size_bytes() const override;
  bool persistent() const override { return true; }
  int ready() const override;       // ENOTCONN until the image opens; then the open store's
  bool preferred() const override;  // true until the image opens; then the open store's
  bool thin_provisioned() const override { return true; }
  uint64_t unmap_granularity() const override;
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override;
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override;
  void Flush(unsigned slot, IoCompletion done) override;
  // None until the image opens (a WRITE ATOMIC meanwhile is answered NOT READY like any I/O).
  AtomicLimits atomic_limits() const override;
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   IoCompletion done) override;
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override;
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       IoCompletion done) override;
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override;
  void CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                       IoCompletion done) override;
  int Grow(uint64_t new_size_bytes) override;

 private:
  struct State;
  static void RetireRetry(std::thread thread, const std::shared_ptr<State>& state);
  RbdStore* Live() const;         // the open store, or null; any thread
  std::shared_ptr<State> state_;  // shared with the retry thread, which may outlive this
  std::vector<boost::asio::io_context*> slots_;
  std::thread thread_;  // the retry; joined by the destructor, or retired (RetireRetry)
};

}  // namespace iscsigw::backing
