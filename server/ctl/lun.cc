// iscsigwctl lun create|get|list|resize|delete.
#include <cstdio>
#include <memory>
#include <string>

#include "server/ctl/commands.h"
#include "server/ctl/output.h"
#include "server/ctl/parse.h"

namespace iscsigw::ctl {
namespace {

struct LunArgs {
  std::string target, backing = "ram", path, size, from_snapshot, from_lun, request_id;
  std::string pool, image, namespace_, ceph_conf, client_id, keyring;
  uint32_t id = 0, block = 512, physical = 0;
  bool create = false, thick = false, read_only = false, direct = false, keep_backing = false;
};

// The backing flags checked against --backing and set on `l`; 0, or the usage error's status.
int SetBacking(const LunArgs& a, v1::Lun* l) {
  if (a.backing != "file" && (a.thick || a.direct)) {
    return Fail(kExitUsage, "--thick and --direct apply to --backing file only");
  }
  if (a.backing != "file" && a.backing != "rbd" && a.create) {
    return Fail(kExitUsage, "--create applies to --backing file or rbd only");
  }
  const bool rbd_flags = !a.pool.empty() || !a.image.empty() || !a.namespace_.empty() ||
                         !a.ceph_conf.empty() || !a.client_id.empty() || !a.keyring.empty();
  if (a.backing != "rbd" && rbd_flags) {
    return Fail(kExitUsage,
                "--pool, --image, --namespace, --ceph-conf, --client-id and --keyring apply "
                "to --backing rbd only");
  }
  if (a.backing == "rbd" && (a.pool.empty() || a.image.empty())) {
    return Fail(kExitUsage, "--backing rbd needs --pool and --image");
  }
  if (a.backing == "ram") l->mutable_ram();
  if (a.backing == "null") l->mutable_null();
  if (a.backing == "file") {
    l->mutable_file()->set_path(a.path);
    l->mutable_file()->set_create(a.create);
    l->mutable_file()->set_thick(a.thick);
    l->mutable_file()->set_direct(a.direct);
  }
  if (a.backing == "rbd") {
    v1::RbdBacking* r = l->mutable_rbd();
    r->set_pool(a.pool);
    r->set_image(a.image);
    r->set_namespace_(a.namespace_);
    r->set_conf(a.ceph_conf);
    r->set_client_id(a.client_id);
    r->set_keyring(a.keyring);
    r->set_create(a.create);
  }
  return 0;
}

int CreateLun(Client& cl, const Global& g, const LunArgs& a) {
  v1::CreateLunRequest req;
  req.set_target(a.target);
  req.set_request_id(a.request_id);
  if (!a.from_snapshot.empty()) req.set_snapshot(a.from_snapshot);
  if (!a.from_lun.empty() && !ParseLunRef(a.from_lun, req.mutable_lun_source())) {
    return Fail(kExitUsage, "--from-lun " + a.from_lun + " is not TARGET:ID");
  }
  v1::Lun* l = req.mutable_lun();
  l->set_id(a.id);
  uint64_t size = 0;
  if (!a.size.empty() && !ParseSize(a.size, &size)) {
    return Fail(kExitUsage, "--size " + a.size + " is not a size (e.g. 4096, 64M, 1G)");
  }
  l->set_size_bytes(size);
  l->set_block_size(a.block);
  l->set_physical_block_size(a.physical);
  l->set_read_only(a.read_only);
  if (int rc = SetBacking(a, l); rc != 0) return rc;
  v1::Lun resp;
  auto s = cl.Call(&v1::GatewayService::Stub::CreateLun, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("lun %u of %s created: %s, %s\n", resp.id(), a.target.c_str(),
                Backing(resp).c_str(), HumanSize(resp.size_bytes()).c_str());
  }
  return 0;
}

int GetLun(Client& cl, const Global& g, const LunArgs& a) {
  v1::GetLunRequest req;
  req.set_target(a.target);
  req.set_id(a.id);
  v1::Lun resp;
  auto s = cl.Call(&v1::GatewayService::Stub::GetLun, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    google::protobuf::RepeatedPtrField<v1::Lun> one;
    *one.Add() = resp;
    PrintLuns(a.target, one);
  }
  return 0;
}

int ListLuns(Client& cl, const Global& g, const LunArgs& a) {
  v1::ListLunsRequest req;
  req.set_target(a.target);
  v1::ListLunsResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::ListLuns, req, &resp);
  if (!s.ok()) return FailRpc(s);
  g.output == "json" ? PrintJson(resp) : PrintLuns(a.target, resp.luns());
  return 0;
}

int ResizeLun(Client& cl, const Global& g, const LunArgs& a) {
  v1::ResizeLunRequest req;
  req.set_target(a.target);
  req.set_id(a.id);
  uint64_t size = 0;
  if (!ParseSize(a.size, &size)) return Fail(kExitUsage, "size " + a.size + " is not a size");
  req.set_size_bytes(size);
  v1::Lun resp;
  auto s = cl.Call(&v1::GatewayService::Stub::ResizeLun, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("lun %u of %s is now %s\n", resp.id(), a.target.c_str(),
                HumanSize(resp.size_bytes()).c_str());
  }
  return 0;
}

int DeleteLun(Client& cl, const Global& g, const LunArgs& a) {
  v1::DeleteLunRequest req;
  req.set_target(a.target);
  req.set_id(a.id);
  req.set_keep_backing(a.keep_backing);
  v1::DeleteLunResponse resp;
  auto s = cl.Call(&v1::GatewayService::Stub::DeleteLun, req, &resp);
  if (!s.ok()) return FailRpc(s);
  if (g.output == "json") {
    PrintJson(resp);
  } else {
    std::printf("lun %u of %s deleted%s\n", a.id, a.target.c_str(),
                resp.backing_removed() ? "; backing file or image removed" : "");
  }
  return 0;
}

}  // namespace

void AddLunCommands(CLI::App& app, const Global& g, Action& action) {
  auto* lun = app.add_subcommand("lun", "LUNs of a target")->require_subcommand(1);
  auto a = std::make_shared<LunArgs>();

  auto* c = lun->add_subcommand("create", "add a LUN to a target");
  c->add_option("target", a->target)->required();
  c->add_option("id", a->id, "LUN id 0..255")->required();
  c->add_option("--backing", a->backing, "ram|null|file|rbd")
      ->check(CLI::IsMember({"ram", "null", "file", "rbd"}));
  c->add_option("--size", a->size, "size in bytes, or with K/M/G/T (binary)");
  c->add_option("--path", a->path,
                "file or block device (file backing); a relative path is in the LUN directory");
  c->add_flag("--create", a->create, "create the file or rbd image if missing (with --size)");
  c->add_option("--pool", a->pool, "Ceph pool of the image (rbd backing)");
  c->add_option("--image", a->image, "RBD image name (rbd backing)");
  c->add_option("--namespace", a->namespace_, "RADOS namespace in the pool (rbd backing)");
  c->add_option("--ceph-conf", a->ceph_conf,
                "ceph.conf path on the gateway (rbd backing; default: /etc/ceph/ceph.conf)");
  c->add_option("--client-id", a->client_id, "cephx user, e.g. admin (rbd backing)");
  c->add_option("--keyring", a->keyring, "keyring file path on the gateway (rbd backing)");
  c->add_flag("--thick", a->thick, "allocate the whole file when creating it");
  c->add_flag("--direct", a->direct, "O_DIRECT: aligned I/O bypasses the page cache");
  c->add_option("--block-size", a->block, "512 or 4096");
  c->add_option("--physical-block-size", a->physical,
                "4096 over --block-size 512 (512e: initiators align to 4 KiB); default: the same");
  c->add_flag("--read-only", a->read_only);
  c->add_option("--request-id", a->request_id, "makes a retried create idempotent");
  auto* from_snap = c->add_option("--from-snapshot", a->from_snapshot,
                                  "start as a copy of this snapshot (file backing, --create)");
  c->add_option("--from-lun", a->from_lun,
                "start as a copy of the file LUN TARGET:ID (file backing, --create)")
      ->excludes(from_snap);
  OnParsed(c, action, [&g, a](Client& cl) { return CreateLun(cl, g, *a); });

  auto* get = lun->add_subcommand("get", "show a LUN");
  get->add_option("target", a->target)->required();
  get->add_option("id", a->id)->required();
  OnParsed(get, action, [&g, a](Client& cl) { return GetLun(cl, g, *a); });

  auto* list = lun->add_subcommand("list", "list the LUNs of a target");
  list->add_option("target", a->target)->required();
  OnParsed(list, action, [&g, a](Client& cl) { return ListLuns(cl, g, *a); });

  auto* resize = lun->add_subcommand("resize", "grow a LUN online");
  resize->add_option("target", a->target)->required();
  resize->add_option("id", a->id)->required();
  resize->add_option("size", a->size, "new size (bytes or K/M/G/T)")->required();
  OnParsed(resize, action, [&g, a](Client& cl) { return ResizeLun(cl, g, *a); });

  auto* del = lun->add_subcommand("delete",
                                  "remove a LUN, and the backing file the gateway created for it");
  del->add_option("target", a->target)->required();
  del->add_option("id", a->id)->required();
  del->add_flag("--keep-backing", a->keep_backing, "keep the backing file or rbd image");
  OnParsed(del, action, [&g, a](Client& cl) { return DeleteLun(cl, g, *a); });
}

}  // namespace iscsigw::ctl
