#include "dataplane/backing/rbd/rbd_store.h"

#include <rados/librados.h>
#include <rbd/features.h>
#include <rbd/librbd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "base/log.h"
#include "base/pending_steps.h"
#include "dataplane/backing/deferred_shared_object.h"
#include "dataplane/backing/op_pool.h"
#include "dataplane/backing/rbd/rbd_shared_object.h"
#include "dataplane/runtime/cpus.h"

namespace iscsigw::backing {
namespace {

namespace asio = boost::asio;

// Read-modify-writes, writes that wait behind one, and object map queries block a thread of this
// pool (shared by every rbd store), never a reactor.
asio::thread_pool& RbdPool() {
  static asio::thread_pool pool(2);
  return pool;
}

// GetProvisioning looks at no more than this many bytes per call (4096 objects of 4 MiB).
constexpr uint64_t kMaxProvisioningWalk = uint64_t{16} << 30;
// librbd's compare-and-write (Ceph 16) takes a range inside one 512-byte sector only.
constexpr uint64_t kNativeCompareSector = 512;

// The options set where the conf file leaves Ceph's default (see rbd_store.h).
struct Default {
  const char* option;
  const char* ceph_default;
  const char* ours;
};
constexpr Default kDefaults[] = {
    {"client_mount_timeout", "300", "15"},
    {"rados_osd_op_timeout", "0", "30"},
    {"rados_mon_op_timeout", "0", "30"},
    {"rbd_cache_writethrough_until_flush", "true", "false"},
    // Unbounded: librados makes the objecter's throttle blocking, and with inline dispatch it
    // would block a reactor. The sessions' command windows bound what is in flight instead.
    {"objecter_inflight_ops", "1024", "0"},
    {"objecter_inflight_op_bytes", "104857600", "0"},
};

// Only on a host of fewer than kFewCores cores (rbd_store.h says why and what it was measured at).
constexpr Default kFewCoresThreads = {"librados_thread_count", "2", "1"};
// For an image that other gateways export too (RbdStoreOptions::shared).
constexpr Default kSharedNoCache = {"rbd_cache", "true", "false"};
constexpr unsigned kFewCores = 4;

std::string ConfGet(rados_t h, const char* option) {
  char buf[512] = {};
  if (rados_conf_get(h, option, buf, sizeof(buf)) != 0) return {};
  return buf;
}

// Why librbd called with rbd_non_blocking_aio = false (on the calling thread, a reactor) could
// wait there; empty when nothing on that path waits. librbd's dispatch layers queue what they
// cannot do yet (exclusive lock, refresh, QoS, the write-around cache's dirty limit) instead of
// waiting; what remains is the objecter's throttle, which librados makes blocking, and a
// writeback cache told to block writes up front.
std::string InlineDispatchWaits(rados_t h) {
  for (const char* option : {"objecter_inflight_ops", "objecter_inflight_op_bytes"}) {
    if (const std::string v = ConfGet(h, option); v != "0") return std::string(option) + " " + v;
  }
  if (ConfGet(h, "rbd_cache_block_writes_upfront") == "true") {
    return "rbd_cache_block_writes_upfront true";
  }
  return {};
}

// An option as librbd applies it to one image: the image's conf_<option> metadata overrides the
// handle's value.
std::string ImageConfGet(rados_t h, rbd_image_t image, const char* option) {
  char value[64] = {};
  size_t len = sizeof(value) - 1;
  const std::string key = std::string("conf_") + option;
  if (rbd_metadata_get(image, key.c_str(), value, &len) == 0) return std::string(value);
  return ConfGet(h, option);
}

// What librbd sends to the cluster as one request to one object, which the OSD applies whole: a
// stripe unit (the object size unless the image uses fancy striping), provided writes reach the
// cluster as they were made. Ceph 16's default cache policy (writearound) sends each write on at
// once; with rbd_cache_policy writeback (in the conf, or the image's conf_rbd_cache_policy
// metadata) librbd's ObjectCacher may write a range back in pieces, so there is no atomic unit: 0.
uint64_t AtomicUnit(rados_t h, rbd_image_t image) {
  uint64_t unit = 0;
  if (rbd_get_stripe_unit(image, &unit) < 0 || unit == 0 || (unit & (unit - 1)) != 0) return 0;
  if (ImageConfGet(h, image, "rbd_cache_policy") == "writeback" &&
      ImageConfGet(h, image, "rbd_cache") != "false") {
    return 0;
  }
  return unit;
}

// The options the conf files set for client.<id> ([global], [client] or [client.<id>]), each in
// the underscore spelling (Ceph 16 also accepts spaces, not dashes). `paths` is what
// rados_conf_read_file takes: one path or several, comma-separated. A value equal to Ceph's
// default cannot be told from no value through librados, so the files themselves are read.
std::set<std::string> ConfFileOptions(const std::string& paths, const std::string& id) {
  auto trim = [](const std::string& s) {
    const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  // As Ceph normalizes a key: a run of blanks inside it is one '_'; case matters.
  auto normal = [&](const std::string& s) {
    std::string n;
    for (char ch : trim(s)) {
      if (ch != ' ' && ch != '\t') {
        n += ch;
      } else if (n.back() != '_') {
        n += '_';
      }
    }
    return n;
  };
  std::set<std::string> out;
  std::istringstream list(paths);
  for (std::string path; std::getline(list, path, ',');) {
    std::ifstream in(trim(path));
    bool applies = true;  // lines before any section header are global
    for (std::string line; std::getline(in, line);) {
      const std::string l = trim(line.substr(0, line.find_first_of("#;")));
      if (!l.empty() && l.front() == '[') {
        const std::string section = normal(l.substr(1, l.find(']') - 1));
        applies = section == "global" || section == "client" || section == "client." + id;
      } else if (const auto eq = l.find('='); applies && eq != std::string::npos) {
        out.insert(normal(l.substr(0, eq)));
      }
    }
  }
  return out;
}

bool IsCephDefault(const std::string& value, const char* ceph_default) {
  if (value == ceph_default) return true;
  // Durations read back as seconds with a fraction ("300.000000") in some versions.
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  return end != value.c_str() && *end == '\0' && v == std::strtod(ceph_default, nullptr);
}

// "v2:127.0.0.1:0/3842310957" (or inside "[...]", or a list of them): the host part of the first
// address, and the nonce after '/'.
struct EntityAddr {
  std::string host;
  std::string nonce;
};
EntityAddr ParseAddr(std::string a) {
  if (!a.empty() && a.front() == '[') a = a.substr(1, a.find_first_of(",]") - 1);
  if (auto colon = a.find(':'); a.rfind("v", 0) == 0 && colon != std::string::npos) {
    a = a.substr(colon + 1);  // "v2:" / "v1:" / "any:"
  }
  EntityAddr out;
  const auto slash = a.rfind('/');
  out.nonce = slash == std::string::npos ? "" : a.substr(slash + 1);
  a = a.substr(0, slash);
  out.host = a.substr(0, a.rfind(':'));
  return out;
}

// How long a holder of the exclusive lock that is suspected dead has to answer a notify on the
// image's header before its lock is broken.
constexpr uint64_t kLockProbeTimeoutMs = 2000;

// The exclusive lock of an image whose last writer died (kill -9, a node crash) stays with that
// writer's client until the OSDs time its watch out (osd_client_watch_timeout, 30 s), and
// librbd's writes wait that long to acquire it. Two cases do not wait:
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

// Whether client `gid` acknowledges a notify on `header` within kLockProbeTimeoutMs. The payload
// is empty: librbd takes it for the legacy "header updated" notify (each client of the image
// refreshes it) and acknowledges it. No answer at all from the OSD counts as alive.
bool OwnerAnswers(rados_ioctx_t io, const std::string& header, uint64_t gid) {
  char* reply = nullptr;
  size_t reply_len = 0;
  (void)rados_notify2(io, header.c_str(), "", 0, kLockProbeTimeoutMs, &reply, &reply_len);
  if (reply == nullptr) return true;
  bool alive = false;
  notify_ack_t* acks = nullptr;
  notify_timeout_t* timeouts = nullptr;
  size_t nacks = 0, ntimeouts = 0;
  if (rados_decode_notify_response(reply, reply_len, &acks, &nacks, &timeouts, &ntimeouts) == 0) {
    for (size_t i = 0; i < nacks; ++i) alive |= acks[i].notifier_id == gid;
    rados_free_notify_response(acks, nacks, timeouts);
  } else {
    alive = true;
  }
  rados_buffer_free(reply);
  return alive;
}
// Blocklists client `gid`, a gateway of the image that did not acknowledge a change of the shared
// reservations (SharedObject::Silent::kFence): every gateway of the image watches its header
// through the librados handle its shared object uses, so the header's watchers give the client's
// address. 0 or -errno (-ENOENT: it watches the header no more).
int BlocklistWatcher(rados_t cluster, rbd_image_t image, uint64_t gid) {
  std::vector<rbd_image_watcher_t> watchers(64);
  size_t n = watchers.size();
  if (int r = rbd_watchers_list(image, watchers.data(), &n); r < 0) return r;
  int result = -ENOENT;
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<uint64_t>(watchers[i].id) == gid) {
      result = rados_blocklist_add(cluster, watchers[i].addr, 0);
      break;
    }
  }
  rbd_watchers_list_cleanup(watchers.data(), n);
  return result;
}

// True when it broke a lock.
bool BreakDeadLockOwner(rados_t cluster, rados_ioctx_t io, rbd_image_t image, BreakIf when,
                        const std::string& who) {
  rbd_lock_mode_t mode;
  char* owners[4] = {};
  size_t n = 4;
  if (int r = rbd_lock_get_owners(image, &mode, owners, &n); r < 0 || n == 0) {
    log::Backing().debug("{}lock owners: {}", who, r < 0 ? ErrnoText(-r) : "none");
    return false;  // unlocked: -ENOENT
  }
  const std::string owner = owners[0];
  rbd_lock_get_owners_cleanup(owners, n);
  if (mode != RBD_LOCK_MODE_EXCLUSIVE || n != 1) return false;
  char* ours_buf = nullptr;
  if (rados_getaddrs(cluster, &ours_buf) < 0 || ours_buf == nullptr) return false;
  const EntityAddr ours = ParseAddr(ours_buf);
  rados_buffer_free(ours_buf);
  const EntityAddr theirs = ParseAddr(owner);
  if (theirs.host == ours.host && theirs.nonce == ours.nonce) return false;  // this gateway
  if (when == BreakIf::kRestarted && theirs.host != ours.host) return false;

  // The owner's global id, from the lockers of the header object: librbd's managed lock is the
  // object lock "rbd_lock". Read from the OSD (rbd_list_lockers answers from what the image
  // handle saw at its last refresh, which a lock taken since does not cause).
  char id[64] = {};
  if (rbd_get_id(image, id, sizeof(id)) < 0) return false;
  const std::string header = std::string("rbd_header.") + id;
  char tag[256], clients[1024], cookies[1024], addrs[1024];
  size_t tag_len = sizeof(tag), clients_len = sizeof(clients), cookies_len = sizeof(cookies),
         addrs_len = sizeof(addrs);
  int exclusive = 0;
  const ssize_t lockers =
      rados_list_lockers(io, header.c_str(), "rbd_lock", &exclusive, tag, &tag_len, clients,
                         &clients_len, cookies, &cookies_len, addrs, &addrs_len);
  uint64_t gid = 0;
  for (ssize_t i = 0, c = 0, a = 0; i < lockers; ++i) {
    const std::string client(clients + c), addr(addrs + a);
    c += static_cast<ssize_t>(client.size()) + 1;
    a += static_cast<ssize_t>(addr.size()) + 1;
    const EntityAddr at = ParseAddr(addr);  // "v1:host:port/nonce" here
    if (at.host == theirs.host && at.nonce == theirs.nonce && client.rfind("client.", 0) == 0) {
      gid = std::strtoull(client.c_str() + 7, nullptr, 10);
    }
  }
  if (gid == 0) {
    log::Backing().debug("{}no locker at {} among {} ({} {})", who, owner, lockers,
                         lockers > 0 ? clients : "", lockers > 0 ? addrs : "");
    return false;
  }
  // Two notifies, each of kLockProbeTimeoutMs: one missed answer (an owner re-registering its
  // watch, or slow) does not get a live owner blocklisted.
  for (int probe = 0; probe < 2; ++probe) {
    if (OwnerAnswers(io, header, gid)) {
      log::Backing().debug("{}client.{} ({}) answered: it keeps the exclusive lock", who, gid,
                           owner);
      return false;
    }
  }
  const int r = rbd_lock_break(image, RBD_LOCK_MODE_EXCLUSIVE, owner.c_str());
  if (r < 0) {
    log::Backing().warn("{}exclusive lock of dead client.{} ({}): break: {}", who, gid, owner,
                        ErrnoText(-r));
    return false;
  }
  log::Backing().warn("{}broke the exclusive lock of client.{} ({}): {}, no answer within {} ms",
                      who, gid, owner,
                      when == BreakIf::kRestarted ? "same host as this gateway, another instance"
                                                  : "this gateway's writes waited for it",
                      2 * kLockProbeTimeoutMs);
  return true;
}

}  // namespace

// A librados handle shared by every store with the same conf, client id and keyring.
struct RbdStore::Cluster {
  rados_t handle = nullptr;
  // The cluster blocklisted this client (an exclusive lock of it was broken): every request of
  // the handle fails with ESHUTDOWN from now on, so no store opened later may share it.
  std::atomic<bool> fenced{false};
  ~Cluster() {
    if (handle != nullptr) rados_shutdown(handle);
  }

  static Result<std::shared_ptr<Cluster>> Get(const RbdStoreOptions& o, const std::string& who) {
    // One entry per conf, client id and keyring. Its lock is held while connecting, so that two
    // stores of one cluster do not both connect; a cluster that does not answer (up to
    // client_mount_timeout) delays only the opens of that cluster.
    struct Entry {
      std::mutex mu;
      std::weak_ptr<Cluster> cluster;  // guarded by mu
    };
    static std::mutex map_mu;
    static std::map<std::string, std::shared_ptr<Entry>> entries;  // guarded by map_mu
    const std::string key = o.conf + '\0' + o.client_id + '\0' + o.keyring +
                            (o.shared() ? std::string("\0shared", 7) : "");
    std::shared_ptr<Entry> entry;
    {
      std::lock_guard<std::mutex> lock(map_mu);
      auto& e = entries[key];
      if (e == nullptr) e = std::make_shared<Entry>();
      entry = e;
    }
    std::lock_guard<std::mutex> lock(entry->mu);
    if (auto c = entry->cluster.lock(); c != nullptr && !c->fenced.load()) return c;
    auto c = std::make_shared<Cluster>();
    const std::string conf_name = o.conf.empty() ? "the default ceph.conf" : o.conf;
    std::string id = o.client_id.empty() ? "admin" : o.client_id;
    if (id.rfind("client.", 0) == 0) id = id.substr(7);
    if (int r = rados_create(&c->handle, id.c_str()); r < 0) {
      c->handle = nullptr;
      return Internal(who + "rados_create for client." + id + ": " + ErrnoText(-r));
    }
    if (int r = rados_conf_read_file(c->handle, o.conf.empty() ? nullptr : o.conf.c_str()); r < 0) {
      return InvalidArgument(who + "ceph conf " + conf_name + ": " + ErrnoText(-r));
    }
    if (!o.keyring.empty()) {
      if (int r = rados_conf_set(c->handle, "keyring", o.keyring.c_str()); r < 0) {
        return InvalidArgument(who + "keyring: " + ErrnoText(-r));  // the path is not repeated
      }
    }
    // The files read: the named ones, or the default one ($CEPH_CONF, else /etc/ceph/ceph.conf).
    std::string conf_paths = o.conf;
    if (conf_paths.empty()) {
      const char* env = std::getenv("CEPH_CONF");
      conf_paths = env != nullptr && *env != '\0' ? env : "/etc/ceph/ceph.conf";
    }
    const std::set<std::string> named = ConfFileOptions(conf_paths, id);
    const auto set_default = [&](const Default& d) {
      if (named.count(d.option) == 0 &&
          IsCephDefault(ConfGet(c->handle, d.option), d.ceph_default)) {
        (void)rados_conf_set(c->handle, d.option, d.ours);
      }
    };
    for (const Default& d : kDefaults) set_default(d);
    if (runtime::UsableCpus() < kFewCores) set_default(kFewCoresThreads);
    if (o.shared()) {
      set_default(kSharedNoCache);
      if (ConfGet(c->handle, "rbd_cache") == "true") {
        log::Backing().warn(
            "{}ceph conf {}: rbd_cache true on an image other gateways export: a write it "
            "acknowledged is not seen through another gateway until it is flushed",
            who, conf_name);
      }
    }
    // librbd's calls run on the reactor that makes them (no thread switch per I/O), where they
    // cannot wait; otherwise, or where the conf file says so, librbd queues them to its thread.
    const std::string waits = InlineDispatchWaits(c->handle);
    if (named.count("rbd_non_blocking_aio") == 0 && waits.empty()) {
      (void)rados_conf_set(c->handle, "rbd_non_blocking_aio", "false");
    } else if (ConfGet(c->handle, "rbd_non_blocking_aio") == "false" && !waits.empty()) {
      log::Backing().warn(
          "{}ceph conf {}: rbd_non_blocking_aio false with {}: librbd may block a reactor", who,
          conf_name, waits);
    }
    // An unmapped block must read as zeros (LBPRZ=1): no discard may be skipped.
    (void)rados_conf_set(c->handle, "rbd_skip_partial_discard", "false");
    if (int r = rados_connect(c->handle); r < 0) {
      const std::string mons = ConfGet(c->handle, "mon_host");
      return Status(
          StatusCode::kUnavailable,
          who + "connecting to the Ceph cluster of " + conf_name +
              (mons.empty() ? std::string(" (no mon host set)") : " (mon host " + mons + ")") +
              " as client." + id + " within client_mount_timeout " +
              ConfGet(c->handle, "client_mount_timeout") + " s: " + ErrnoText(-r));
    }
    entry->cluster = c;
    return c;
  }
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
  Slot(unsigned index, asio::io_context& ioc, runtime::CompletionInbox& inbox)
      : index(index), ioc(&ioc), inbox(&inbox) {}
  unsigned index;
  asio::io_context* ioc;
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

// How often the lock watch looks, and how long writes may make no progress while another client
// holds the exclusive lock before that client is probed (BreakDeadLockOwner).
constexpr std::chrono::milliseconds kLockWatchPeriod{500};
constexpr std::chrono::milliseconds kStuckWrites{2000};
// The image metadata key a gateway sets to claim a free lock (LockWatch::Look); its value is the
// gateway's id, for operators (`rbd image-meta get`).
constexpr char kHolderKey[] = "iscsigw.holder";

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
  bool Look(rbd_image_t image, int* mine) {
    if (rbd_is_exclusive_lock_owner(image, mine) < 0) return false;
    if (*mine != 0) {
      preferred.store(true, std::memory_order_relaxed);
      return true;
    }
    rbd_lock_mode_t mode;
    char* owners[4] = {};
    size_t n = 4;
    int r = rbd_lock_get_owners(image, &mode, owners, &n);
    if (r == 0) rbd_lock_get_owners_cleanup(owners, n);
    if (r == -ENOENT || (r == 0 && n == 0)) {
      (void)rbd_metadata_set(image, kHolderKey, holder_tag.c_str());
      if (rbd_is_exclusive_lock_owner(image, mine) < 0) return false;
      preferred.store(true, std::memory_order_relaxed);  // it, or nobody yet: no change
      return true;
    }
    // Another error (the cluster away, this client blocklisted) leaves the state as it was.
    if (r == 0) preferred.store(false, std::memory_order_relaxed);
    return r == 0;
  }

  void Run(rados_t cluster, rados_ioctx_t io, rbd_image_t image, const std::string& who) {
    uint64_t last_done = 0;
    auto progress = std::chrono::steady_clock::now();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        if (cv.wait_for(lock, kLockWatchPeriod, [this] { return stop; })) return;
      }
      int mine = 0;
      if (!Look(image, &mine)) continue;
      // `done` first, with acquire: each slot's `started` read after it is at least as large.
      uint64_t done = 0, started = 0;
      for (size_t i = 0; i < slots; ++i) done += writes[i].done.load(std::memory_order_acquire);
      for (size_t i = 0; i < slots; ++i) {
        started += writes[i].started.load(std::memory_order_relaxed);
      }
      const auto now = std::chrono::steady_clock::now();
      if (mine != 0 || started == done || done != last_done) {
        last_done = done;
        progress = now;
      } else if (now - progress >= kStuckWrites) {
        log::Backing().debug("{}{} write(s) waiting {} ms for the exclusive lock", who,
                             started - done, kStuckWrites.count());
        (void)BreakDeadLockOwner(cluster, io, image, BreakIf::kWritesWaiting, who);
        progress = now;
      }
    }
  }
};

namespace {

// The I/O context of o's pool (and namespace) on `cluster`.
Result<rados_ioctx_t> OpenPool(rados_t cluster, const RbdStoreOptions& o, const std::string& who) {
  rados_ioctx_t io = nullptr;
  if (int r = rados_ioctx_create(cluster, o.pool.c_str(), &io); r < 0) {
    if (r == -ENOENT) return NotFound(who + "pool " + o.pool + " does not exist");
    return Status(StatusCode::kUnavailable, who + "pool " + o.pool + ": " + ErrnoText(-r));
  }
  if (!o.ns.empty()) rados_ioctx_set_namespace(io, o.ns.c_str());
  return io;
}

// Creates o.image, o.size_bytes long, with the cluster's default features: true when this call
// created it, false when it was there already.
// A call that failed with ESHUTDOWN sets `fenced`: the cluster blocklisted the client.
Result<bool> CreateIn(rados_ioctx_t io, const RbdStoreOptions& o, const std::string& who,
                      std::atomic<bool>& fenced) {
  if (o.size_bytes == 0) return InvalidArgument(who + "size_bytes must be set to create it");
  rbd_image_options_t opts;
  rbd_image_options_create(&opts);
  const int c = rbd_create4(io, o.image.c_str(), o.size_bytes, opts);
  rbd_image_options_destroy(opts);
  if (c == -ESHUTDOWN) fenced.store(true);
  if (c == -EEXIST) return false;
  if (c < 0) {
    return Status(
        c == -ENOSPC || c == -EDQUOT ? StatusCode::kResourceExhausted : StatusCode::kIoError,
        who + "create " + std::to_string(o.size_bytes) + " bytes: " + ErrnoText(-c));
  }
  log::Backing().info("{}created, {} bytes", who, o.size_bytes);
  return true;
}

std::string NameOf(const RbdStoreOptions& o) {
  return o.pool + "/" + (o.ns.empty() ? "" : o.ns + "/") + o.image;
}

}  // namespace

// Runs `attempt` with the cluster's connection, and once more with a new one when the first was
// blocklisted (fenced): every request of a blocklisted client fails, so an idle gateway learns of
// it only here.
template <typename Attempt>
auto RbdStore::WithCluster(const RbdStoreOptions& o, const std::string& who, Attempt attempt)
    -> decltype(attempt(std::shared_ptr<Cluster>())) {
  for (int tries = 0;; ++tries) {
    auto cluster = Cluster::Get(o, who);
    if (!cluster.ok()) return cluster.status();
    std::shared_ptr<Cluster> c = std::move(cluster).value();
    auto r = attempt(c);
    if (r.ok() || tries > 0 || !c->fenced.load()) return r;
    log::Backing().warn("{}this gateway's client was blocklisted; connecting again", who);
  }
}

Result<bool> RbdStore::CreateImage(const RbdStoreOptions& o) {
  const std::string who = "rbd store " + NameOf(o) + ": ";
  if (o.pool.empty() || o.image.empty()) return InvalidArgument(who + "pool or image is empty");
  return WithCluster(o, who, [&](const std::shared_ptr<Cluster>& c) -> Result<bool> {
    auto pool = OpenPool(c->handle, o, who);
    if (!pool.ok()) return pool.status();
    auto made = CreateIn(pool.value(), o, who, c->fenced);
    rados_ioctx_destroy(pool.value());
    return made;
  });
}

Status RbdStore::RemoveImage(const RbdStoreOptions& o, std::chrono::milliseconds busy_wait) {
  const std::string who = "rbd store " + NameOf(o) + ": ";
  if (o.pool.empty() || o.image.empty()) return InvalidArgument(who + "pool or image is empty");
  const auto deadline = std::chrono::steady_clock::now() + busy_wait;
  return WithCluster(o, who, [&](const std::shared_ptr<Cluster>& c) -> Status {
    auto pool = OpenPool(c->handle, o, who);
    if (!pool.ok()) return pool.status();
    rados_ioctx_t io = pool.value();
    int r = 0;
    // EBUSY: the image still has a watcher, which is a store of this gateway that is closing
    // (commands in flight end first) or another client that has it open.
    while ((r = rbd_remove(io, o.image.c_str())) == -EBUSY &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    rados_ioctx_destroy(io);
    if (r == 0 || r == -ENOENT) {
      if (r == 0) log::Backing().info("{}removed", who);
      return Status::Ok();
    }
    if (r == -ESHUTDOWN) c->fenced.store(true);
    if (r == -EBUSY) {
      return Status(StatusCode::kFailedPrecondition,
                    who + "not removed: another client has the image open (it has watchers)");
    }
    if (r == -ENOTEMPTY) {
      return Status(StatusCode::kFailedPrecondition, who + "not removed: the image has snapshots");
    }
    return Status(StatusCode::kIoError, who + "rbd_remove: " + ErrnoText(-r));
  });
}

Result<std::shared_ptr<SharedObject>> RbdStore::OpenSharedObject(const RbdStoreOptions& o,
                                                                 const std::string& oid) {
  const std::string who =
      "shared object " + o.pool + "/" + (o.ns.empty() ? "" : o.ns + "/") + oid + ": ";
  if (o.pool.empty() || oid.empty()) return InvalidArgument(who + "pool or object is empty");
  return WithCluster(
      o, who, [&](const std::shared_ptr<Cluster>& c) -> Result<std::shared_ptr<SharedObject>> {
        auto pool = OpenPool(c->handle, o, who);
        if (!pool.ok()) return pool.status();
        auto obj = RbdSharedObject::Open(c, c->handle, pool.value(), oid, who);
        rados_ioctx_destroy(pool.value());
        if (!obj.ok()) return obj.status();
        return std::shared_ptr<SharedObject>(std::move(obj).value());
      });
}

Result<std::unique_ptr<RbdStore>> RbdStore::Open(
    const RbdStoreOptions& o, const std::vector<boost::asio::io_context*>& slots) {
  std::string name = NameOf(o);
  const std::string who = "rbd store " + name + ": ";
  if (o.pool.empty()) return InvalidArgument("rbd store: pool is empty");
  if (o.image.empty()) return InvalidArgument("rbd store: image is empty");
  if (slots.empty()) return InvalidArgument(who + "no reactor io_context given");
  std::vector<runtime::CompletionInbox*> inboxes;
  for (auto* ioc : slots) {
    if (ioc == nullptr) return InvalidArgument(who + "null io_context");
    runtime::CompletionInbox& inbox = runtime::CompletionInbox::For(*ioc);
    if (!inbox.error().empty()) return Internal(who + inbox.error());
    inboxes.push_back(&inbox);
  }

  return WithCluster(
      o, who, [&](const std::shared_ptr<Cluster>& c) -> Result<std::unique_ptr<RbdStore>> {
        std::unique_ptr<RbdStore> store(new RbdStore());
        store->name_ = name;
        store->client_ = o.client_id.empty()                    ? std::string("client.admin")
                         : o.client_id.rfind("client.", 0) == 0 ? o.client_id
                                                                : "client." + o.client_id;
        store->read_only_ = o.read_only;
        store->cluster_ = c;
        if (Status s = store->OpenImage(o, inboxes, slots, who); !s.ok()) return s;
        return store;
      });
}

Status RbdStore::OpenImage(const RbdStoreOptions& o,
                           const std::vector<runtime::CompletionInbox*>& inboxes,
                           const std::vector<boost::asio::io_context*>& slots,
                           const std::string& who) {
  RbdStore* store = this;
  auto pool = OpenPool(store->cluster_->handle, o, who);
  if (!pool.ok()) return pool.status();
  rados_ioctx_t io = pool.value();
  store->ioctx_ = io;

  rbd_image_t image = nullptr;
  int r = o.read_only ? rbd_open_read_only(io, o.image.c_str(), &image, nullptr)
                      : rbd_open(io, o.image.c_str(), &image, nullptr);
  if (r == -ENOENT && o.create && !o.read_only) {
    if (auto made = CreateIn(io, o, who, cluster_->fenced); !made.ok()) return made.status();
    r = rbd_open(io, o.image.c_str(), &image, nullptr);
  }
  if (r == -ESHUTDOWN) cluster_->fenced.store(true);
  if (r == -ENOENT) {
    return NotFound(who + "image " + o.image + " does not exist in pool " + o.pool +
                    (o.ns.empty() ? "" : " namespace " + o.ns) +
                    (o.create ? "" : " (set rbd.create and size_bytes to create it)"));
  }
  if (r < 0) {
    return Status(r == -ETIMEDOUT ? StatusCode::kUnavailable : StatusCode::kIoError,
                  who + "rbd_open: " + ErrnoText(-r));
  }
  store->image_ = image;

  rbd_image_info_t info{};
  if (int s = rbd_stat(image, &info, sizeof(info)); s < 0) {
    return Status(StatusCode::kIoError, who + "rbd_stat: " + ErrnoText(-s));
  }
  if (info.obj_size > 0 && (info.obj_size & (info.obj_size - 1)) == 0) {
    store->object_size_ = info.obj_size;
  }
  store->atomic_unit_ = AtomicUnit(store->cluster_->handle, image);
  store->volatile_cache_ = ImageConfGet(store->cluster_->handle, image, "rbd_cache") == "true";
  uint64_t size = o.size_bytes == 0 ? info.size : o.size_bytes;
  if (size == 0) return InvalidArgument(who + "the image is 0 bytes");
  if (info.size < size) {
    return InvalidArgument(who + "the image is " + std::to_string(info.size) +
                           " bytes, smaller than size_bytes " + std::to_string(size));
  }
  store->size_bytes_.store(size, std::memory_order_relaxed);
  uint64_t features = 0;
  const int got_features = rbd_get_features(image, &features);
  if (!o.read_only && o.shared() &&
      (got_features < 0 || (features & RBD_FEATURE_EXCLUSIVE_LOCK) == 0)) {
    // Several gateways write it: its exclusive lock is what fences a former writer (its lock
    // broken, its client blocklisted) so that none of its late writes land.
    const std::string spec = o.pool + "/" + (o.ns.empty() ? "" : o.ns + "/") + o.image;
    return FailedPrecondition(who + "image " + spec +
                              " lacks the exclusive-lock feature, which an image several "
                              "gateways write needs (rbd feature enable " +
                              spec + " exclusive-lock)");
  }
  if (got_features == 0) {
    store->use_object_map_ =
        (features & RBD_FEATURE_OBJECT_MAP) != 0 && (features & RBD_FEATURE_FAST_DIFF) != 0;
    if (!o.read_only && (features & RBD_FEATURE_EXCLUSIVE_LOCK) != 0) {
      BreakDeadLockOwner(store->cluster_->handle, io, image, BreakIf::kRestarted, who);
    }
    if (!o.read_only && o.shared() && (features & RBD_FEATURE_EXCLUSIVE_LOCK) != 0) {
      lock_watch_ = std::make_shared<LockWatch>();
      lock_watch_->holder_tag = std::to_string(o.gateway_id);
      lock_watch_->slots = slots.size();
      lock_watch_->writes = std::make_unique<LockWatchWrites[]>(slots.size());
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    store->slots_.push_back(
        std::make_unique<Slot>(static_cast<unsigned>(i), *slots[i], *inboxes[i]));
    if (lock_watch_ != nullptr) store->slots_.back()->writes = &lock_watch_->writes[i];
  }
  if (o.shared()) {
    char id[64] = {};
    if (int g = rbd_get_id(image, id, sizeof(id)); g < 0) {
      return Status(StatusCode::kIoError, who + "rbd_get_id: " + ErrnoText(-g));
    }
    auto obj = RbdSharedObject::Open(cluster_, cluster_->handle, io,
                                     std::string("iscsigw_lun.") + id, who);
    if (!obj.ok()) return obj.status();
    obj.value()->SetFence([cluster = cluster_->handle, image](uint64_t gid) {
      return BlocklistWatcher(cluster, image, gid);
    });
    // Among the gateways that must answer a change from now on (watching already).
    if (int r = obj.value()->JoinMembers(); r < 0) {
      obj.value()->SetFence(nullptr);
      return Status(StatusCode::kIoError,
                    who + "joining the gateways of " + obj.value()->oid() + ": " + ErrnoText(-r));
    }
    shared_object_ = std::move(obj).value();
  }
  if (lock_watch_ != nullptr) {
    int mine = 0;
    (void)lock_watch_->Look(image, &mine);  // the state the LUN starts with
    lock_watch_->thread = std::thread([w = lock_watch_.get(), c = cluster_->handle, io, image,
                                       who] { w->Run(c, io, image, who); });
  }
  return Status::Ok();
}

RbdStore::~RbdStore() {
  // rbd_close flushes librbd's cache and waits for its requests in flight: it talks to the
  // cluster. The last task of a LUN that was removed may release the store on a reactor; there
  // the close goes to the pool (holding the librados handle), so that the reactor does not wait.
  auto close = [image = image_, ioctx = ioctx_, cluster = cluster_, watch = lock_watch_,
                shared = std::move(shared_object_), name = name_]() mutable {
    const PendingStep step("closing rbd image " + name + " (its Ceph cluster)");
    if (watch != nullptr) watch->Stop();  // before the image it looks at goes
    // Its fence uses the image; its watch goes before the I/O context's pool. It leaves the
    // members first: while it still watches, it answers, or times out and is fenced.
    if (shared != nullptr) {
      auto* so = static_cast<RbdSharedObject*>(shared.get());
      if (int r = so->LeaveMembers(); r < 0) {
        log::Backing().warn("rbd store {}: leaving the gateways of {}: {}", name, so->oid(),
                            ErrnoText(-r));
      }
      so->SetFence(nullptr);
    }
    shared.reset();
    if (image != nullptr) {
      if (int r = rbd_close(static_cast<rbd_image_t>(image)); r < 0) {
        log::Backing().warn("rbd store {}: close: {}", name, ErrnoText(-r));
      }
    }
    if (ioctx != nullptr) rados_ioctx_destroy(static_cast<rados_ioctx_t>(ioctx));
  };
  bool on_reactor = false;
  for (const auto& s : slots_) on_reactor |= s->ioc->get_executor().running_in_this_thread();
  if (on_reactor) {
    asio::post(RbdPool(), std::move(close));
  } else {
    close();
  }
  slots_.clear();
}

int RbdStore::Grow(uint64_t new_size_bytes) {
  if (read_only_) return EROFS;
  auto* image = static_cast<rbd_image_t>(image_);
  uint64_t actual = 0;
  if (int r = rbd_get_size(image, &actual); r < 0) return -r;
  if (actual < new_size_bytes) {
    if (int r = rbd_resize(image, new_size_bytes); r < 0) return -r;
  }
  size_bytes_.store(new_size_bytes, std::memory_order_relaxed);
  return 0;
}

uint32_t RbdStore::in_flight(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->ops.in_flight() : 0;
}

uint32_t RbdStore::op_records(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->ops.records() : 0;
}

uint64_t RbdStore::native_compare_writes(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->native_compare_writes : 0;
}

// ---------------------------------------------------------------------------------------------
// Records, submission and completion (reactor thread).

// A free record of the slot, with the store and slot set.
RbdStore::Op* RbdStore::TakeOp(Slot& slot) {
  Op* op = slot.ops.Take();
  op->run = &RbdStore::Run;
  op->store = this;
  op->slot = &slot;
  return op;
}

void RbdStore::Submit(Op* op) {
  op->slot->inbox->Expect();
  auto* image = static_cast<rbd_image_t>(image_);
  rbd_completion_t c = nullptr;
  int r = rbd_aio_create_completion(op, &RbdStore::Callback, &c);
  if (r == 0 && op->fua_flushing) {
    r = rbd_aio_flush(image, c);
    if (r < 0) rbd_aio_release(c);
  } else if (r == 0) {
    switch (op->kind) {
      case Op::Kind::kRead:
        r = rbd_aio_read(image, op->offset, op->len, reinterpret_cast<char*>(op->data), c);
        break;
      case Op::Kind::kWrite:
        r = rbd_aio_write(image, op->offset, op->len, reinterpret_cast<char*>(op->data), c);
        break;
      case Op::Kind::kFlush:
        r = rbd_aio_flush(image, c);
        break;
      case Op::Kind::kUnmap:
        r = rbd_aio_discard(image, op->offset, op->len, c);
        break;
      case Op::Kind::kCompareWrite: {
        const ssize_t n = rbd_aio_compare_and_write(
            image, op->offset, op->len, reinterpret_cast<const char*>(op->caw->compare.data()),
            reinterpret_cast<const char*>(op->caw->data.data()), c, &op->mismatch, 0);
        r = n < 0 ? static_cast<int>(n) : 0;
        break;
      }
      case Op::Kind::kPool:
        r = -EINVAL;  // never submitted to librbd
        break;
    }
    if (r < 0) rbd_aio_release(c);
  }
  if (r < 0) {
    // Refused before it started: completes through the inbox like any other, never inline.
    op->result = r;
    op->slot->inbox->Post(op);
  }
}

// librbd's thread: the result, then the record to its reactor. The record is not touched after
// Post (the reactor may reuse it at once).
void RbdStore::Callback(void* completion, void* arg) {
  auto* c = static_cast<rbd_completion_t>(completion);
  auto* op = static_cast<Op*>(arg);
  op->result = rbd_aio_get_return_value(c);
  rbd_aio_release(c);
  runtime::CompletionInbox* inbox = op->slot->inbox;
  inbox->Post(op);
}

void RbdStore::Run(runtime::CompletionInbox::Item* item) {
  auto* op = static_cast<Op*>(item);
  RbdStore* self = op->store;
  int err = op->result < 0 ? static_cast<int>(-op->result) : 0;
  const bool wrote = op->kind == Op::Kind::kWrite || op->kind == Op::Kind::kCompareWrite;
  if (wrote && op->fua && !op->fua_flushing && err == 0) {
    op->fua_flushing = true;  // the data has landed; now out of librbd's cache
    return self->Submit(op);
  }
  if (op->kind == Op::Kind::kCompareWrite && err == EILSEQ) {
    op->caw->miscompare = self->MiscompareIndex(op->mismatch, op->offset, op->len);
    err = 0;
  }
  if (err == ESHUTDOWN) self->NoteFenced();
  if (op->kind == Op::Kind::kFlush || op->fua_flushing) err = self->FlushError(err);
  self->Finish(op, err);
}

int RbdStore::FlushError(int err) const {
  // librbd's cache (write-around by default) acknowledges a write before the OSDs have it and
  // hands a failed write's error to the next flush that ends, once: whatever the flush's error
  // (an OSD op past rados_osd_op_timeout, a blocklist), a write already answered GOOD may be
  // lost, and a retried flush would find nothing left to fail. So it is a write error, never a
  // NOT READY that the initiator retries into GOOD.
  return err != 0 && volatile_cache_ ? EIO : err;
}

void RbdStore::NoteFenced() {
  if (cluster_->fenced.exchange(true)) return;
  log::Backing().error("rbd store {}: {}", name_, offline_reason());
}

bool RbdStore::preferred() const {
  return lock_watch_ == nullptr || lock_watch_->preferred.load(std::memory_order_relaxed);
}

int RbdStore::ready() const {
  return cluster_ != nullptr && cluster_->fenced.load(std::memory_order_relaxed) ? ESHUTDOWN : 0;
}

std::string RbdStore::offline_reason() const {
  if (ready() == 0) return {};
  return "the Ceph cluster blocklisted this gateway's client " + client_ +
         " (another client broke an exclusive lock it held, or an operator blocklisted it): no "
         "I/O until the LUN is created again or the daemon restarts";
}

uint64_t RbdStore::MiscompareIndex(uint64_t mismatch, uint64_t offset, uint64_t len) const {
  // librbd reports the image offset of the first differing byte, but Ceph 16 computes it from the
  // start of the object rather than of the compared range (ObjectCompareAndWriteRequest passes
  // the index within the range as an object offset); later releases give the true offset. A
  // native compare covers one sector inside one object, so the two forms never overlap: a value
  // below the range is Ceph 16's.
  const uint64_t from = mismatch >= offset ? offset : offset - offset % object_size_;
  return std::min(mismatch - from, len - 1);
}

void RbdStore::Finish(Op* op, int err) {
  Slot& slot = *op->slot;
  if (op->gated) gate_.ExitShared(slot.index);
  if (op->counted) slot.writes->done.fetch_add(1, std::memory_order_release);
  const IoCompletion done = op->done;
  slot.ops.Give(op);
  done(err);
}

// ---------------------------------------------------------------------------------------------
// The pool: blocking librbd calls that must not run on a reactor.

void RbdStore::CountWrite(Op* op) {
  if (op->slot->writes == nullptr) return;
  op->counted = true;
  op->slot->writes->started.fetch_add(1, std::memory_order_relaxed);
}

void RbdStore::SubmitToPool(Op* op) {
  // Every kind of pool work but kProvision writes, and needs the exclusive lock.
  if (op->work != Op::PoolWork::kProvision) CountWrite(op);
  op->kind = Op::Kind::kPool;
  op->slot->inbox->Expect();
  asio::post(RbdPool(), [this, op] { RunOnPool(op); });
}

void RbdStore::RunOnPool(Op* op) {
  auto* image = static_cast<rbd_image_t>(image_);
  auto* buf = reinterpret_cast<char*>(op->data);
  int64_t r = 0;
  auto write = [&](const char* data) -> int64_t {
    ssize_t n = rbd_write(image, op->offset, op->len, data);
    if (n < 0) return n;
    if (!op->fua) return 0;
    op->fua_flushing = true;  // its error is a flush's (Run)
    return rbd_flush(image);
  };
  switch (op->work) {
    case Op::PoolWork::kReadModifyWrite: {
      gate_.LockExclusive();
      const ssize_t n = rbd_read(image, op->offset, op->len, buf);
      if (n < 0) {
        r = n;
      } else if (static_cast<uint64_t>(n) != op->len) {
        r = -EIO;
      } else {
        const std::span<const uint8_t> out =
            op->modify.fn(op->modify.ctx, std::span<uint8_t>(op->data, op->len));
        if (!out.empty()) r = write(reinterpret_cast<const char*>(out.data()));
      }
      gate_.UnlockExclusive();
      break;
    }
    case Op::PoolWork::kWrite: {
      std::lock_guard<std::mutex> lock(gate_.mutex());
      r = write(buf);
      break;
    }
    case Op::PoolWork::kUnmap: {
      std::lock_guard<std::mutex> lock(gate_.mutex());
      r = rbd_discard(image, op->offset, op->len);
      break;
    }
    case Op::PoolWork::kCompareWrite: {
      std::lock_guard<std::mutex> lock(gate_.mutex());
      uint64_t mismatch = 0;
      const ssize_t n = rbd_compare_and_write(
          image, op->offset, op->len, reinterpret_cast<const char*>(op->caw->compare.data()),
          reinterpret_cast<const char*>(op->caw->data.data()), &mismatch, 0);
      if (n == -EILSEQ) {
        op->caw->miscompare = MiscompareIndex(mismatch, op->offset, op->len);
        r = 0;
      } else {
        op->fua_flushing = n >= 0 && op->fua;
        r = n < 0 ? n : (op->fua ? rbd_flush(image) : 0);
      }
      break;
    }
    case Op::PoolWork::kProvision: {
      // The run of one status from op->offset: the object map lists the objects that exist (a
      // partial object counts as mapped); the first gap after a mapped run, or the first object
      // after an unmapped one, ends it.
      struct Walk {
        uint64_t from, end;
        uint64_t run_end = 0;  // 0: no object seen yet
        bool mapped = false;
        static int Visit(uint64_t off, size_t len, int exists, void* arg) {
          auto* w = static_cast<Walk*>(arg);
          if (!exists) return 0;
          const uint64_t e = off + len;
          if (w->run_end == 0) {
            if (off > w->from) {
              w->run_end = off;  // unmapped up to the first object
              return -ECANCELED;
            }
            w->mapped = true;
            w->run_end = e;
            return 0;
          }
          if (off > w->run_end) return -ECANCELED;
          w->run_end = std::max(w->run_end, e);
          return 0;
        }
      } walk{op->offset, op->offset + op->len};
      uint64_t flags = 0;
      if (rbd_get_flags(image, &flags) == 0 && (flags & RBD_FLAG_OBJECT_MAP_INVALID) == 0 &&
          (flags & RBD_FLAG_FAST_DIFF_INVALID) == 0) {
        const int d =
            rbd_diff_iterate2(image, nullptr, op->offset, op->len, 1, 1, &Walk::Visit, &walk);
        if (d < 0 && d != -ECANCELED) {
          r = d;
          break;
        }
        const uint64_t end = walk.run_end == 0 ? walk.end : std::min(walk.run_end, walk.end);
        *op->extent = Extent{walk.mapped, end - op->offset};
      } else {
        *op->extent = Extent{true, op->len};  // no usable object map: mapped, as a thick store
      }
      break;
    }
  }
  op->result = r;
  runtime::CompletionInbox* inbox = op->slot->inbox;
  inbox->Post(op);
}

// ---------------------------------------------------------------------------------------------
// The calls.

void RbdStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);  // caller bug: no such reactor
  if (buf.empty()) return done(0);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kRead;
  op->offset = offset;
  op->data = buf.data();
  op->len = buf.size();
  op->done = done;
  Submit(op);
}

void RbdStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                     IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  if (buf.empty()) return done(0);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kWrite;
  op->fua = fua;
  op->offset = offset;
  op->data = const_cast<uint8_t*>(buf.data());  // librbd only reads it
  op->len = buf.size();
  op->done = done;
  if (!gate_.TryEnterShared(slot)) {
    op->work = Op::PoolWork::kWrite;  // a read-modify-write is running: behind it
    return SubmitToPool(op);
  }
  op->gated = true;
  CountWrite(op);
  Submit(op);
}

void RbdStore::WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                           IoCompletion done) {
  // Inside one stripe unit, one object request: the OSD applies it whole (see AtomicUnit).
  if (atomic_unit_ == 0) return done(ENOTSUP);
  if (offset % atomic_unit_ != 0 || buf.size() > atomic_unit_) return done(EINVAL);
  Write(slot, offset, buf, fua, done);
}

void RbdStore::Flush(unsigned slot, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kFlush;
  op->done = done;
  Submit(op);
}

void RbdStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  if (len == 0) return done(0);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kUnmap;
  op->offset = offset;
  op->len = len;
  op->done = done;
  if (!gate_.TryEnterShared(slot)) {
    op->work = Op::PoolWork::kUnmap;
    return SubmitToPool(op);
  }
  op->gated = true;
  CountWrite(op);
  Submit(op);
}

void RbdStore::GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                               IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  const uint64_t end = std::min(offset + max_len, size_bytes());
  if (end <= offset) {
    *out = Extent{true, 0};
    return done(0);
  }
  if (!use_object_map_) {
    *out = Extent{true, end - offset};
    return done(0);
  }
  Op* op = TakeOp(*slots_[slot]);
  op->work = Op::PoolWork::kProvision;
  op->offset = offset;
  // One query walks at most this much of the object map; a longer run is reported in pieces.
  op->len = std::min(end - offset, kMaxProvisioningWalk);
  op->extent = out;
  op->done = done;
  SubmitToPool(op);
}

void RbdStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                               ModifyFn modify, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  Op* op = TakeOp(*slots_[slot]);
  op->work = Op::PoolWork::kReadModifyWrite;
  op->fua = fua;
  op->offset = offset;
  op->data = scratch.data();
  op->len = scratch.size();
  op->modify = modify;
  op->done = done;
  SubmitToPool(op);
}

void RbdStore::CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* caw,
                               IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  const uint64_t len = caw->compare.size();
  if (len == 0) return done(0);
  const bool native = len <= kNativeCompareSector &&
                      offset / kNativeCompareSector == (offset + len - 1) / kNativeCompareSector;
  if (!native) {
    // Longer than librbd compares: atomic against this process's writes (see rbd_store.h).
    return BackingStore::CompareAndWrite(slot, offset, caw, done);
  }
  Slot& s = *slots_[slot];
  Op* op = TakeOp(s);
  op->offset = offset;
  op->len = len;
  op->caw = caw;
  op->fua = caw->fua;
  op->done = done;
  if (!gate_.TryEnterShared(slot)) {
    op->work = Op::PoolWork::kCompareWrite;
    return SubmitToPool(op);
  }
  ++s.native_compare_writes;
  op->kind = Op::Kind::kCompareWrite;
  op->gated = true;
  CountWrite(op);
  Submit(op);
}

}  // namespace iscsigw::backing

// ---------------------------------------------------------------------------------------------
// OfflineRbdStore.

namespace iscsigw::backing {

struct OfflineRbdStore::State {
  RbdStoreOptions options;
  std::vector<boost::asio::io_context*> slots;
  uint32_t block_size = 512;
  uint64_t offline_size = 0;
  std::string name;
  std::atomic<RbdStore*> live{nullptr};          // set once by the retry thread; owned by `store`
  std::unique_ptr<RbdStore> store;               // written by the retry thread before `live`
  std::shared_ptr<DeferredSharedObject> shared;  // options.shared(); attached before `live`
  // The retry thread has returned. Shared on its own: a retired thread's entry must not keep the
  // state (and the store it holds open) alive.
  std::shared_ptr<std::atomic<bool>> ended = std::make_shared<std::atomic<bool>>(false);
  std::mutex mu;  // guards what follows
  std::condition_variable cv;
  bool stop = false;
  std::string reason;
};

OfflineRbdStore::OfflineRbdStore(RbdStoreOptions options,
                                 std::vector<boost::asio::io_context*> slots, uint32_t block_size,
                                 std::string first_error)
    : state_(std::make_shared<State>()), slots_(slots) {
  State& s = *state_;
  s.name = options.pool + "/" + (options.ns.empty() ? "" : options.ns + "/") + options.image;
  s.offline_size = options.size_bytes != 0 ? options.size_bytes : block_size;
  s.options = std::move(options);
  s.slots = std::move(slots);
  s.block_size = block_size;
  s.reason = std::move(first_error);
  if (s.options.shared()) s.shared = std::make_shared<DeferredSharedObject>();
  log::Backing().warn("rbd store {}: offline, retrying in the background: {}", s.name, s.reason);
}

std::shared_ptr<SharedObject> OfflineRbdStore::shared_object() const { return state_->shared; }

void OfflineRbdStore::Start(OnOnline on_online, std::chrono::milliseconds first_retry,
                            std::chrono::milliseconds max_retry) {
  thread_ = std::thread([state = state_, on_online = std::move(on_online), first_retry, max_retry] {
    State& s = *state;
    struct Ended {  // last to go, on every return
      State& s;
      ~Ended() { s.ended->store(true, std::memory_order_release); }
    } ended{s};
    auto delay = first_retry;
    auto last_log = std::chrono::steady_clock::now();
    std::string logged = s.reason;
    for (;;) {
      {
        std::unique_lock lock(s.mu);
        if (s.cv.wait_for(lock, delay, [&] { return s.stop; })) return;
      }
      delay = std::min(delay * 2, max_retry);
      auto r = RbdStore::Open(s.options, s.slots);
      std::string error;
      if (!r.ok()) {
        error = r.status().message();
      } else if (r.value()->size_bytes() % s.block_size != 0) {
        error = "rbd store " + s.name + ": size " + std::to_string(r.value()->size_bytes()) +
                " is not a multiple of block_size " + std::to_string(s.block_size);
      }
      if (error.empty()) {
        std::unique_lock lock(s.mu);
        if (s.stop) return;  // the LUN is gone; the store closes here, off every reactor
        const uint64_t size = r.value()->size_bytes();
        s.store = std::move(r).value();
        s.reason.clear();
        if (s.shared != nullptr) s.shared->Attach(s.store->shared_object());
        s.live.store(s.store.get(), std::memory_order_release);
        lock.unlock();
        log::Backing().info("rbd store {}: online, {} bytes", s.name, size);
        if (on_online) on_online(s.offline_size, size);
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      const bool changed = error != logged;
      {
        std::lock_guard lock(s.mu);
        s.reason = error;
      }
      if (changed || now - last_log >= std::chrono::minutes(1)) {
        log::Backing().warn("rbd store {}: still offline, retrying within {} ms: {}", s.name,
                            delay.count(), error);
        logged = error;
        last_log = now;
      }
    }
  });
}

OfflineRbdStore::~OfflineRbdStore() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (!thread_.joinable()) return;
  bool on_reactor = false;
  for (auto* ioc : slots_) on_reactor |= ioc->get_executor().running_in_this_thread();
  if (on_reactor) {
    // A reactor must not wait for a connect attempt: the thread (which holds the state, and the
    // store it may still open) finishes on its own and is joined later.
    RetireRetry(std::move(thread_), state_);
  } else {
    thread_.join();
  }
}

namespace {
struct RetiredRetry {
  std::thread thread;
  std::shared_ptr<const std::atomic<bool>> ended;
};
std::mutex retired_mu;
std::vector<RetiredRetry> retired;  // guarded by retired_mu
}  // namespace

void OfflineRbdStore::RetireRetry(std::thread thread, const std::shared_ptr<State>& state) {
  std::lock_guard lock(retired_mu);
  // Those that have returned since are joined now (at once), so that the list stays short.
  std::erase_if(retired, [](RetiredRetry& r) {
    if (!r.ended->load(std::memory_order_acquire)) return false;
    r.thread.join();
    return true;
  });
  if (state->ended->load(std::memory_order_acquire)) {
    thread.join();  // it has returned: nothing to wait for
    return;
  }
  retired.push_back({std::move(thread), state->ended});
}

size_t OfflineRbdStore::JoinRetiredRetries() {
  std::vector<RetiredRetry> all;
  {
    std::lock_guard lock(retired_mu);
    all.swap(retired);
  }
  for (auto& r : all) r.thread.join();
  return all.size();
}

RbdStore* OfflineRbdStore::Live() const { return state_->live.load(std::memory_order_acquire); }

bool OfflineRbdStore::preferred() const {
  RbdStore* s = Live();
  return s == nullptr || s->preferred();
}

int OfflineRbdStore::ready() const {
  RbdStore* s = Live();
  return s != nullptr ? s->ready() : ENOTCONN;
}

std::string OfflineRbdStore::offline_reason() const {
  if (RbdStore* s = Live(); s != nullptr) return s->offline_reason();
  std::lock_guard lock(state_->mu);
  return state_->reason;
}

uint64_t OfflineRbdStore::size_bytes() const {
  RbdStore* s = Live();
  return s != nullptr ? s->size_bytes() : state_->offline_size;
}

uint64_t OfflineRbdStore::unmap_granularity() const {
  RbdStore* s = Live();
  return s != nullptr ? s->unmap_granularity() : uint64_t{4} << 20;  // librbd's default object
}

void OfflineRbdStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf,
                           IoCompletion done) {
  if (RbdStore* s = Live()) return s->Read(slot, offset, buf, done);
  done(ENOTCONN);
}

void OfflineRbdStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                            IoCompletion done) {
  if (RbdStore* s = Live()) return s->Write(slot, offset, buf, fua, done);
  done(ENOTCONN);
}

BackingStore::AtomicLimits OfflineRbdStore::atomic_limits() const {
  RbdStore* s = Live();
  return s != nullptr ? s->atomic_limits() : AtomicLimits{};
}

void OfflineRbdStore::WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf,
                                  bool fua, IoCompletion done) {
  if (RbdStore* s = Live()) return s->WriteAtomic(slot, offset, buf, fua, done);
  done(ENOTCONN);
}

void OfflineRbdStore::Flush(unsigned slot, IoCompletion done) {
  if (RbdStore* s = Live()) return s->Flush(slot, done);
  done(ENOTCONN);
}

void OfflineRbdStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  if (RbdStore* s = Live()) return s->Unmap(slot, offset, len, done);
  done(ENOTCONN);
}

void OfflineRbdStore::GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                                      IoCompletion done) {
  if (RbdStore* s = Live()) return s->GetProvisioning(slot, offset, max_len, out, done);
  done(ENOTCONN);
}

void OfflineRbdStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch,
                                      bool fua, ModifyFn modify, IoCompletion done) {
  if (RbdStore* s = Live()) return s->ReadModifyWrite(slot, offset, scratch, fua, modify, done);
  done(ENOTCONN);
}

void OfflineRbdStore::CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                                      IoCompletion done) {
  if (RbdStore* s = Live()) return s->CompareAndWrite(slot, offset, op, done);
  done(ENOTCONN);
}

int OfflineRbdStore::Grow(uint64_t new_size_bytes) {
  if (RbdStore* s = Live()) return s->Grow(new_size_bytes);
  return ENOTCONN;
}

}  // namespace iscsigw::backing
