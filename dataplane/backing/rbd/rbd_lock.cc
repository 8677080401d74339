// The exclusive lock of an rbd image: who holds it (the lock watch, preferred()), the lock of a
// dead owner broken, a gateway that does not answer fenced (rbd_store.h, "Several gateways").
#include <rados/librados.h>
#include <rbd/librbd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.h"
#include "dataplane/backing/rbd/rbd_internal.h"

namespace iscsigw::backing {
namespace {

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

// How often the lock watch looks, and how long writes may make no progress while another client
// holds the exclusive lock before that client is probed (BreakDeadLockOwner).
constexpr std::chrono::milliseconds kLockWatchPeriod{500};
constexpr std::chrono::milliseconds kStuckWrites{2000};
// The image metadata key a gateway sets to claim a free lock (LockWatch::Look); its value is the
// gateway's id, for operators (`rbd image-meta get`).
constexpr char kHolderKey[] = "iscsigw.holder";

}  // namespace

namespace rbd_internal {

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

}  // namespace rbd_internal

using rbd_internal::BreakDeadLockOwner;
using rbd_internal::BreakIf;

bool RbdStore::LockWatch::Look(rbd_image_t image, int* mine) {
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

void RbdStore::LockWatch::Run(rados_t cluster, rados_ioctx_t io, rbd_image_t image,
                              const std::string& who) {
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

}  // namespace iscsigw::backing
