#include "dataplane/backing/deferred_shared_object.h"

#include <cerrno>
#include <utility>

namespace iscsigw::backing {

namespace {
// Jobs run at once by an unattached object's Post, on this thread: they see it unattached.
thread_local int running_unattached = 0;
// The real object whose thread runs a job posted through a DeferredSharedObject (alive for as
// long as the job runs: its destructor joins that thread); null elsewhere.
thread_local SharedObject* running_on = nullptr;
}  // namespace

void DeferredSharedObject::Attach(const std::shared_ptr<SharedObject>& real) {
  std::lock_guard lock(mu_);
  real_ = real;
  real_raw_ = real.get();
  if (real != nullptr && listener_) {
    real_token_ = real->SetListener(listener_, lost_);
    real->Reload();  // the listener learns the state now
  }
}

std::shared_ptr<SharedObject> DeferredSharedObject::Real() const {
  if (running_unattached > 0) return nullptr;
  std::lock_guard lock(mu_);
  // On the real object's own thread: not an owner (aliasing an empty one), so that its last
  // reference cannot go there; the thread's job keeps it alive.
  if (running_on != nullptr && running_on == real_raw_) {
    return std::shared_ptr<SharedObject>(std::shared_ptr<SharedObject>(), running_on);
  }
  return real_.lock();
}

int DeferredSharedObject::Read(std::string* data, uint64_t* version) {
  auto real = Real();
  return real != nullptr ? real->Read(data, version) : -ENOTCONN;
}

int DeferredSharedObject::WriteIfVersion(uint64_t version, const std::string& data, uint64_t* out) {
  auto real = Real();
  return real != nullptr ? real->WriteIfVersion(version, data, out) : -ENOTCONN;
}

int DeferredSharedObject::Notify(uint64_t version, const std::string& data,
                                 const std::string& events, std::chrono::milliseconds timeout,
                                 Silent silent) {
  auto real = Real();
  return real != nullptr ? real->Notify(version, data, events, timeout, silent) : -ENOTCONN;
}

void DeferredSharedObject::Post(std::function<void()> fn) {
  if (auto real = Real()) {
    SharedObject* on = real.get();
    return real->Post([self = weak_from_this().lock(), on, fn = std::move(fn)] {
      running_on = on;
      fn();
      running_on = nullptr;
    });
  }
  ++running_unattached;
  fn();
  --running_unattached;
}

void DeferredSharedObject::Reload() {
  // Unattached: Attach rereads.
  if (auto real = Real()) real->Reload();
}

uint64_t DeferredSharedObject::SetListener(Listener listener, std::function<void()> lost) {
  std::lock_guard lock(mu_);
  listener_ = std::move(listener);
  lost_ = std::move(lost);
  if (auto real = real_.lock()) real_token_ = real->SetListener(listener_, lost_);
  return ++token_;
}

void DeferredSharedObject::ClearListener(uint64_t token) {
  std::lock_guard lock(mu_);
  if (token != token_) return;
  listener_ = nullptr;
  lost_ = nullptr;
  if (auto real = real_.lock()) real->ClearListener(real_token_);
}

}  // namespace iscsigw::backing
