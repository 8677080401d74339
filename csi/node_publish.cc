// NodePublishVolume and NodeUnpublishVolume (csi/node_service.h): bind mounts of the staging
// mount (mount access) or of the device (block access) at kubelet's target path.
#include <string>
#include <vector>

#include "csi/node_checks.h"
#include "csi/node_host.h"
#include "csi/node_service.h"
#include "csi/strings.h"

namespace iscsigw::csi {

grpc::ServerUnaryReactor* NodeService::NodePublishVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodePublishVolumeRequest* req,
    ::csi::v1::NodePublishVolumeResponse*) {
  Status checked;
  if (req->volume_id().empty()) {
    checked = InvalidArgument("volume_id is required");
  } else if (req->staging_target_path().empty()) {
    checked = InvalidArgument("staging_target_path is required (the plugin stages volumes)");
  } else if (checked = CheckPath("staging_target_path", req->staging_target_path()); checked.ok()) {
    checked = CheckPath("target_path", req->target_path());
  }
  if (checked.ok()) {
    checked = CheckCapability(req->volume_capability(), req->has_volume_capability());
  }
  return Serve(ctx, "NodePublishVolume", req->volume_id(), checked,
               [this, req]() -> Result<std::string> {
                 if (Status s = Publish(*req); !s.ok()) return s;
                 return "at " + req->target_path() + (req->readonly() ? " (ro)" : "");
               });
}

Status NodeService::Publish(const ::csi::v1::NodePublishVolumeRequest& req) {
  const std::string& target = req.target_path();
  auto mounted = host_->MountedAt(target);
  if (!mounted.ok()) return mounted.status();
  const bool ro = req.readonly() || ReadOnly(req.volume_capability());
  const std::string want = std::string(ro ? " (ro)" : " (rw)");
  std::vector<std::string> mount = {"mount", "--bind"};
  if (ro) mount.insert(mount.end(), {"-o", "ro"});
  if (req.volume_capability().has_block()) {
    auto rec = records_.Load(req.volume_id());
    if (!rec.ok()) return rec.status();
    if (!rec.value() || rec.value()->device.empty()) {
      return FailedPrecondition("volume " + req.volume_id() +
                                " is not staged on this node (NodeStageVolume first)");
    }
    const std::string& device = rec.value()->device;
    if (mounted.value()) {
      // Published before, or something else is there: a device node bound onto the file
      // shows in findmnt as devtmpfs[/sdX], so the device numbers tell which.
      auto same = host_->SameDevice(device, target);
      if (!same.ok()) return same.status();
      if (same.value() && mounted.value()->read_only == ro) return Status::Ok();
      return AlreadyExists("target_path " + target + " has " + mounted.value()->Describe() +
                           " mounted, not volume " + req.volume_id() + "'s " + device + want);
    }
    if (auto r = host_->Check({"mkdir", "-p", "--", Dirname(target)}); !r.ok()) return r.status();
    if (auto r = host_->Check({"touch", "--", target}); !r.ok()) return r.status();
    mount.insert(mount.end(), {rec.value()->device, target});
    return host_->Check(mount).status();
  }
  auto staged = host_->MountedAt(req.staging_target_path());
  if (!staged.ok()) return staged.status();
  if (!staged.value()) {
    return FailedPrecondition("volume " + req.volume_id() + ": nothing is mounted at " +
                              req.staging_target_path() + " (NodeStageVolume first)");
  }
  if (mounted.value()) {
    // A bind of the staging mount shows the same source; a bind of another file system, or of
    // a directory inside this one (source[/dir]), does not.
    if (mounted.value()->source == staged.value()->source && mounted.value()->read_only == ro) {
      return Status::Ok();
    }
    return AlreadyExists("target_path " + target + " has " + mounted.value()->Describe() +
                         " mounted, not volume " + req.volume_id() + "'s staging mount of " +
                         staged.value()->source + want);
  }
  if (auto r = host_->Check({"mkdir", "-p", "--", target}); !r.ok()) return r.status();
  mount.insert(mount.end(), {req.staging_target_path(), target});
  return host_->Check(mount).status();
}

grpc::ServerUnaryReactor* NodeService::NodeUnpublishVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeUnpublishVolumeRequest* req,
    ::csi::v1::NodeUnpublishVolumeResponse*) {
  Status checked = req->volume_id().empty() ? InvalidArgument("volume_id is required")
                                            : CheckPath("target_path", req->target_path());
  return Serve(ctx, "NodeUnpublishVolume", req->volume_id(), checked,
               [this, req]() -> Result<std::string> {
                 if (Status s = Unpublish(*req); !s.ok()) return s;
                 return req->target_path() + " removed";
               });
}

Status NodeService::Unpublish(const ::csi::v1::NodeUnpublishVolumeRequest& req) {
  auto mounted = host_->MountedAt(req.target_path());
  if (!mounted.ok()) return mounted.status();
  if (mounted.value()) {
    if (auto r = host_->Check({"umount", "--", req.target_path()}); !r.ok()) return r.status();
  }
  // An empty directory (mount) or the file a block device was bound onto; anything with content
  // is not ours to delete, and rm -d refuses it.
  return host_->Check({"rm", "-df", "--", req.target_path()}).status();
}

}  // namespace iscsigw::csi
