#include "dataplane/api/lun_reopen.h"

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>
#include <utility>

#include "base/log.h"
#include "dataplane/api/instrumented_store.h"
#include "dataplane/iscsi/session.h"
#include "dataplane/iscsi/task_drain.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::api {

namespace asio = boost::asio;

bool SameBacking(const LunSpec& a, const LunSpec& b) {
  return a.backing == b.backing && a.path == b.path && a.rbd == b.rbd &&
         a.size_bytes == b.size_bytes && a.block_size == b.block_size &&
         a.physical_block_size == b.physical_block_size && a.read_only == b.read_only &&
         a.direct == b.direct && a.serial == b.serial && a.device_id == b.device_id &&
         a.fault == b.fault;
}

bool IsReopen(const LunSpec& was, const LunSpec& now) {
  LunSpec same = now;
  same.size_bytes = was.size_bytes;
  same.read_only = was.read_only;
  same.direct = was.direct;
  same.fault = was.fault;
  return now.size_bytes >= was.size_bytes && SameBacking(was, same);
}

namespace {

InstrumentedStore& Handle(scsi::Lun& lun) { return static_cast<InstrumentedStore&>(lun.store()); }

// Runs an empty job through every reactor and waits for all of them (up to `deadline`): whatever
// a reactor was doing when this was called (a store's completion returning, a command making its
// store call) has finished by then.
bool ThroughEveryReactor(const ReopenContext& ctx, std::chrono::steady_clock::time_point deadline) {
  auto passed = std::make_shared<std::promise<void>>();
  std::future<void> done = passed->get_future();
  {
    std::shared_ptr<void> last(nullptr, [passed](void*) { passed->set_value(); });
    for (unsigned i = 0; i < ctx.pool.size(); ++i) {
      asio::post(ctx.pool.context(i), [last] {});
    }
  }
  return done.wait_until(deadline) == std::future_status::ready;
}

// Every call made to the LUN's store before it closed has ended: each session's tasks for the LUN
// (and EXTENDED COPY tasks, which may write it from another LUN) whose store I/O is in flight hold
// a drain, which a job on each session's reactor attaches after the close (a command being
// executed there has made its call by then); then the SYNCHRONIZE CACHE (IMMED) flushes still in
// flight; then a job through every reactor, so that no completion of the old store is still
// returning.
bool DrainEverything(const ReopenContext& ctx, scsi::Lun& lun,
                     std::chrono::steady_clock::time_point deadline) {
  auto ended = std::make_shared<std::promise<void>>();
  std::future<void> done = ended->get_future();
  {
    auto drain = iscsi::TaskDrain::Create(ctx.pool.context(0), [ended] { ended->set_value(); });
    ctx.gateway.ForEachSession(
        "", [drain, id = lun.id()](iscsi::Session& s) { s.DrainTasks(id, drain); });
    for (unsigned i = 0; i < ctx.pool.size(); ++i) {
      asio::post(ctx.pool.context(i), [drain] {});
    }
  }
  if (done.wait_until(deadline) != std::future_status::ready) return false;
  while (lun.detached_flushes() != 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ThroughEveryReactor(ctx, deadline);
}

// Flushes `store` on reactor 0 (its calls belong to the reactors): its error, or ETIMEDOUT when
// it has not ended by `deadline`. The completion lets go of the store before it reports, so
// that the store's last reference never goes inside its own completion.
int FlushOnReactor(const ReopenContext& ctx, const std::shared_ptr<backing::BackingStore>& store,
                   std::chrono::steady_clock::time_point deadline) {
  struct Wait {
    std::promise<int> result;
    std::shared_ptr<backing::BackingStore> keep;  // the flush may end after a timed-out wait
  };
  auto* wait = new Wait{{}, store};
  std::future<int> result = wait->result.get_future();
  asio::post(ctx.pool.context(0), [wait] {
    backing::BackingStore& s = *wait->keep;
    s.Flush(0, backing::IoCompletion{[](void* c, int err) {
                                       auto* w = static_cast<Wait*>(c);
                                       w->keep.reset();
                                       std::promise<int> r = std::move(w->result);
                                       delete w;
                                       r.set_value(err);
                                     },
                                     wait});
  });
  if (result.wait_until(deadline) != std::future_status::ready) return ETIMEDOUT;
  return result.get();
}

// The medium under `store`, without the fault wrapper.
std::shared_ptr<backing::BackingStore> Medium(std::shared_ptr<backing::BackingStore> store) {
  if (auto* f = dynamic_cast<backing::FaultStore*>(store.get())) return f->inner();
  return store;
}

std::shared_ptr<backing::BackingStore> Wrapped(const ReopenContext& ctx, const LunSpec& spec,
                                               std::shared_ptr<backing::BackingStore> medium) {
  if (!spec.fault.active()) return medium;
  return std::make_shared<backing::FaultStore>(std::move(medium), spec.fault, ctx.defer);
}

}  // namespace

bool LeftClosed(scsi::Lun& lun) { return Handle(lun).closed(); }

Status ReopenLun(const ReopenContext& ctx, scsi::Lun& lun, const LunSpec& was, const LunSpec& now,
                 const std::string& who) {
  InstrumentedStore& handle = Handle(lun);
  const auto sanitizing = [&lun] {
    return lun.sanitize().mode() != scsi::SanitizeState::Mode::kIdle;
  };
  const std::string sanitize_refused =
      who + "a SANITIZE is in progress or failed; change the LUN once it has completed";
  std::shared_ptr<backing::BackingStore> old;
  if (!handle.closed()) {
    if (sanitizing()) return FailedPrecondition(sanitize_refused);
    if (handle.ready() != 0) {
      // An rbd image not open yet (OfflineRbdStore) retries in the background; a reopen would
      // have nothing to open either.
      return FailedPrecondition(who + "offline (" + handle.offline_reason() +
                                "); change it once it is online");
    }
    const auto deadline = std::chrono::steady_clock::now() + ctx.bound;
    const std::string bound = std::to_string(ctx.bound.count()) + " ms";
    handle.Close(who + "its store is being reopened with new settings");
    if (!DrainEverything(ctx, lun, deadline)) {
      handle.Reopen();  // a call may still be under way in the old store: it stays
      return Status(StatusCode::kUnavailable,
                    who + "commands in flight did not end within " + bound + "; nothing changed");
    }
    if (sanitizing()) {
      // Started (IMMED) between the check and the close: its background work may still be
      // calling the old store, which therefore stays.
      handle.Reopen();
      return FailedPrecondition(sanitize_refused);
    }
    old = handle.TakeInner();
    // What the old store acknowledged reaches the medium before it closes, or every I_T nexus
    // hears of a write error at its next SYNCHRONIZE CACHE.
    const int err = FlushOnReactor(ctx, old, deadline);
    if (err == ETIMEDOUT) {
      handle.Install(std::move(old));
      return Status(StatusCode::kUnavailable,
                    who + "the store's flush timed out (within " + bound + "); nothing changed");
    }
    if (err != 0 && err != ENOTCONN) {  // ENOTCONN: never connected, nothing written
      lun.NoteWriteError();
      log::Ctl().error("{}flushing the store before reopening it: {}", who, std::strerror(err));
    }
    // The flush's completion has returned on its reactor.
    (void)ThroughEveryReactor(ctx, deadline + ctx.bound);
  }
  const bool file_or_rbd = now.backing == BackingKind::kFile || now.backing == BackingKind::kRbd;
  const bool new_medium =
      old == nullptr ||
      (file_or_rbd && (now.read_only != was.read_only || now.direct != was.direct));
  const bool was_read_only = lun.read_only();
  Status failed = Status::Ok();
  if (new_medium) {
    // Never two stores on one medium: the old one goes (with the shared object it owns) first.
    if (lun.shared_reservations()) lun.DetachShared();
    old.reset();
    auto opened = ctx.open(now);
    if (!opened.ok()) {
      failed = opened.status();
      log::Ctl().error("{}reopening with the new settings: {}; opening it as it was", who,
                       failed.message());
      opened = ctx.open(was);
      if (!opened.ok()) {
        const std::string why = who + "offline: reopening it failed (" + failed.message() +
                                "), and so did opening it as it was (" + opened.status().message() +
                                ")";
        handle.SetReason(why);  // it stays closed, saying why
        log::Ctl().critical("{}", why);
        return Status(failed.code(), why);
      }
    }
    const LunSpec& in_effect = failed.ok() ? now : was;
    // Write protection first: no write reaches a store opened read-only.
    lun.set_read_only(in_effect.read_only);
    handle.Install(Wrapped(ctx, in_effect, opened.value().store));
    if (opened.value().shared != nullptr) lun.AttachShared(opened.value().shared);
  } else {
    lun.set_read_only(now.read_only);
    handle.Install(Wrapped(ctx, now, Medium(std::move(old))));
  }
  if (lun.read_only() != was_read_only) {
    lun.RaiseUnitAttention(scsi::UnitAttention{scsi::Asc::kModeParametersChanged.asc,
                                               scsi::Asc::kModeParametersChanged.ascq},
                           nullptr);
  }
  if (!failed.ok()) {
    return Status(failed.code(), who + failed.message() + "; the LUN serves as it was");
  }
  log::Ctl().info("{}store reopened{}{}", who, now.read_only ? ", read-only" : ", read-write",
                  now.direct ? ", direct" : "");
  return Status::Ok();
}

}  // namespace iscsigw::api
