// An rbd image's life in the store: created, opened (RbdStore::Open), grown, closed (the
// destructor), removed; and the shared objects of several gateways opened beside it.
#include <rados/librados.h>
#include <rbd/features.h>
#include <rbd/librbd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/pending_steps.h"
#include "dataplane/backing/rbd/rbd_internal.h"
#include "dataplane/backing/rbd/rbd_shared_object.h"
#include "dataplane/backing/rbd/rbd_store.h"

namespace iscsigw::backing {

using rbd_internal::AtomicUnit;
using rbd_internal::BlocklistWatcher;
using rbd_internal::BreakDeadLockOwner;
using rbd_internal::BreakIf;
using rbd_internal::ImageConfGet;
using rbd_internal::RbdPool;

namespace {

namespace asio = boost::asio;

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
    if (int joined = obj.value()->JoinMembers(); joined < 0) {
      obj.value()->SetFence(nullptr);
      return Status(StatusCode::kIoError, who + "joining the gateways of " + obj.value()->oid() +
                                              ": " + ErrnoText(-joined));
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

}  // namespace iscsigw::backing
