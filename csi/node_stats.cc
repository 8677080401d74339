// NodeGetVolumeStats (csi/node_service.h): statvfs or BLKGETSIZE64 of kubelet's path, on a thread
// of its own per call and answered DEADLINE_EXCEEDED when it hangs.
#include <fcntl.h>
#include <grpcpp/alarm.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "base/log.h"
#include "csi/node_checks.h"
#include "csi/node_service.h"
#include "rpc/grpc_util.h"

namespace iscsigw::csi {

using ::csi::v1::VolumeUsage;

// One NodeGetVolumeStats call, shared by its probe thread and its alarm: the first of the two
// answers it, and the other then leaves reactor and resp alone (both die with the call).
struct NodeService::StatsCall {
  StatsCall(grpc::ServerUnaryReactor* r, ::csi::v1::NodeGetVolumeStatsResponse* out)
      : reactor(r), resp(out) {}

  void Answer(const grpc::Status& status, const ::csi::v1::NodeGetVolumeStatsResponse* with) {
    std::lock_guard lock(mu);
    if (answered) return;
    answered = true;
    if (with != nullptr) *resp = *with;
    reactor->Finish(status);
  }

  std::mutex mu;
  bool answered = false;  // protected by mu
  grpc::ServerUnaryReactor* const reactor;
  ::csi::v1::NodeGetVolumeStatsResponse* const resp;
  grpc::Alarm alarm;
};

grpc::ServerUnaryReactor* NodeService::NodeGetVolumeStats(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeGetVolumeStatsRequest* req,
    ::csi::v1::NodeGetVolumeStatsResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  Status bad = req->volume_id().empty() ? InvalidArgument("volume_id is required")
                                        : CheckPath("volume_path", req->volume_path());
  if (!bad.ok()) {
    reactor->Finish(rpc::ToGrpcStatus(bad));
    return reactor;
  }
  if (stats_probes_->fetch_add(1) >= options_.max_stats_probes) {
    stats_probes_->fetch_sub(1);
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 std::to_string(options_.max_stats_probes) +
                                     " volume stats calls have not returned (hung mounts?)"));
    return reactor;
  }
  auto call = std::make_shared<StatsCall>(reactor, resp);
  const std::string path = req->volume_path();
  const auto deadline =
      std::min(ctx->deadline(), std::chrono::system_clock::now() + options_.stats_timeout);
  call->alarm.Set(deadline, [weak = std::weak_ptr<StatsCall>(call), path,
                             volume = req->volume_id()](bool fired) {
    auto c = weak.lock();
    if (!fired || !c) return;
    log::Ctl().warn("NodeGetVolumeStats {}: {} did not answer in time", volume, path);
    c->Answer(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                           "statvfs of " + path + " did not return in time (a hung mount?)"),
              nullptr);
  });
  auto probe = [call, path, stat = stat_volume_, probes = stats_probes_] {
    auto got = stat(path);
    // The probe has returned: its slot is free before the caller hears of it, so that a next
    // call never finds it still counted among the hung ones.
    probes->fetch_sub(1);
    if (!got.ok()) {
      call->Answer(rpc::ToGrpcStatus(got.status()), nullptr);
    } else {
      ::csi::v1::NodeGetVolumeStatsResponse out;
      const VolumeStats& v = got.value();
      auto* bytes = out.add_usage();
      bytes->set_unit(VolumeUsage::BYTES);
      bytes->set_total(v.bytes_total);
      if (!v.block) {
        bytes->set_available(v.bytes_available);
        bytes->set_used(v.bytes_used);
        auto* inodes = out.add_usage();
        inodes->set_unit(VolumeUsage::INODES);
        inodes->set_total(v.inodes_total);
        inodes->set_available(v.inodes_available);
        inodes->set_used(v.inodes_used);
      }
      call->Answer(grpc::Status::OK, &out);
    }
  };
  try {
    std::thread(std::move(probe)).detach();
  } catch (const std::system_error& e) {
    stats_probes_->fetch_sub(1);
    call->Answer(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              std::string("no thread for a stats call: ") + e.what()),
                 nullptr);
  }
  return reactor;
}

Result<VolumeStats> StatVolumePath(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotFound("volume_path " + path + " does not exist");
    return Internal("stat " + path + ": " + std::strerror(err));
  }
  VolumeStats v;
  if (S_ISBLK(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Internal("open " + path + ": " + std::strerror(errno));
    uint64_t bytes = 0;
    const int rc = ::ioctl(fd, BLKGETSIZE64, &bytes);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return Internal("BLKGETSIZE64 " + path + ": " + std::strerror(err));
    v.block = true;
    v.bytes_total = static_cast<int64_t>(bytes);
    return v;
  }
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0) {
    return Internal("statvfs " + path + ": " + std::strerror(errno));
  }
  v.bytes_total = static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize);
  v.bytes_available = static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize);
  v.bytes_used = static_cast<int64_t>((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize);
  v.inodes_total = static_cast<int64_t>(vfs.f_files);
  v.inodes_available = static_cast<int64_t>(vfs.f_favail);
  v.inodes_used = static_cast<int64_t>(vfs.f_files - vfs.f_ffree);
  return v;
}

}  // namespace iscsigw::csi
