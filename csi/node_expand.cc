// NodeExpandVolume (csi/node_service.h): each session rescanned, the multipath map resized, then
// the file system grown.
#include <string>
#include <thread>

#include "csi/node_checks.h"
#include "csi/node_host.h"
#include "csi/node_service.h"

namespace iscsigw::csi {

grpc::ServerUnaryReactor* NodeService::NodeExpandVolume(
    grpc::CallbackServerContext* ctx, const ::csi::v1::NodeExpandVolumeRequest* req,
    ::csi::v1::NodeExpandVolumeResponse* resp) {
  Status checked = req->volume_id().empty() ? InvalidArgument("volume_id is required")
                                            : CheckPath("volume_path", req->volume_path());
  return Serve(ctx, "NodeExpandVolume", req->volume_id(), checked,
               [this, req, resp]() -> Result<std::string> {
                 auto size = Expand(*req);
                 if (!size.ok()) return size.status();
                 resp->set_capacity_bytes(size.value());
                 return std::to_string(size.value()) + " bytes";
               });
}

Result<int64_t> NodeService::Expand(const ::csi::v1::NodeExpandVolumeRequest& req) {
  auto loaded = records_.Load(req.volume_id());
  if (!loaded.ok()) return loaded.status();
  if (!loaded.value() || loaded.value()->device.empty()) {
    return NotFound("volume " + req.volume_id() + " is not staged on this node");
  }
  const VolumeRecord& rec = *loaded.value();
  for (const auto& address : rec.addresses) {
    if (auto r =
            host_->Check({"iscsiadm", "-m", "node", "-T", rec.target_iqn, "-p", address, "-R"});
        !r.ok()) {
      return r.status();
    }
  }
  if (!rec.multipath_map.empty()) {
    if (auto r = host_->Check({"multipathd", "resize", "map", rec.multipath_map}); !r.ok()) {
      return r.status();
    }
  }
  // The rescan is done when iscsiadm returns; the size is polled for only in case a path's
  // capacity change reaches the map a moment later.
  const int64_t want = req.capacity_range().required_bytes();
  const auto deadline = Clock::now() + options_.attach_timeout;
  int64_t size = 0;
  for (;;) {
    auto got = host_->SizeOf(rec.device);
    if (!got.ok()) return got.status();
    size = got.value();
    if (size >= want) break;
    if (Clock::now() >= deadline) {
      return Internal("volume " + req.volume_id() + ": " + rec.device + " is " +
                      std::to_string(size) + " bytes after the rescan, not the " +
                      std::to_string(want) + " asked for");
    }
    std::this_thread::sleep_for(options_.poll_interval);
  }
  const bool block = req.has_volume_capability() ? req.volume_capability().has_block() : rec.block;
  if (block) return size;
  // xfs grows through a mount point; the published path is one.
  if (Status s = host_->GrowFileSystem(rec.fs_type, rec.device, req.volume_path()); !s.ok()) {
    return s;
  }
  return size;
}

}  // namespace iscsigw::csi
