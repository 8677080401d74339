// DeferredSharedObject: the SharedObject of a LUN whose real object cannot be opened yet (an rbd
// image that other gateways export too, offline when the daemon starts: OfflineRbdStore). The
// LUN is built with this one, so it is a shared LUN from the start: it offers the reservation
// commands, and since it cannot read the state it answers NOT READY to what depends on the state
// (Lun, reservations.cc) rather than serve without the others' reservations.
//
// Until Attach, calls fail as an unreachable object's would: Read, WriteIfVersion and Notify with
// -ENOTCONN; Post runs its job at once, on the caller's thread, as if unattached throughout (so
// that a job posted from a reactor never reaches the real object there). Attach hands the
// listener to the real object and has it reread the object: the listener learns the state and the
// LUN serves. The real object belongs to whoever opened it (the store), and is held weakly: once
// it is gone, calls fail as before Attach. A job posted through it runs on the real object's
// thread holding this object alive, and its calls reach the real object there without owning it
// (so that the real object's last reference never goes on its own thread).
// Threading: any thread; a mutex guards the listener and the real object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "dataplane/backing/shared_object.h"

namespace iscsigw::backing {

class DeferredSharedObject final : public SharedObject,
                                   public std::enable_shared_from_this<DeferredSharedObject> {
 public:
  // Once, when the real object is open.
  void Attach(const std::shared_ptr<SharedObject>& real);

  int Read(std::string* data, uint64_t* version) override;
  int WriteIfVersion(uint64_t version, const std::string& data, uint64_t* out) override;
  int Notify(uint64_t version, const std::string& data, const std::string& events,
             std::chrono::milliseconds timeout, Silent silent) override;
  void Post(std::function<void()> fn) override;
  void Reload() override;
  uint64_t SetListener(Listener listener, std::function<void()> lost) override;
  void ClearListener(uint64_t token) override;

 private:
  std::shared_ptr<SharedObject> Real() const;

  mutable std::mutex mu_;
  std::weak_ptr<SharedObject> real_;  // guarded by mu_
  SharedObject* real_raw_ = nullptr;  // guarded by mu_: what real_ was set to
  Listener listener_;                 // guarded by mu_
  std::function<void()> lost_;        // guarded by mu_
  uint64_t token_ = 0;                // guarded by mu_
  uint64_t real_token_ = 0;           // guarded by mu_: the listener's on the real object
};

}  // namespace iscsigw::backing
