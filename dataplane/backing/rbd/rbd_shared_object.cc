#include "dataplane/backing/rbd/rbd_shared_object.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/on_release.h"

namespace iscsigw::backing {
namespace {

// "<origin> <version> <data length>\n<data><events>": the notify payload. The origin names the
// notifying object, so that it does not apply its own notify (another object of the same image in
// the same process, with the same librados instance, does).
std::string Frame(const std::string& origin, uint64_t version, const std::string& data,
                  const std::string& events) {
  char head[96];
  std::snprintf(head, sizeof(head), "%s %" PRIu64 " %zu\n", origin.c_str(), version, data.size());
  return head + data + events;
}

bool Unframe(std::string_view in, std::string* origin, uint64_t* version, std::string_view* data,
             std::string_view* events) {
  const size_t nl = in.find('\n');
  if (nl == std::string_view::npos || nl > 95) return false;
  const std::string head(in.substr(0, nl));
  char from[64];
  unsigned long long v = 0;
  size_t len = 0;
  if (std::sscanf(head.c_str(), "%63s %llu %zu", from, &v, &len) != 3 || len > in.size() - nl - 1) {
    return false;
  }
  *origin = from;
  *version = v;
  *data = in.substr(nl + 1, len);
  *events = in.substr(nl + 1 + len);
  return true;
}

}  // namespace

Result<std::shared_ptr<RbdSharedObject>> RbdSharedObject::Open(std::shared_ptr<void> keep,
                                                               rados_t cluster,
                                                               rados_ioctx_t pool_io,
                                                               const std::string& oid,
                                                               const std::string& who) {
  std::shared_ptr<RbdSharedObject> o(new RbdSharedObject());
  o->keep_ = std::move(keep);
  o->cluster_ = cluster;
  o->oid_ = oid;
  o->origin_ = std::to_string(rados_get_instance_id(cluster)) + "." +
               std::to_string(reinterpret_cast<uintptr_t>(o.get()));
  o->who_ = who;
  if (int r = rados_ioctx_create2(cluster, rados_ioctx_get_id(pool_io), &o->io_); r < 0) {
    return Status(StatusCode::kIoError, who + "rados_ioctx_create2: " + ErrnoText(-r));
  }
  char ns[256];
  const int n = rados_ioctx_get_namespace(pool_io, ns, sizeof(ns));
  if (n < 0) return Status(StatusCode::kIoError, who + "namespace: " + ErrnoText(-n));
  rados_ioctx_set_namespace(o->io_, std::string(ns, static_cast<size_t>(n)).c_str());

  if (int r = o->Watch(); r < 0) {
    return Status(r == -ETIMEDOUT ? StatusCode::kUnavailable : StatusCode::kIoError,
                  who + "watching " + o->oid_ + ": " + ErrnoText(-r));
  }
  o->ack_target_->io = o->io_;
  o->ack_target_->oid = oid;
  o->ack_target_->who = who;
  o->thread_ = std::thread([p = o.get()] { p->RunJobs(); });
  return o;
}

RbdSharedObject::~RbdSharedObject() {
  {
    std::lock_guard lock(jobs_mu_);
    stop_ = true;
    jobs_.clear();
  }
  jobs_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (io_ == nullptr) return;
  {
    std::lock_guard lock(ack_target_->mu);  // acks released from now on are not sent
    ack_target_->io = nullptr;
  }
  if (cookie_ != 0) {
    if (int r = rados_unwatch2(io_, cookie_); r < 0 && r != -ENOTCONN) {
      log::Backing().warn("{}unwatching {}: {}", who_, oid_, ErrnoText(-r));
    }
  }
  // Also after a lost watch (cookie_ 0): callbacks of the old one may still be queued.
  rados_watch_flush(cluster_);  // no callback with this object runs after this
  rados_ioctx_destroy(io_);
}

void RbdSharedObject::RunJobs() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(jobs_mu_);
      for (;;) {
        if (stop_) return;
        if (!jobs_.empty()) break;
        if (retry_due_) {
          if (std::chrono::steady_clock::now() >= *retry_due_) break;
          jobs_cv_.wait_until(lock, *retry_due_);
        } else {
          jobs_cv_.wait(lock);
        }
      }
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      } else {
        retry_due_.reset();
        job = [this] { Resync(); };
      }
    }
    job();
  }
}

void RbdSharedObject::Post(std::function<void()> fn) {
  {
    std::lock_guard lock(jobs_mu_);
    if (stop_) return;
    jobs_.push_back(std::move(fn));
  }
  jobs_cv_.notify_one();
}

void RbdSharedObject::Reload() {
  {
    // One reread queued at a time: callers that fail against a cluster that is down (every
    // change request, for one) must not stack up blocking reads on the object's thread.
    std::lock_guard lock(jobs_mu_);
    if (reload_queued_) return;
    reload_queued_ = true;
  }
  Post([this] {
    {
      std::lock_guard lock(jobs_mu_);
      reload_queued_ = false;
    }
    Resync();
  });
}

void RbdSharedObject::ResyncLater() {
  {
    std::lock_guard lock(jobs_mu_);
    if (stop_ || retry_due_) return;
    retry_due_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  }
  jobs_cv_.notify_one();
}

int RbdSharedObject::Read(std::string* data, uint64_t* version) {
  std::string buf(kMaxData + 1, '\0');
  size_t got = 0;
  int prval = 0;
  std::lock_guard lock(op_mu_);
  rados_read_op_t op = rados_create_read_op();
  rados_read_op_read(op, 0, buf.size(), buf.data(), &got, &prval);
  int r = rados_read_op_operate(op, io_, oid_.c_str(), 0);
  rados_release_read_op(op);
  if (r == -ENOENT) {  // removed (by hand): no state; the next write creates it again
    data->clear();
    *version = 0;
    return 0;
  }
  if (r < 0) return r;
  if (prval < 0) return prval;
  if (got > kMaxData) return -EFBIG;
  buf.resize(got);
  *data = std::move(buf);
  *version = rados_get_last_version(io_);
  return 0;
}

int RbdSharedObject::WriteIfVersion(uint64_t version, const std::string& data, uint64_t* out) {
  if (data.size() > kMaxData) return -EFBIG;
  std::lock_guard lock(op_mu_);
  rados_write_op_t op = rados_create_write_op();
  if (version == 0) {
    rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);  // read as missing
  } else {
    rados_write_op_assert_version(op, version);
  }
  rados_write_op_write_full(op, data.data(), data.size());
  int r = rados_write_op_operate(op, io_, oid_.c_str(), nullptr, 0);
  rados_release_write_op(op);
  // The version moved on (or the object was created meanwhile, or removed).
  if (r == -ERANGE || r == -EOVERFLOW || r == -EEXIST || (r == -ENOENT && version != 0)) {
    return -ECANCELED;
  }
  if (r < 0) return r;
  *out = rados_get_last_version(io_);
  return 0;
}

int RbdSharedObject::Notify(uint64_t version, const std::string& data, const std::string& events,
                            std::chrono::milliseconds timeout, Silent silent) {
  const std::string msg = Frame(origin_, version, data, events);
  char* reply = nullptr;
  size_t reply_len = 0;
  int r = 0;
  {
    std::lock_guard lock(op_mu_);  // it sets the I/O context's last version too
    r = rados_notify2(io_, oid_.c_str(), msg.data(), static_cast<int>(msg.size()),
                      static_cast<uint64_t>(timeout.count()), &reply, &reply_len);
  }
  const bool replied = reply != nullptr && reply_len > 0;
  // The OSD's answer: the watchers that acknowledged, and (-ETIMEDOUT) those that did not.
  // Without one, this client's own request timed out: nobody may have got the notify.
  std::vector<uint64_t> answered, unanswered;
  bool decoded = false;
  if (replied) {
    notify_ack_t* acks = nullptr;
    notify_timeout_t* timeouts = nullptr;
    size_t nacks = 0, ntimeouts = 0;
    if (rados_decode_notify_response(reply, reply_len, &acks, &nacks, &timeouts, &ntimeouts) == 0) {
      decoded = true;
      for (size_t i = 0; i < nacks; ++i) answered.push_back(acks[i].notifier_id);
      for (size_t i = 0; i < ntimeouts; ++i) unanswered.push_back(timeouts[i].notifier_id);
      rados_free_notify_response(acks, nacks, timeouts);
    }
  }
  if (reply != nullptr) rados_buffer_free(reply);
  if (r == -ETIMEDOUT && !replied) return -ENOTCONN;
  if ((r != 0 && r != -ETIMEDOUT) || silent != Silent::kFence) return r;
  // Who must have answered: a member whose watch is gone is in neither list. (A reply that does
  // not decode names nobody: the notify's own result stands.)
  if (!decoded) return r;
  if (int f = FenceSilentMembers(answered, unanswered); f < 0) return f;
  if (r == 0) return 0;
  std::lock_guard lock(fence_mu_);
  for (const uint64_t gid : unanswered) {
    const int f = fence_ ? fence_(gid) : -ENOTSUP;
    if (f < 0) {
      log::Backing().error(
          "{}{}: client.{} did not acknowledge a change within {} ms and could "
          "not be fenced: {}",
          who_, oid_, gid, timeout.count(), ErrnoText(-f));
      return -ETIMEDOUT;
    }
    log::Backing().error(
        "{}{}: client.{} did not acknowledge a change within {} ms: "
        "blocklisted, so that nothing it sends lands any more",
        who_, oid_, gid, timeout.count());
  }
  return 0;
}

namespace {

std::string MembersOid(const std::string& oid) { return oid + ".gateways"; }

}  // namespace

int RbdSharedObject::JoinMembers() {
  char* addrs = nullptr;
  if (int r = rados_getaddrs(cluster_, &addrs); r < 0) return r;
  const std::string address = addrs != nullptr ? addrs : "";
  rados_buffer_free(addrs);
  const std::string gid = std::to_string(rados_get_instance_id(cluster_));
  const char* keys[] = {gid.c_str()};
  const char* vals[] = {address.c_str()};
  const size_t lens[] = {address.size()};
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, nullptr);
  rados_write_op_omap_set(op, keys, vals, lens, 1);
  const int r = rados_write_op_operate(op, io_, MembersOid(oid_).c_str(), nullptr, 0);
  rados_release_write_op(op);
  return r;
}

int RbdSharedObject::LeaveMembers() {
  const std::string gid = std::to_string(rados_get_instance_id(cluster_));
  const char* keys[] = {gid.c_str()};
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_omap_rm_keys(op, keys, 1);
  const int r = rados_write_op_operate(op, io_, MembersOid(oid_).c_str(), nullptr, 0);
  rados_release_write_op(op);
  return r == -ENOENT ? 0 : r;
}

int RbdSharedObject::FenceSilentMembers(const std::vector<uint64_t>& answered,
                                        const std::vector<uint64_t>& timed_out) {
  const std::string members = MembersOid(oid_);
  std::vector<std::pair<std::string, std::string>> silent;  // (global id, address)
  {
    rados_read_op_t op = rados_create_read_op();
    rados_omap_iter_t it = nullptr;
    int prval = 0;
    unsigned char more = 0;
    rados_read_op_omap_get_vals2(op, "", "", 1024, &it, &more, &prval);
    const int r = rados_read_op_operate(op, io_, members.c_str(), 0);
    rados_release_read_op(op);
    if (r == -ENOENT) return 0;  // nobody joined yet
    if (r < 0 || prval < 0) {
      if (it != nullptr) rados_omap_get_end(it);
      log::Backing().error("{}{}: reading the gateways that must answer a change: {}", who_,
                           members, ErrnoText(r < 0 ? -r : -prval));
      return -ETIMEDOUT;
    }
    const uint64_t self = rados_get_instance_id(cluster_);
    char* key = nullptr;
    char* val = nullptr;
    size_t len = 0;
    while (rados_omap_get_next(it, &key, &val, &len) == 0 && key != nullptr) {
      const uint64_t gid = std::strtoull(key, nullptr, 10);
      auto in = [gid](const std::vector<uint64_t>& v) {
        return std::find(v.begin(), v.end(), gid) != v.end();
      };
      if (gid != self && !in(answered) && !in(timed_out)) {
        silent.emplace_back(key, std::string(val, len));
      }
    }
    rados_omap_get_end(it);
  }
  for (const auto& [gid, address] : silent) {
    if (int f = rados_blocklist_add(cluster_, const_cast<char*>(address.c_str()), 0); f < 0) {
      log::Backing().error(
          "{}{}: client.{} ({}) is a gateway of this image that no longer watches it, and "
          "could not be fenced: {}",
          who_, oid_, gid, address, ErrnoText(-f));
      return -ETIMEDOUT;
    }
    log::Backing().error(
        "{}{}: client.{} ({}) is a gateway of this image that no longer watches it (its watch "
        "timed out): blocklisted before the change is answered, so that nothing it sends lands "
        "any more",
        who_, oid_, gid, address);
    const char* keys[] = {gid.c_str()};
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_omap_rm_keys(op, keys, 1);
    (void)rados_write_op_operate(op, io_, members.c_str(), nullptr,
                                 0);  // listed again: fenced again
    rados_release_write_op(op);
  }
  return 0;
}

void RbdSharedObject::SetFence(std::function<int(uint64_t gid)> fence) {
  std::lock_guard lock(fence_mu_);
  fence_ = std::move(fence);
}

uint64_t RbdSharedObject::SetListener(Listener listener, std::function<void()> lost) {
  std::lock_guard lock(listener_mu_);
  listener_ = std::move(listener);
  lost_ = std::move(lost);
  return ++token_;
}

void RbdSharedObject::ClearListener(uint64_t token) {
  std::lock_guard lock(listener_mu_);
  if (token == token_) {
    listener_ = nullptr;
    lost_ = nullptr;
  }
}

int RbdSharedObject::WatchCheck() {
  // Under watch_mu_: Resync unwatches a cookie only after taking it from cookie_ under the same
  // mutex, so the one checked here is still registered.
  std::lock_guard lock(watch_mu_);
  if (cookie_ == 0 || watch_lost_) return -ENOTCONN;
  return rados_watch_check(io_, cookie_);
}

void RbdSharedObject::OnNotify(void* arg, uint64_t notify_id, uint64_t cookie, uint64_t notifier,
                               void* data, size_t len) {
  auto* self = static_cast<RbdSharedObject*>(arg);
  (void)notifier;
  // The notifier waits for this: it goes once the listener has run and released it, so that the
  // change, and what it started, are in effect here.
  std::shared_ptr<void> ack = OnRelease([t = self->ack_target_, notify_id, cookie] {
    std::lock_guard lock(t->mu);
    if (t->io == nullptr) return;  // the object is closing: its watch goes too
    if (int r = rados_notify_ack(t->io, t->oid.c_str(), notify_id, cookie, nullptr, 0); r < 0) {
      log::Backing().warn("{}acknowledging a notify on {}: {}", t->who, t->oid, ErrnoText(-r));
    }
  });
  std::string origin;
  uint64_t version = 0;
  std::string_view body, events;
  if (!Unframe(std::string_view(static_cast<const char*>(data), len), &origin, &version, &body,
               &events)) {
    log::Backing().warn("{}{}: a notify of {} bytes that is not ours, ignored", self->who_,
                        self->oid_, len);
  } else if (origin != self->origin_) {
    std::lock_guard lock(self->listener_mu_);
    if (self->listener_) self->listener_(version, body, events, std::move(ack));
  }
}

void RbdSharedObject::OnWatchError(void* arg, uint64_t cookie, int err) {
  auto* self = static_cast<RbdSharedObject*>(arg);
  log::Backing().warn("{}watch on {} lost ({}): watching again", self->who_, self->oid_,
                      ErrnoText(-err));
  (void)cookie;
  {
    // Whichever watch it was (the current one, or one not yet recorded): watch again.
    std::lock_guard lock(self->watch_mu_);
    self->watch_lost_ = true;
  }
  {
    std::lock_guard lock(self->listener_mu_);
    if (self->lost_) self->lost_();
  }
  self->Reload();
}

int RbdSharedObject::Watch() {
  rados_write_op_t op = rados_create_write_op();  // missing at first, or removed since
  rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, nullptr);
  int r = rados_write_op_operate(op, io_, oid_.c_str(), nullptr, 0);
  rados_release_write_op(op);
  if (r < 0) return r;
  uint64_t cookie = 0;
  r = rados_watch2(io_, oid_.c_str(), &cookie, &RbdSharedObject::OnNotify,
                   &RbdSharedObject::OnWatchError, this);
  if (r < 0) return r;
  std::lock_guard lock(watch_mu_);
  cookie_ = cookie;
  return 0;
}

void RbdSharedObject::Resync() {
  bool lost = false;
  {
    std::lock_guard lock(watch_mu_);
    lost = watch_lost_ || cookie_ == 0;
  }
  if (lost) {
    std::lock_guard lock(op_mu_);  // the calls below set the I/O context's last version
    uint64_t old = 0;
    {
      std::lock_guard w(watch_mu_);
      old = std::exchange(cookie_, 0);
      watch_lost_ = false;
    }
    if (old != 0) (void)rados_unwatch2(io_, old);
    if (int r = Watch(); r < 0) {
      log::Backing().warn("{}watching {}: {}; again in 1 s", who_, oid_, ErrnoText(-r));
      ResyncLater();
      return;
    }
  }
  std::string data;
  uint64_t version = 0;
  if (int r = Read(&data, &version); r < 0) {
    log::Backing().warn("{}reading {}: {}; again in 1 s", who_, oid_, ErrnoText(-r));
    ResyncLater();  // so that no change stays missed
    return;
  }
  if (lost) log::Backing().info("{}watching {} again (version {})", who_, oid_, version);
  std::lock_guard lock(listener_mu_);
  if (listener_) listener_(version, data, "", nullptr);
}

}  // namespace iscsigw::backing
