#include "controlplane/state/state_store.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "controlplane/state/state_file.h"
#include "dataplane/base/log.h"

namespace iscsigw::state {

namespace {

Status Errno(const std::string& what) {
  return Status(StatusCode::kUnavailable, what + ": " + std::strerror(errno));
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::string& contents, int mode) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Errno(tmp + ": open");
  // An existing temp file keeps its old mode through O_CREAT; secrets need the mode we ask for.
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
  // The rename is durable only once the directory entry is.
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno(dir + ": open");
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return Errno(dir + ": fsync");
  return Status::Ok();
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

Status StateStore::Start() {
  std::lock_guard update(update_mu_);
  return Commit(*Snapshot(), nullptr, api::Dataplane::ApplyMode::kStartup);
}

Status StateStore::Commit(const iscsigw::v1::State& next, const iscsigw::v1::State* previous,
                          api::Dataplane::ApplyMode mode) {
  auto cfg = ToConfig(next);
  if (!cfg.ok()) return cfg.status();
  if (dataplane_ != nullptr) {
    if (Status s = dataplane_->Apply(cfg.value(), mode); !s.ok()) return s;
  }
  Status written = WriteFileAtomically(path(), StateToJson(next), 0600);
  {
    std::lock_guard lock(mu_);
    health_ = written;
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
  std::lock_guard update(update_mu_);
  const auto current = Snapshot();
  iscsigw::v1::State next = *current;
  if (Status s = edit(&next); !s.ok()) return s;
  Normalize(&next);
  if (Status s = CheckLimits(next, *current, limits_); !s.ok()) return s;
  if (Status s = Commit(next, current.get()); !s.ok()) return s;
  auto committed = std::make_shared<const iscsigw::v1::State>(std::move(next));
  std::lock_guard lock(mu_);
  state_ = std::move(committed);
  return Status::Ok();
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

Status StateStore::health() const {
  std::lock_guard lock(mu_);
  return health_.ok() ? probe_ : health_;
}

}  // namespace iscsigw::state
