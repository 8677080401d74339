#include "controlplane/state/state_store.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/log.h"
#include "controlplane/state/shared_config.h"
#include "controlplane/state/state_file.h"

namespace iscsigw::state {

namespace {

Status Errno(const std::string& what) {
  return Status(StatusCode::kUnavailable, what + ": " + std::strerror(errno));
}

}  // namespace

namespace internal {
int (*fsync_dir)(int fd) = ::fsync;
}  // namespace internal

Status WriteFileAtomically(const std::string& path, const std::string& contents, int mode,
                           bool* replaced) {
  if (replaced != nullptr) *replaced = false;
  const std::string tmp = path + ".tmp";
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return Errno(tmp + ": unlink");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Errno(tmp + ": open");
  // The umask may have taken bits off; the file gets exactly the mode asked for.
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
    Status s = Errno(tmp + ": chmod");
    ::close(fd);
    return s;
  }
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = Errno(tmp + ": write");
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = Errno(tmp + ": fsync");
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Errno(path + ": rename");
    ::unlink(tmp.c_str());
    return s;
  }
  if (replaced != nullptr) *replaced = true;
  // The rename is durable only once the directory entry is.
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno(dir + ": open");
  const int rc = internal::fsync_dir(dfd);
  ::close(dfd);
  if (rc != 0) return Errno(dir + ": fsync");
  return Status::Ok();
}

Status CheckTrustedDir(const std::string& dir, const struct stat& st, uid_t euid, gid_t egid) {
  auto refuse = [&](const std::string& why) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return FailedPrecondition("state dir " + dir + " (owner " + std::to_string(st.st_uid) + ":" +
                              std::to_string(st.st_gid) + ", mode " + mode + ") " + why +
                              "; it holds CHAP secrets: make it the daemon's own (chown " +
                              std::to_string(euid) + ", chmod 0700)");
  };
  if (!S_ISDIR(st.st_mode)) return refuse("is not a directory");
  const bool ours = st.st_uid == euid || (st.st_uid == 0 && st.st_gid == egid);
  if (!ours) return refuse("is not owned by the daemon's user " + std::to_string(euid));
  if ((st.st_mode & S_IWOTH) != 0) return refuse("is writable by every user");
  if ((st.st_mode & S_IWGRP) != 0 && st.st_gid != egid) {
    return refuse("is writable by group " + std::to_string(st.st_gid) + ", not the daemon's own " +
                  std::to_string(egid));
  }
  return Status::Ok();
}

Status CheckTrustedDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return FailedPrecondition("state dir " + dir + ": " + std::strerror(errno));
  }
  return CheckTrustedDir(dir, st, ::geteuid(), ::getegid());
}

std::string StateToJson(const iscsigw::v1::State& state) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(state, &out, opts);
  return out;
}

Result<iscsigw::v1::State> LoadStateDir(const std::string& dir) {
  const std::string path = dir + "/state.json";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return iscsigw::v1::State();
    return IoError("state file " + path + ": " + std::strerror(errno));
  }
  auto loaded = LoadStateFile(path);
  if (!loaded.ok()) {
    return Status(loaded.status().code(), "state file " + loaded.status().message());
  }
  iscsigw::v1::State st_norm = std::move(loaded).value();
  Normalize(&st_norm);
  auto cfg = ToConfig(st_norm);
  if (!cfg.ok()) {
    return InvalidArgument("state file " + path + ": " + cfg.status().message());
  }
  return st_norm;
}

StateStore::StateStore(std::string dir, iscsigw::v1::State initial, api::Dataplane* dataplane,
                       Limits limits)
    : dir_(std::move(dir)),
      dataplane_(dataplane),
      limits_(limits),
      state_(std::make_shared<const iscsigw::v1::State>(std::move(initial))) {}

StateStore::~StateStore() { StopShared(); }

Status StateStore::Start() {
  std::lock_guard update(update_mu_);
  return Commit(*Snapshot(), nullptr, api::Dataplane::ApplyMode::kStartup);
}

Status StateStore::Commit(const iscsigw::v1::State& next, const iscsigw::v1::State* previous,
                          api::Dataplane::ApplyMode mode, const iscsigw::v1::State* to_file,
                          bool* in_effect) {
  if (in_effect != nullptr) *in_effect = false;
  auto cfg = ToConfig(next);
  if (!cfg.ok()) return cfg.status();
  if (dataplane_ != nullptr) {
    if (Status s = dataplane_->Apply(cfg.value(), mode); !s.ok()) return s;
  }
  bool replaced = false;
  Status written = WriteFileAtomically(path(), StateToJson(to_file != nullptr ? *to_file : next),
                                       0600, &replaced);
  {
    std::lock_guard lock(mu_);
    health_ = written;
  }
  if (!written.ok() && replaced) {
    // The file holds the change (a restart serves it), only its directory entry may not survive
    // a crash: the change stays in effect, and the answer says so, not "nothing changed".
    log::Ctl().error("the state file holds the change but is not durable: {}", written.message());
    if (in_effect != nullptr) *in_effect = true;
    return Status(StatusCode::kIoError,
                  "changed, and in the state file, but not made durable (a crash may lose the "
                  "change): " +
                      written.message());
  }
  if (!written.ok()) {
    log::Ctl().error("cannot persist the state: {}", written.message());
    // Keep the data plane in step with what is on disk.
    if (dataplane_ != nullptr && previous != nullptr) {
      auto old = ToConfig(*previous);
      // The configuration that was running: its LUNs are kept, and an rbd LUN that cannot open
      // now is configured offline rather than failing the roll-back.
      if (old.ok()) (void)dataplane_->Apply(old.value(), api::Dataplane::ApplyMode::kStartup);
    }
    return Status(StatusCode::kUnavailable,
                  "state not saved, nothing changed: " + written.message());
  }
  return Status::Ok();
}

Status StateStore::Update(const std::function<Status(iscsigw::v1::State*)>& edit) {
  // Changes are serialized by update_mu_ alone: applying one may wait for storage (an rbd cluster
  // that does not answer), and readers (Snapshot, health) keep the last committed state meanwhile.
  if (sharing_) {
    Status s = Status::Ok();
    {
      std::lock_guard update(update_mu_);
      s = UpdateShared(edit);
    }
    // Outside update_mu_: a gateway that changes the configuration at the same time is not held
    // up answering this notify.
    NotifyOthers();
    return s;
  }
  std::lock_guard update(update_mu_);
  const auto current = Snapshot();
  iscsigw::v1::State next = *current;
  if (Status s = edit(&next); !s.ok()) return s;
  Normalize(&next);
  if (Status s = CheckLimits(next, *current, limits_); !s.ok()) return s;
  bool in_effect = false;
  if (Status s =
          Commit(next, current.get(), api::Dataplane::ApplyMode::kStrict, nullptr, &in_effect);
      !s.ok()) {
    if (in_effect) Publish(std::move(next));
    return s;
  }
  Publish(std::move(next));
  return Status::Ok();
}

void StateStore::Publish(iscsigw::v1::State next) {
  auto committed = std::make_shared<const iscsigw::v1::State>(std::move(next));
  std::lock_guard lock(mu_);
  state_ = std::move(committed);
  shared_served_ = shared_names_;
}

namespace {

// `st` without the targets named in `names`.
iscsigw::v1::State Without(const iscsigw::v1::State& st, const std::set<std::string>& names) {
  iscsigw::v1::State out = st;
  out.clear_targets();
  for (const auto& t : st.targets()) {
    if (names.count(t.name()) == 0) *out.add_targets() = t;
  }
  return out;
}

}  // namespace

Status StateStore::UpdateShared(const std::function<Status(iscsigw::v1::State*)>& edit,
                                bool move_in) {
  constexpr int kTries = 32;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    const auto current = Snapshot();
    iscsigw::v1::State next = *current;
    if (Status s = edit(&next); !s.ok()) return s;
    Normalize(&next);
    if (Status s = CheckLimits(next, *current, limits_); !s.ok()) return s;
    iscsigw::v1::State local;
    iscsigw::v1::State shared;
    if (Status s = SplitShared(next, shared_names_, shared_copy_, *current, &local, &shared);
        !s.ok()) {
      return s;
    }
    iscsigw::v1::State local_before;
    iscsigw::v1::State shared_before;
    if (Status s = SplitShared(*current, shared_names_, shared_copy_, *current, &local_before,
                               &shared_before);
        !s.ok()) {
      return s;
    }
    // move_in: local rbd targets waiting to move into the object make this a shared change.
    if (SameState(shared, move_in ? shared_copy_ : shared_before)) {
      // The edit left the shared targets alone (and those waiting to move in). The state file
      // keeps every target that is not in the object; a shared target that a deleted local one
      // of its name hid is served again.
      iscsigw::v1::State file = Without(next, shared_names_);
      Merged fin = MergeShared(file, shared_copy_);
      bool in_effect = false;
      Status s =
          Commit(fin.state, current.get(), api::Dataplane::ApplyMode::kStrict, &file, &in_effect);
      if (!s.ok() && !in_effect) return s;
      local_ = std::move(file);
      shared_names_ = std::move(fin.shared);
      Publish(std::move(fin.state));
      return s;
    }
    if (shared_obj_ == nullptr) {
      std::lock_guard lock(mu_);
      return Status(StatusCode::kUnavailable,
                    "the shared configuration in " + shared_where_ +
                        " is not loaded yet: " + shared_status_.message());
    }
    std::string data;
    uint64_t version = 0;
    if (int r = shared_obj_->Read(&data, &version); r < 0) {
      Status failed(StatusCode::kUnavailable, "reading the shared configuration in " +
                                                  shared_where_ + ": " + std::strerror(-r));
      NoteSharedRead(failed);
      shared_obj_->Reload();  // one reread at a time: readiness follows the first that works
      return failed;
    }
    NoteSharedRead(Status::Ok());
    if (version != shared_version_) {  // another gateway changed it: edit that
      if (Status s = Adopt(data, version); !s.ok()) return s;
      continue;
    }
    NoteSharedLoad();
    auto cfg = ToConfig(next);
    if (!cfg.ok()) return cfg.status();
    if (dataplane_ != nullptr) {
      if (Status s = dataplane_->Apply(cfg.value()); !s.ok()) return s;
    }
    auto roll_back = [&] {
      if (dataplane_ == nullptr) return;
      if (auto old = ToConfig(*current); old.ok()) {
        (void)dataplane_->Apply(old.value(), api::Dataplane::ApplyMode::kStartup);
      }
    };
    const std::string out = SharedToData(shared);
    uint64_t written = 0;
    const int w = shared_obj_->WriteIfVersion(version, out, &written);
    if (w == -ECANCELED) {  // another gateway wrote first
      roll_back();
      continue;
    }
    if (w == -EFBIG) {
      roll_back();
      return Status(StatusCode::kResourceExhausted, "the shared configuration in " + shared_where_ +
                                                        " would be " + std::to_string(out.size()) +
                                                        " bytes, past its limit; nothing changed");
    }
    if (w < 0) {
      // The write may or may not have happened (another gateway may even have written on top):
      // only the object can tell. Until it is reread (on its thread) the data plane serves what
      // this gateway had; the reread takes in what the object holds, even at the same version,
      // and tells the others.
      roll_back();
      outcome_unknown_ = true;
      shared_obj_->Post([this] { Refresh(); });
      return Status(StatusCode::kUnavailable,
                    "the shared configuration in " + shared_where_ + " may not have been " +
                        "written (" + std::strerror(-w) +
                        "); this gateway rereads it and serves what it holds: check before trying "
                        "again");
    }
    shared_copy_ = std::move(shared);
    shared_version_ = written;
    NoteSharedVersion();
    Merged fin = MergeShared(local, shared_copy_);
    shared_names_ = std::move(fin.shared);
    if (!SameState(local, local_)) {  // a target moved into the shared configuration
      bool replaced = false;
      Status f = WriteFileAtomically(path(), StateToJson(local), 0600, &replaced);
      if (replaced) {  // the file holds it (durable unless f says otherwise)
        local_ = std::move(local);
      } else {
        // local_ keeps what the file holds: the next change writes it again.
        log::Ctl().error(
            "the state file was not rewritten ({}); the change is in the shared "
            "configuration",
            f.message());
      }
      std::lock_guard lock(mu_);
      health_ = f;
    }
    Publish(std::move(next));
    notify_version_ = written;
    return Status::Ok();
  }
  return Status(StatusCode::kUnavailable,
                "the shared configuration in " + shared_where_ + " was changed by other gateways " +
                    std::to_string(kTries) + " times during this change; try again");
}

void StateStore::NotifyOthers() {
  // Held while this holds a reference to the object: StopShared waits for it, so that the last
  // reference goes there, never on the object's own thread.
  std::lock_guard notifying(notify_mu_);
  uint64_t version = 0;
  std::shared_ptr<api::SharedObject> obj;
  {
    std::lock_guard update(update_mu_);
    version = std::exchange(notify_version_, 0);
    obj = shared_obj_;
  }
  if (version == 0 || obj == nullptr) return;
  // The others acknowledge once they have queued a reread, which they apply within moments.
  if (int n =
          obj->Notify(version, "", "", std::chrono::seconds(5), api::SharedObject::Silent::kReport);
      n < 0) {
    log::Ctl().warn(
        "shared configuration version {}: not every gateway acknowledged it ({}); "
        "they reread it when their watch is back, or within {} s",
        version, std::strerror(-n), kSharedRereadSeconds);
  }
}

Status StateStore::Adopt(const std::string& data, uint64_t version) {
  if (data.empty() && !shared_copy_.targets().empty() && shared_obj_ != nullptr) {
    // The object was removed (or recreated empty): it is written again from this copy rather
    // than every shared target being dropped.
    uint64_t written = 0;
    const int w = shared_obj_->WriteIfVersion(version, SharedToData(shared_copy_), &written);
    log::Ctl().warn("the shared configuration in {} was removed; {}", shared_where_,
                    w == 0 ? "written again from this gateway's copy"
                           : std::string("writing it again failed: ") + std::strerror(-w));
    if (w == 0) {
      shared_version_ = written;
      notify_version_ = written;
      NoteSharedVersion();
      return Status::Ok();
    }
    // Another gateway wrote it again first (its notify follows), or the write failed: either way
    // this gateway keeps what it serves, and rereads.
    shared_obj_->Reload();
    if (w == -ECANCELED) return Status::Ok();
    return Status(StatusCode::kUnavailable,
                  "the shared configuration in " + shared_where_ +
                      " was removed and could not be written again: " + std::strerror(-w));
  }
  auto parsed = SharedFromData(data);
  if (!parsed.ok()) {
    return SharedError(
        Status(StatusCode::kFailedPrecondition,
               "the shared configuration in " + shared_where_ + ": " + parsed.status().message()));
  }
  Merged m = MergeShared(local_, parsed.value());
  auto cfg = ToConfig(m.state);
  if (!cfg.ok()) {
    return SharedError(
        Status(StatusCode::kFailedPrecondition,
               "the shared configuration in " + shared_where_ + ": " + cfg.status().message()));
  }
  if (dataplane_ != nullptr) {
    LogOutOfRemovedTargets(m.state);
    if (Status s = dataplane_->Apply(cfg.value(), api::Dataplane::ApplyMode::kStartup); !s.ok()) {
      return SharedError(
          Status(s.code(), "the shared configuration in " + shared_where_ + ": " + s.message()));
    }
  }
  for (const auto& line : m.skipped) log::Ctl().error("{}", line);
  log::Ctl().info("shared configuration in {}: version {}, {} target(s)", shared_where_, version,
                  parsed.value().targets_size());
  shared_copy_ = std::move(parsed).value();
  shared_version_ = version;
  shared_names_ = std::move(m.shared);
  Publish(std::move(m.state));
  NoteSharedVersion();
  PruneLocal();
  // While attaching, health turns good once Attach has also moved this gateway's targets in.
  if (!attaching_) SetSharedStatus(Status::Ok());
  return Status::Ok();
}

void StateStore::PruneLocal() {
  // A local copy of a target the object has (it gave way to the shared one) would come back if
  // the shared one were deleted: it goes, from memory and from the state file.
  std::set<std::string> gone;
  for (const auto& t : local_.targets()) {
    if (shared_names_.count(t.name()) == 0) continue;
    if (!KindsOf(t).other) gone.insert(t.name());
  }
  if (gone.empty()) return;
  local_ = Without(local_, gone);
  Status f = WriteFileAtomically(path(), StateToJson(local_), 0600);
  if (!f.ok()) log::Ctl().error("the state file was not rewritten: {}", f.message());
  std::lock_guard lock(mu_);
  health_ = f;
}

Status StateStore::SharedError(Status s) {
  log::Ctl().error("{}; this gateway keeps version {}", s.message(), shared_version_);
  SetSharedStatus(s);
  return s;
}

void StateStore::LogOutOfRemovedTargets(const iscsigw::v1::State& next) {
  std::set<std::string> kept;
  for (const auto& t : next.targets()) kept.insert(t.name());
  std::vector<uint16_t> live;
  auto sessions_of_removed = [&] {
    live.clear();
    for (const auto& s : dataplane_->ListSessions()) {
      if (!s.discovery && kept.count(s.target_name) == 0) live.push_back(s.tsih);
    }
    return !live.empty();
  };
  if (!sessions_of_removed()) return;
  // Deleted through another gateway (with force): as there, each initiator is asked to log out
  // (RFC 7143 11.9.1) and given a moment before the target goes.
  log::Ctl().info("shared configuration: {} session(s) of deleted targets asked to log out",
                  live.size());
  for (uint16_t tsih : live) dataplane_->RequestLogout(tsih, kRemovedTargetLogoutWait);
  const auto deadline = std::chrono::steady_clock::now() + kRemovedTargetLogoutWait;
  while (sessions_of_removed() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void StateStore::Refresh() {
  RereadShared();
  NotifyOthers();  // when the object had to be written again
}

void StateStore::RereadShared() {
  std::lock_guard update(update_mu_);
  if (shared_obj_ == nullptr) return;
  std::string data;
  uint64_t version = 0;
  if (int r = shared_obj_->Read(&data, &version); r < 0) {
    log::Ctl().warn("rereading the shared configuration in {}: {}; retrying", shared_where_,
                    std::strerror(-r));
    NoteSharedRead(Status(StatusCode::kUnavailable, "rereading the shared configuration in " +
                                                        shared_where_ + ": " + std::strerror(-r)));
    shared_obj_->Reload();  // retried each second; its read comes back here
    return;
  }
  NoteSharedRead(Status::Ok());
  // A failed adoption is tried again at the next reread, even of the same version.
  bool healthy = false;
  {
    std::lock_guard lock(mu_);
    healthy = shared_status_.ok();
  }
  if (version == shared_version_ && healthy && !outcome_unknown_) {
    NoteSharedLoad();  // what this gateway applied is still the object's content
    return;
  }
  const bool was_unknown = std::exchange(outcome_unknown_, false);
  if (Status s = Adopt(data, version); s.ok() && was_unknown) {
    notify_version_ = shared_version_;  // the write may have happened: the others reread too
  } else if (!s.ok()) {
    outcome_unknown_ = was_unknown;
  }
}

bool StateStore::IsShared(const std::string& target) const {
  std::lock_guard lock(mu_);
  return shared_served_.count(target) != 0;
}

void StateStore::EnableShared(std::string where, SharedOpener open, iscsigw::v1::State redeclared) {
  {
    std::lock_guard update(update_mu_);
    std::lock_guard lock(mu_);
    redeclared_ = std::move(redeclared);
    sharing_ = true;
    shared_where_ = std::move(where);
    shared_status_ = Status(StatusCode::kUnavailable,
                            "the shared configuration in " + shared_where_ + " is not read yet");
    local_ = *state_;
  }
  shared_thread_ = std::thread([this, open = std::move(open)] { SharedLoop(open); });
}

void StateStore::SharedLoop(const SharedOpener& open) {
  auto stopped_after = [this](std::chrono::seconds wait) {
    std::unique_lock lock(stop_mu_);
    return stop_cv_.wait_for(lock, wait, [this] { return stop_; });
  };
  for (;;) {
    auto opened = open();
    Status s = opened.ok() ? Attach(std::move(opened).value()) : opened.status();
    if (s.ok()) break;
    SetSharedStatus(s);
    log::Ctl().warn("shared configuration in {}: {}; trying again in 5 s", shared_where_,
                    s.message());
    if (stopped_after(std::chrono::seconds(5))) return;
  }
  NotifyOthers();
  // A notify this gateway missed (its watch was fine, the notifier died before sending it) or an
  // adoption that failed is caught up here at the latest.
  while (!stopped_after(std::chrono::seconds(kSharedRereadSeconds))) {
    Refresh();
    MoveInPending();
  }
}

void StateStore::MoveInPending() {
  Status s = Status::Ok();
  {
    std::lock_guard update(update_mu_);
    bool pending = false;
    for (const auto& t : local_.targets()) {
      const LunKinds k = KindsOf(t);
      pending |= k.rbd && !k.other && shared_names_.count(t.name()) == 0;
    }
    if (!pending && redeclared_.targets().empty()) return;
    s = MoveIn();
  }
  NotifyOthers();
  if (!s.ok()) {
    log::Ctl().warn(
        "shared configuration in {}: this gateway's rbd targets are not moved in "
        "yet: {}",
        shared_where_, s.message());
  }
}

Status StateStore::Attach(std::shared_ptr<api::SharedObject> obj) {
  std::lock_guard update(update_mu_);
  {
    std::lock_guard lock(stop_mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "stopping");
  }
  attaching_ = true;
  // Listening first, so that no change made after the read below is missed. A notify queues a
  // reread on the object's thread, which waits for this to finish.
  // The listener runs once the watch is back (a reread) or when it brings a change: either way
  // the watch works; until then, after lost(), changes may be missed (shared_health()).
  api::SharedObject* raw = obj.get();
  const uint64_t token = obj->SetListener(
      [this, raw](uint64_t, std::string_view, std::string_view, std::shared_ptr<void>) {
        {
          std::lock_guard lock(mu_);
          watch_lost_ = false;
        }
        raw->Post([this] { Refresh(); });
      },
      [this] {
        std::lock_guard lock(mu_);
        watch_lost_ = true;
      });
  std::string data;
  uint64_t version = 0;
  Status s = Status::Ok();
  if (int r = obj->Read(&data, &version); r < 0) {
    s = Status(StatusCode::kUnavailable, std::string("reading it: ") + std::strerror(-r));
  } else {
    NoteSharedRead(Status::Ok());
    s = Adopt(data, version);
  }
  if (!s.ok()) {
    obj->ClearListener(token);
    attaching_ = false;
    return s;
  }
  {
    std::lock_guard lock(mu_);
    watched_ = obj;
  }
  shared_obj_ = std::move(obj);
  listener_token_ = token;
  if (Status moved = MoveIn(); !moved.ok()) {
    log::Ctl().error(
        "shared configuration in {}: this gateway's rbd targets and changed declarations are not "
        "written to it yet (tried again every {} s): {}",
        shared_where_, kSharedRereadSeconds, moved.message());
  }
  attaching_ = false;
  SetSharedStatus(Status::Ok());
  return Status::Ok();
}

Status StateStore::MoveIn() {
  // This gateway's rbd targets move into the object. A declaration the bootstrap changed since
  // this gateway's last start is applied to the object's copy as it would be to a local target
  // (MergeBootstrap against the previous declaration): what the API did stays.
  Status s = UpdateShared(
      [this](iscsigw::v1::State* st) {
        if (redeclared_.targets().empty()) return Status::Ok();
        iscsigw::v1::State scratch = *st;
        *scratch.mutable_bootstrap() = redeclared_.bootstrap();
        iscsigw::v1::State decl;
        *decl.mutable_targets() = redeclared_.targets();
        auto lines = MergeBootstrap(decl, &scratch);
        if (!lines.ok()) return lines.status();
        for (const auto& line : lines.value()) log::Ctl().info("shared configuration: {}", line);
        *st->mutable_targets() = scratch.targets();
        return Status::Ok();
      },
      /*move_in=*/true);
  if (s.ok()) redeclared_.Clear();
  return s;
}

void StateStore::SetSharedStatus(Status s) {
  std::lock_guard lock(mu_);
  shared_status_ = std::move(s);
}

void StateStore::NoteSharedRead(const Status& read) {
  std::lock_guard lock(mu_);
  shared_read_ = read;
}

void StateStore::NoteSharedVersion() {
  std::lock_guard lock(mu_);
  shared_loaded_ = true;
  shared_served_version_ = shared_version_;
  shared_last_load_ = std::chrono::system_clock::now();
}

void StateStore::NoteSharedLoad() {
  std::lock_guard lock(mu_);
  shared_last_load_ = std::chrono::system_clock::now();
}

Status WatchStatus(const std::string& where, bool lost, int check) {
  if (lost) {
    return Status(StatusCode::kUnavailable,
                  "the watch on the shared configuration in " + where +
                      " was lost: changes made through other gateways may be missed");
  }
  if (check < 0) {
    return Status(StatusCode::kUnavailable, "the watch on the shared configuration in " + where +
                                                " is broken: " + std::strerror(-check));
  }
  if (std::chrono::milliseconds(check) > StateStore::kWatchStaleAfter) {
    return Status(StatusCode::kUnavailable,
                  "the cluster has not confirmed the watch on the shared configuration in " +
                      where + " for " + std::to_string(check / 1000) + " s");
  }
  return Status::Ok();
}

StateStore::SharedHealth StateStore::shared_health() const {
  SharedHealth h;
  std::shared_ptr<api::SharedObject> watched;
  bool lost = false;
  {
    std::lock_guard lock(mu_);
    if (!sharing_) return h;
    h.enabled = true;
    h.loaded = shared_loaded_;
    h.version = shared_served_version_;
    h.last_load = shared_last_load_;
    if (!shared_loaded_) {
      h.status = shared_status_.ok()
                     ? Status(StatusCode::kUnavailable,
                              "the shared configuration in " + shared_where_ + " is not read yet")
                     : shared_status_;
      return h;
    }
    if (!shared_read_.ok()) {
      h.status = shared_read_;
      return h;
    }
    // A version that was read but could not be taken in (it does not parse, validate or apply):
    // this gateway serves an older one until a later version applies.
    if (!shared_status_.ok()) {
      h.status = shared_status_;
      return h;
    }
    lost = watch_lost_;
    watched = watched_;
  }
  // Outside mu_: the object answers from what its client knows, without asking the cluster.
  h.status = WatchStatus(shared_where_, lost, watched != nullptr ? watched->WatchCheck() : 0);
  return h;
}

void StateStore::StopShared() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (shared_thread_.joinable()) shared_thread_.join();
  std::shared_ptr<api::SharedObject> obj;
  uint64_t token = 0;
  {
    std::lock_guard update(update_mu_);
    obj = std::move(shared_obj_);
    token = listener_token_;
  }
  {
    std::lock_guard lock(mu_);
    watched_.reset();
  }
  if (obj == nullptr) return;
  { std::lock_guard notifying(notify_mu_); }  // a notify under way has let go of the object
  obj->ClearListener(token);
  obj.reset();  // its thread stops; a reread queued there does not run
}

std::shared_ptr<const iscsigw::v1::State> StateStore::Snapshot() const {
  std::lock_guard lock(mu_);
  return state_;
}

iscsigw::v1::State StateStore::Get() const { return *Snapshot(); }

Status StateStore::ProbeDir() {
  // The probe goes through the same atomic write as the state (temp file, fsync, rename, fsync of
  // the directory), to a name of its own.
  const std::string probe = dir_ + "/.health-probe";
  Status s = WriteFileAtomically(probe, "ok\n", 0600);
  if (s.ok() && ::unlink(probe.c_str()) != 0 && errno != ENOENT) {
    s = IoError("unlink " + probe + ": " + std::strerror(errno));
  }
  std::lock_guard lock(mu_);
  if (s.ok() != probe_.ok()) {
    if (s.ok()) {
      log::Ctl().info("state directory {} is writable again", dir_);
    } else {
      log::Ctl().error("state directory {} cannot be written: {}", dir_, s.message());
    }
  }
  probe_ = s;
  // A failed write changed nothing (memory, disk and data plane agree): once the directory can be
  // written again, the store is whole again.
  if (s.ok()) health_ = s;
  return s;
}

bool StateStore::dir_writable() const {
  std::lock_guard lock(mu_);
  return probe_.ok();
}

Status StateStore::health() const {
  std::lock_guard lock(mu_);
  if (!health_.ok()) return health_;
  if (!probe_.ok()) return probe_;
  return sharing_ ? shared_status_ : Status::Ok();
}

}  // namespace iscsigw::state
