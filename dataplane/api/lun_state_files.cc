#include "dataplane/api/lun_state_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "base/log.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/gateway.h"
#include "dataplane/iscsi/session.h"
#include "dataplane/iscsi/task_drain.h"

namespace iscsigw::api {

namespace {

int FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

std::string DirOf(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

struct LunStateFiles::Shared {
  std::string dir;
  PostFn post;
  boost::asio::thread_pool writer{1};  // one thread: files are written one at a time
  std::once_flag dir_made;
  int dir_err = 0;
};

namespace {

class FileStore final : public scsi::LunStateStore, public std::enable_shared_from_this<FileStore> {
 public:
  FileStore(std::shared_ptr<LunStateFiles::Shared> shared, std::string path)
      : shared_(std::move(shared)), path_(std::move(path)) {}

  std::string Load() override;
  void Save(uint64_t seq, std::string blob, unsigned slot, backing::IoCompletion done) override;
  // Removes the file and drops every later Save (LunStateFiles::Remove).
  void Retire();

 private:
  std::shared_ptr<LunStateFiles::Shared> shared_;
  const std::string path_;
  uint64_t written_seq_ = 0;  // writer thread only
  bool retired_ = false;      // writer thread only
};

}  // namespace

LunStateFiles::LunStateFiles(std::string dir, PostFn post) : shared_(std::make_shared<Shared>()) {
  shared_->dir = std::move(dir);
  shared_->post = std::move(post);
}

LunStateFiles::~LunStateFiles() { Stop(); }

void LunStateFiles::Stop() { shared_->writer.join(); }

std::shared_ptr<scsi::LunStateStore> LunStateFiles::ForLun(const std::string& target,
                                                           uint32_t lun) {
  // Target names are iSCSI names (a-z 0-9 . - :, RFC 7143 4.2.7), safe in a file name.
  return std::make_shared<FileStore>(shared_,
                                     shared_->dir + "/" + target + ".lun" + std::to_string(lun));
}

int LunStateFiles::WriteAtomically(const std::string& path, const std::string& blob) {
  const std::string dir = DirOf(path);
  if (blob.empty()) {
    if (::unlink(path.c_str()) != 0) return errno == ENOENT ? 0 : errno;
    return FsyncDir(dir);
  }
  // Always a new temp file: a link planted under its name is never followed.
  const std::string tmp = path + ".tmp";
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return errno;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  size_t off = 0;
  int err = 0;
  while (off < blob.size()) {
    const ssize_t n = ::write(fd, blob.data() + off, blob.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    off += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return err;
  }
  return FsyncDir(dir);
}

std::string FileStore::Load() {
  written_seq_ = 0;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void FileStore::Save(uint64_t seq, std::string blob, unsigned slot, backing::IoCompletion done) {
  auto self = shared_from_this();
  boost::asio::post(shared_->writer, [self, seq, blob = std::move(blob), slot, done] {
    LunStateFiles::Shared& sh = *self->shared_;
    std::call_once(sh.dir_made, [&sh] {
      if (::mkdir(sh.dir.c_str(), 0700) != 0 && errno != EEXIST) sh.dir_err = errno;
      if (sh.dir_err == 0) sh.dir_err = FsyncDir(DirOf(sh.dir));
    });
    int err = sh.dir_err;
    if (self->retired_) {
      err = 0;  // the LUN is gone; its state goes with it
    } else if (err == 0 && seq > self->written_seq_) {
      err = LunStateFiles::WriteAtomically(self->path_, blob);
      if (err == 0) self->written_seq_ = seq;
    }
    if (err != 0) {
      log::Scsi().error("LUN state {}: cannot write: {}", self->path_, std::strerror(err));
    }
    sh.post(slot, [done, err] { done(err); });
  });
}

void FileStore::Retire() {
  auto self = shared_from_this();
  boost::asio::post(shared_->writer, [self] {
    self->retired_ = true;
    if (const int err = LunStateFiles::WriteAtomically(self->path_, ""); err != 0) {
      log::Scsi().error("LUN state {}: cannot remove: {}", self->path_, std::strerror(err));
    }
  });
}

void LunStateFiles::Remove(const std::shared_ptr<scsi::LunStateStore>& store) {
  if (auto file = std::dynamic_pointer_cast<FileStore>(store)) file->Retire();
}

// A drain that releases `until_ended` (null: none) once every session's job that holds it has run
// and every task it aborted with store I/O in flight has completed.
std::shared_ptr<iscsi::TaskDrain> GatewayTaskAborter::DrainReleasing(
    std::shared_ptr<void> until_ended) {
  if (!until_ended) return nullptr;
  return iscsi::TaskDrain::Create(gateway_.pool().context(0),
                                  [hold = std::move(until_ended)]() mutable { hold.reset(); });
}

void GatewayTaskAborter::ClearTaskSet(scsi::Lun& lun, std::shared_ptr<void> until_ended) {
  gateway_.ClearTaskSet(target_, lun.shared_from_this(), nullptr,
                        DrainReleasing(std::move(until_ended)));
}

void GatewayTaskAborter::AbortTasks(uint64_t lun_id, const std::vector<scsi::NexusMatch>& who,
                                    const scsi::Nexus* except, std::shared_ptr<void> until_ended) {
  std::shared_ptr<iscsi::TaskDrain> drain = DrainReleasing(std::move(until_ended));
  gateway_.ForEachSession(target_, [lun_id, who, except, drain](iscsi::Session& s) {
    if (&s.nexus() == except) return;
    for (const auto& m : who) {
      if (m.Matches(s.nexus())) {
        s.AbortTasks(lun_id, drain);
        return;
      }
    }
  });
}

}  // namespace iscsigw::api
