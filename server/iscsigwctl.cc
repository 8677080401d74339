// iscsigwctl: the command-line client of the iscsigw.v1 gRPC API (its commands and exit codes are a
// contract: docs/reference/cli.md and docs/reference/flags.md).
//
//   iscsigwctl [--server HOST:PORT] [-o table|json] NOUN VERB ARGS...
//
// The server and TLS settings also come from ISCSIGW_SERVER, ISCSIGW_TLS_CA,
// ISCSIGW_TLS_SERVER_NAME, ISCSIGW_TLS_CLIENT_CERT and ISCSIGW_TLS_CLIENT_KEY, so that the image's
// environment can point the iscsigwctl run inside the gateway pod at the local port with the
// pod's CA and the name its certificate carries (the certificate names the Service, not
// 127.0.0.1).
//
// Nouns: target, lun, snapshot, acl, auth, session, gateway. Human tables by default, protobuf JSON
// with -o json. Secrets are read from a file or stdin ("-"), never from the command line. Exit
// status: 0 on success; the gRPC status code on an API error (3 INVALID_ARGUMENT, 5 NOT_FOUND,
// 6 ALREADY_EXISTS, 8 RESOURCE_EXHAUSTED, 9 FAILED_PRECONDITION, 14 UNAVAILABLE, ...); 64 for a
// usage error; 66 when a secret file cannot be read. Errors are one line on stderr.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "iscsigw/v1/gateway.grpc.pb.h"

namespace iscsigw::ctl {
namespace {

namespace v1 = iscsigw::v1;

constexpr int kExitUsage = 64;
constexpr int kExitNoInput = 66;

struct Global {
  std::string server = "127.0.0.1:50051";
  std::string output = "table";
  std::string tls_ca, tls_cert, tls_key;
  // The name the server certificate is checked against instead of the host of `server`.
  std::string tls_server_name;
  unsigned timeout_s = 30;
};

const char* CodeName(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "ERROR";
  }
}

// A one-line error; returns the exit status.
int Fail(int code, const std::string& msg) {
  std::string line = msg;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "iscsigwctl: %s\n", line.c_str());
  return code;
}

int FailRpc(const grpc::Status& s) {
  std::string msg = std::string(CodeName(s.error_code())) + ": " + s.error_message();
  // gRPC's words when the certificate does not name the host dialed, typically 127.0.0.1 inside
  // the gateway pod against a certificate that names the Service.
  if (s.error_message().find("not in peer certificate") != std::string::npos) {
    msg +=
        " (give a name the certificate carries with --tls-server-name or "
        "ISCSIGW_TLS_SERVER_NAME)";
  }
  return Fail(static_cast<int>(s.error_code()), msg);
}

bool ReadFile(const std::string& path, std::string* out, std::string* err) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      *err = "cannot read " + path;
      return false;
    }
    ss << in.rdbuf();
  }
  *out = ss.str();
  // A secret file usually ends with one newline that is not part of the secret.
  if (!out->empty() && out->back() == '\n') out->pop_back();
  if (!out->empty() && out->back() == '\r') out->pop_back();
  return true;
}

// "TARGET:ID": an IQN has colons of its own, so the LUN id follows the last one.
bool ParseLunRef(const std::string& s, v1::LunRef* out) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return false;
  const std::string id = s.substr(colon + 1);
  if (id.size() > 3 || id.find_first_not_of("0123456789") != std::string::npos) return false;
  out->set_target(s.substr(0, colon));
  out->set_id(static_cast<uint32_t>(std::stoul(id)));
  return true;
}

// "64M", "1G", "1GiB", "4096", "10T": binary multiples; plain numbers are bytes.
bool ParseSize(const std::string& s, uint64_t* out) {
  size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(s, &pos);
  } catch (...) {
    return false;
  }
  std::string unit = s.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  uint64_t mul = 1;
  if (unit.empty()) {
    mul = 1;
  } else if (unit == "K") {
    mul = 1ull << 10;
  } else if (unit == "M") {
    mul = 1ull << 20;
  } else if (unit == "G") {
    mul = 1ull << 30;
  } else if (unit == "T") {
    mul = 1ull << 40;
  } else {
    return false;
  }
  *out = n * mul;
  return true;
}

std::string HumanSize(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t v = b;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + units[u];
}

class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print() const {
    std::vector<size_t> w;
    for (const auto& r : rows_) {
      w.resize(std::max(w.size(), r.size()));
      for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    }
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
      }
      std::printf("%s\n", line.c_str());
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Backing(const v1::Lun& l) {
  switch (l.backing_case()) {
    case v1::Lun::kRam:
      return "ram";
    case v1::Lun::kNull:
      return "null";
    case v1::Lun::kFile:
      return "file:" + l.file().path() + (l.file().direct() ? " (direct)" : "");
    case v1::Lun::kRbd:
      return "rbd:" + l.rbd().pool() + "/" +
             (l.rbd().namespace_().empty() ? "" : l.rbd().namespace_() + "/") + l.rbd().image();
    default:
      return "?";
  }
}

std::string Join(const google::protobuf::RepeatedPtrField<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

void PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  std::printf("%s", out.c_str());
  if (out.empty() || out.back() != '\n') std::printf("\n");
}

void PrintLuns(const std::string& target, const google::protobuf::RepeatedPtrField<v1::Lun>& luns) {
  Table t({"TARGET", "LUN", "BACKING", "SIZE", "BLOCK", "RO", "STATE", "ALUA", "SERIAL"});
  for (const auto& l : luns) {
    t.Add({target, std::to_string(l.id()), Backing(l), HumanSize(l.size_bytes()),
           l.physical_block_size() > l.block_size()
               ? std::to_string(l.block_size()) + "/" + std::to_string(l.physical_block_size())
               : std::to_string(l.block_size()),
           l.read_only() ? "yes" : "no", l.offline_reason().empty() ? "online" : "offline",
           l.access_state() == "active/non-optimized" ? "non-optimized"
           : l.access_state().empty()                 ? "-"
                                                      : "optimized",
           l.serial()});
  }
  t.Print();
  for (const auto& l : luns) {
    if (!l.offline_reason().empty()) {
      std::printf("lun %u offline: %s\n", l.id(), l.offline_reason().c_str());
    }
  }
}

void PrintTarget(const v1::Target& t) {
  std::printf("name:        %s\n", t.name().c_str());
  if (!t.alias().empty()) std::printf("alias:       %s\n", t.alias().c_str());
  std::printf("allow any:   %s\n", t.allow_any_initiator() ? "yes" : "no");
  std::printf(
      "chap:        %s\n",
      t.chap().user().empty()
          ? "none"
          : (t.chap().user() + (t.chap().mutual_user().empty() ? "" : " (mutual)")).c_str());
  std::printf("acl:         %d entr%s\n", t.acl_size(), t.acl_size() == 1 ? "y" : "ies");
  for (const auto& e : t.acl()) {
    std::printf("  %s%s%s\n", e.initiator().c_str(), e.sources_size() ? " from " : "",
                Join(e.sources(), ",").c_str());
  }
  std::printf("luns:        %d\n", t.luns_size());
  if (t.luns_size()) PrintLuns(t.name(), t.luns());
}

class Client {
 public:
  Client(const Global& g, std::shared_ptr<grpc::Channel> ch)
      : g_(g), stub_(v1::GatewayService::NewStub(ch)) {}

  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(g_.timeout_s));
    return ((*stub_).*method)(&ctx, req, resp);
  }

  const Global& g_;
  std::unique_ptr<v1::GatewayService::Stub> stub_;
};

int Run(int argc, char** argv) {
  Global g;
  CLI::App app{"iscsigwctl: manage an iscsigw gateway over gRPC (iscsigw.v1)"};
  app.footer(
      "Exit status: 0 ok; gRPC status code on API errors (3 INVALID_ARGUMENT, 5 NOT_FOUND, "
      "6 ALREADY_EXISTS, 8 RESOURCE_EXHAUSTED, 9 FAILED_PRECONDITION, 14 UNAVAILABLE); 64 usage; "
      "66 unreadable input.\nEnvironment (a flag wins over its variable): ISCSIGW_SERVER, "
      "ISCSIGW_TLS_CA, ISCSIGW_TLS_SERVER_NAME, ISCSIGW_TLS_CLIENT_CERT, ISCSIGW_TLS_CLIENT_KEY.");
  app.require_subcommand(1);
  app.add_option("--server", g.server, "gRPC address HOST:PORT")->envname("ISCSIGW_SERVER");
  app.add_option("-o,--output", g.output, "table|json")->check(CLI::IsMember({"table", "json"}));
  app.add_option("--tls-ca", g.tls_ca, "CA bundle to verify the server (enables TLS)")
      ->envname("ISCSIGW_TLS_CA");
  app.add_option("--tls-server-name", g.tls_server_name,
                 "name to verify the server certificate against (default: the host of --server)")
      ->envname("ISCSIGW_TLS_SERVER_NAME");
  app.add_option("--tls-cert", g.tls_cert, "client certificate for mutual TLS")
      ->envname("ISCSIGW_TLS_CLIENT_CERT");
  app.add_option("--tls-key", g.tls_key, "client key for mutual TLS")
      ->envname("ISCSIGW_TLS_CLIENT_KEY");
  app.add_option("--timeout", g.timeout_s, "seconds per call")->check(CLI::Range(1u, 3600u));

  // The action chosen by the parser; run after parsing, once the channel exists.
  std::function<int(Client&)> action;

  // ---- target
  auto* target = app.add_subcommand("target", "targets")->require_subcommand(1);
  std::string t_name, t_alias, request_id;
  bool t_any = false, t_force = false, keep_backing = false;
  {
    auto* c = target->add_subcommand("create", "create a target (IQN or short name)");
    c->add_option("name", t_name)->required();
    c->add_option("--alias", t_alias);
    c->add_flag("--allow-any-initiator", t_any, "admit every initiator (no ACL)");
    c->add_option("--request-id", request_id, "makes a retried create idempotent");
    c->callback([&] {
      action = [&](Client& cl) {
        v1::CreateTargetRequest req;
        req.mutable_target()->set_name(t_name);
        req.mutable_target()->set_alias(t_alias);
        req.mutable_target()->set_allow_any_initiator(t_any);
        req.set_request_id(request_id);
        v1::Target resp;
        auto s = cl.Call(&v1::GatewayService::Stub::CreateTarget, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("target %s created\n", resp.name().c_str());
        }
        return 0;
      };
    });
    auto* get = target->add_subcommand("get", "show a target");
    get->add_option("name", t_name)->required();
    get->callback([&] {
      action = [&](Client& cl) {
        v1::GetTargetRequest req;
        req.set_name(t_name);
        v1::Target resp;
        auto s = cl.Call(&v1::GatewayService::Stub::GetTarget, req, &resp);
        if (!s.ok()) return FailRpc(s);
        g.output == "json" ? PrintJson(resp) : PrintTarget(resp);
        return 0;
      };
    });
    auto* list = target->add_subcommand("list", "list targets");
    list->callback([&] {
      action = [&](Client& cl) {
        v1::ListTargetsResponse all;
        v1::ListTargetsRequest req;
        for (;;) {
          v1::ListTargetsResponse page;
          auto s = cl.Call(&v1::GatewayService::Stub::ListTargets, req, &page);
          if (!s.ok()) return FailRpc(s);
          for (auto& t : *page.mutable_targets()) *all.add_targets() = std::move(t);
          if (page.next_page_token().empty()) break;
          req.set_page_token(page.next_page_token());
        }
        if (g.output == "json") {
          PrintJson(all);
          return 0;
        }
        Table t({"NAME", "LUNS", "ACL", "ANY", "CHAP", "ALIAS"});
        for (const auto& x : all.targets()) {
          t.Add({x.name(), std::to_string(x.luns_size()), std::to_string(x.acl_size()),
                 x.allow_any_initiator() ? "yes" : "no",
                 x.chap().user().empty() ? "-"
                                         : (x.chap().mutual_user().empty() ? "one-way" : "mutual"),
                 x.alias()});
        }
        t.Print();
        return 0;
      };
    });
    auto* del = target->add_subcommand("delete", "delete a target");
    del->add_option("name", t_name)->required();
    del->add_flag("--force", t_force, "log out and drop its sessions first");
    del->add_flag("--keep-backing", keep_backing,
                  "keep the backing files and rbd images the gateway created for its LUNs");
    del->callback([&] {
      action = [&](Client& cl) {
        v1::DeleteTargetRequest req;
        req.set_name(t_name);
        req.set_force(t_force);
        req.set_keep_backing(keep_backing);
        v1::DeleteTargetResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::DeleteTarget, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf(
              "target %s deleted (%u session(s) terminated, %u backing file(s) or image(s) "
              "removed)\n",
              t_name.c_str(), resp.sessions_terminated(), resp.backing_files_removed());
        }
        return 0;
      };
    });
  }

  // ---- lun
  auto* lun = app.add_subcommand("lun", "LUNs of a target")->require_subcommand(1);
  std::string l_target, l_backing = "ram", l_path, l_size, l_from_snapshot, l_from_lun;
  std::string l_pool, l_image, l_namespace, l_ceph_conf, l_client_id, l_keyring;
  uint32_t l_id = 0, l_block = 512, l_physical = 0;
  bool l_create = false, l_thick = false, l_ro = false, l_direct = false;
  {
    auto* c = lun->add_subcommand("create", "add a LUN to a target");
    c->add_option("target", l_target)->required();
    c->add_option("id", l_id, "LUN id 0..255")->required();
    c->add_option("--backing", l_backing, "ram|null|file|rbd")
        ->check(CLI::IsMember({"ram", "null", "file", "rbd"}));
    c->add_option("--size", l_size, "size in bytes, or with K/M/G/T (binary)");
    c->add_option("--path", l_path,
                  "file or block device (file backing); a relative path is in the LUN directory");
    c->add_flag("--create", l_create, "create the file or rbd image if missing (with --size)");
    c->add_option("--pool", l_pool, "Ceph pool of the image (rbd backing)");
    c->add_option("--image", l_image, "RBD image name (rbd backing)");
    c->add_option("--namespace", l_namespace, "RADOS namespace in the pool (rbd backing)");
    c->add_option("--ceph-conf", l_ceph_conf,
                  "ceph.conf path on the gateway (rbd backing; default: /etc/ceph/ceph.conf)");
    c->add_option("--client-id", l_client_id, "cephx user, e.g. admin (rbd backing)");
    c->add_option("--keyring", l_keyring, "keyring file path on the gateway (rbd backing)");
    c->add_flag("--thick", l_thick, "allocate the whole file when creating it");
    c->add_flag("--direct", l_direct, "O_DIRECT: aligned I/O bypasses the page cache");
    c->add_option("--block-size", l_block, "512 or 4096");
    c->add_option(
        "--physical-block-size", l_physical,
        "4096 over --block-size 512 (512e: initiators align to 4 KiB); default: the same");
    c->add_flag("--read-only", l_ro);
    c->add_option("--request-id", request_id, "makes a retried create idempotent");
    auto* from_snap = c->add_option("--from-snapshot", l_from_snapshot,
                                    "start as a copy of this snapshot (file backing, --create)");
    c->add_option("--from-lun", l_from_lun,
                  "start as a copy of the file LUN TARGET:ID (file backing, --create)")
        ->excludes(from_snap);
    c->callback([&] {
      action = [&](Client& cl) {
        v1::CreateLunRequest req;
        req.set_target(l_target);
        req.set_request_id(request_id);
        if (!l_from_snapshot.empty()) req.set_snapshot(l_from_snapshot);
        if (!l_from_lun.empty() && !ParseLunRef(l_from_lun, req.mutable_lun_source())) {
          return Fail(kExitUsage, "--from-lun " + l_from_lun + " is not TARGET:ID");
        }
        v1::Lun* l = req.mutable_lun();
        l->set_id(l_id);
        uint64_t size = 0;
        if (!l_size.empty() && !ParseSize(l_size, &size)) {
          return Fail(kExitUsage, "--size " + l_size + " is not a size (e.g. 4096, 64M, 1G)");
        }
        l->set_size_bytes(size);
        l->set_block_size(l_block);
        l->set_physical_block_size(l_physical);
        l->set_read_only(l_ro);
        if (l_backing != "file" && (l_thick || l_direct)) {
          return Fail(kExitUsage, "--thick and --direct apply to --backing file only");
        }
        if (l_backing != "file" && l_backing != "rbd" && l_create) {
          return Fail(kExitUsage, "--create applies to --backing file or rbd only");
        }
        const bool rbd_flags = !l_pool.empty() || !l_image.empty() || !l_namespace.empty() ||
                               !l_ceph_conf.empty() || !l_client_id.empty() || !l_keyring.empty();
        if (l_backing != "rbd" && rbd_flags) {
          return Fail(kExitUsage,
                      "--pool, --image, --namespace, --ceph-conf, --client-id and --keyring apply "
                      "to --backing rbd only");
        }
        if (l_backing == "rbd" && (l_pool.empty() || l_image.empty())) {
          return Fail(kExitUsage, "--backing rbd needs --pool and --image");
        }
        if (l_backing == "ram") l->mutable_ram();
        if (l_backing == "null") l->mutable_null();
        if (l_backing == "file") {
          l->mutable_file()->set_path(l_path);
          l->mutable_file()->set_create(l_create);
          l->mutable_file()->set_thick(l_thick);
          l->mutable_file()->set_direct(l_direct);
        }
        if (l_backing == "rbd") {
          v1::RbdBacking* r = l->mutable_rbd();
          r->set_pool(l_pool);
          r->set_image(l_image);
          r->set_namespace_(l_namespace);
          r->set_conf(l_ceph_conf);
          r->set_client_id(l_client_id);
          r->set_keyring(l_keyring);
          r->set_create(l_create);
        }
        v1::Lun resp;
        auto s = cl.Call(&v1::GatewayService::Stub::CreateLun, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("lun %u of %s created: %s, %s\n", resp.id(), l_target.c_str(),
                      Backing(resp).c_str(), HumanSize(resp.size_bytes()).c_str());
        }
        return 0;
      };
    });
    auto* get = lun->add_subcommand("get", "show a LUN");
    get->add_option("target", l_target)->required();
    get->add_option("id", l_id)->required();
    get->callback([&] {
      action = [&](Client& cl) {
        v1::GetLunRequest req;
        req.set_target(l_target);
        req.set_id(l_id);
        v1::Lun resp;
        auto s = cl.Call(&v1::GatewayService::Stub::GetLun, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          google::protobuf::RepeatedPtrField<v1::Lun> one;
          *one.Add() = resp;
          PrintLuns(l_target, one);
        }
        return 0;
      };
    });
    auto* list = lun->add_subcommand("list", "list the LUNs of a target");
    list->add_option("target", l_target)->required();
    list->callback([&] {
      action = [&](Client& cl) {
        v1::ListLunsRequest req;
        req.set_target(l_target);
        v1::ListLunsResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::ListLuns, req, &resp);
        if (!s.ok()) return FailRpc(s);
        g.output == "json" ? PrintJson(resp) : PrintLuns(l_target, resp.luns());
        return 0;
      };
    });
    auto* resize = lun->add_subcommand("resize", "grow a LUN online");
    resize->add_option("target", l_target)->required();
    resize->add_option("id", l_id)->required();
    resize->add_option("size", l_size, "new size (bytes or K/M/G/T)")->required();
    resize->callback([&] {
      action = [&](Client& cl) {
        v1::ResizeLunRequest req;
        req.set_target(l_target);
        req.set_id(l_id);
        uint64_t size = 0;
        if (!ParseSize(l_size, &size)) return Fail(kExitUsage, "size " + l_size + " is not a size");
        req.set_size_bytes(size);
        v1::Lun resp;
        auto s = cl.Call(&v1::GatewayService::Stub::ResizeLun, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("lun %u of %s is now %s\n", resp.id(), l_target.c_str(),
                      HumanSize(resp.size_bytes()).c_str());
        }
        return 0;
      };
    });
    auto* del = lun->add_subcommand(
        "delete", "remove a LUN, and the backing file the gateway created for it");
    del->add_option("target", l_target)->required();
    del->add_option("id", l_id)->required();
    del->add_flag("--keep-backing", keep_backing, "keep the backing file or rbd image");
    del->callback([&] {
      action = [&](Client& cl) {
        v1::DeleteLunRequest req;
        req.set_target(l_target);
        req.set_id(l_id);
        req.set_keep_backing(keep_backing);
        v1::DeleteLunResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::DeleteLun, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("lun %u of %s deleted%s\n", l_id, l_target.c_str(),
                      resp.backing_removed() ? "; backing file or image removed" : "");
        }
        return 0;
      };
    });
  }

  // ---- snapshot
  auto* snapshot =
      app.add_subcommand("snapshot", "point-in-time copies of file LUNs")->require_subcommand(1);
  std::string s_name, s_lun;
  {
    auto* c = snapshot->add_subcommand("create", "copy a file LUN's data into a snapshot");
    c->add_option("name", s_name, "1..128 of A-Z a-z 0-9 . _ -")->required();
    c->add_option("lun", s_lun, "the LUN, TARGET:ID")->required();
    c->callback([&] {
      action = [&](Client& cl) {
        v1::CreateSnapshotRequest req;
        req.set_name(s_name);
        if (!ParseLunRef(s_lun, req.mutable_lun())) {
          return Fail(kExitUsage, "lun " + s_lun + " is not TARGET:ID");
        }
        v1::Snapshot resp;
        auto s = cl.Call(&v1::GatewayService::Stub::CreateSnapshot, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("snapshot %s of lun %u of %s: %s, %s\n", resp.name().c_str(),
                      resp.source_lun(), resp.source_target().c_str(),
                      HumanSize(resp.size_bytes()).c_str(),
                      resp.shares_blocks() ? "shares blocks" : "full copy");
        }
        return 0;
      };
    });
    auto* list = snapshot->add_subcommand("list", "list snapshots (all, or of one LUN)");
    list->add_option("--lun", s_lun, "only snapshots of TARGET:ID");
    list->callback([&] {
      action = [&](Client& cl) {
        v1::ListSnapshotsRequest req;
        if (!s_lun.empty() && !ParseLunRef(s_lun, req.mutable_lun())) {
          return Fail(kExitUsage, "--lun " + s_lun + " is not TARGET:ID");
        }
        v1::ListSnapshotsResponse all;
        do {
          v1::ListSnapshotsResponse page;
          auto s = cl.Call(&v1::GatewayService::Stub::ListSnapshots, req, &page);
          if (!s.ok()) return FailRpc(s);
          for (const auto& sn : page.snapshots()) *all.add_snapshots() = sn;
          req.set_page_token(page.next_page_token());
        } while (!req.page_token().empty());
        if (g.output == "json") {
          PrintJson(all);
          return 0;
        }
        Table t({"NAME", "TARGET", "LUN", "SIZE", "BLOCK", "SHARED", "PATH"});
        for (const auto& sn : all.snapshots()) {
          t.Add({sn.name(), sn.source_target(), std::to_string(sn.source_lun()),
                 HumanSize(sn.size_bytes()), std::to_string(sn.block_size()),
                 sn.shares_blocks() ? "yes" : "no", sn.path()});
        }
        t.Print();
        return 0;
      };
    });
    auto* del = snapshot->add_subcommand("delete", "delete a snapshot and its file");
    del->add_option("name", s_name)->required();
    del->callback([&] {
      action = [&](Client& cl) {
        v1::DeleteSnapshotRequest req;
        req.set_name(s_name);
        v1::DeleteSnapshotResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::DeleteSnapshot, req, &resp);
        if (!s.ok()) return FailRpc(s);
        g.output == "json" ? PrintJson(resp)
                           : (void)std::printf("snapshot %s deleted\n", s_name.c_str());
        return 0;
      };
    });
  }

  // ---- acl
  auto* acl = app.add_subcommand("acl", "initiator access lists")->require_subcommand(1);
  std::string a_target, a_initiator, a_mode;
  std::vector<std::string> a_sources;
  bool a_drop = false;
  {
    auto* add = acl->add_subcommand("add", "admit an initiator");
    add->add_option("target", a_target)->required();
    add->add_option("initiator", a_initiator)->required();
    add->add_option("--source", a_sources, "CIDR the initiator may connect from (repeatable)");
    add->callback([&] {
      action = [&](Client& cl) {
        v1::AddAclEntryRequest req;
        req.set_target(a_target);
        req.mutable_entry()->set_initiator(a_initiator);
        for (const auto& s : a_sources) req.mutable_entry()->add_sources(s);
        v1::AclEntry resp;
        auto s = cl.Call(&v1::GatewayService::Stub::AddAclEntry, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("%s may log in to %s\n", a_initiator.c_str(), a_target.c_str());
        }
        return 0;
      };
    });
    auto* list = acl->add_subcommand("list", "show a target's ACL");
    list->add_option("target", a_target)->required();
    list->callback([&] {
      action = [&](Client& cl) {
        v1::ListAclEntriesRequest req;
        req.set_target(a_target);
        v1::ListAclEntriesResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::ListAclEntries, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
          return 0;
        }
        if (resp.allow_any_initiator()) std::printf("(allow_any_initiator is on)\n");
        Table t({"INITIATOR", "SOURCES"});
        for (const auto& e : resp.entries()) {
          t.Add({e.initiator(), e.sources_size() ? Join(e.sources(), ",") : "any"});
        }
        t.Print();
        return 0;
      };
    });
    auto* rm = acl->add_subcommand("remove", "stop admitting an initiator");
    rm->add_option("target", a_target)->required();
    rm->add_option("initiator", a_initiator)->required();
    rm->add_flag("--drop-sessions", a_drop, "also drop its live sessions");
    rm->callback([&] {
      action = [&](Client& cl) {
        v1::RemoveAclEntryRequest req;
        req.set_target(a_target);
        req.set_initiator(a_initiator);
        req.set_drop_sessions(a_drop);
        v1::RemoveAclEntryResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::RemoveAclEntry, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("%s removed from %s (%u session(s) dropped)\n", a_initiator.c_str(),
                      a_target.c_str(), resp.sessions_dropped());
        }
        return 0;
      };
    });
    auto* any = acl->add_subcommand("allow-any", "switch allow_any_initiator on or off");
    any->add_option("target", a_target)->required();
    any->add_option("mode", a_mode, "on|off")->required()->check(CLI::IsMember({"on", "off"}));
    any->callback([&] {
      action = [&](Client& cl) {
        v1::SetAllowAnyInitiatorRequest req;
        req.set_target(a_target);
        req.set_allow_any_initiator(a_mode == "on");
        v1::Target resp;
        auto s = cl.Call(&v1::GatewayService::Stub::SetAllowAnyInitiator, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("%s: allow_any_initiator %s\n", resp.name().c_str(), a_mode.c_str());
        }
        return 0;
      };
    });
  }

  // ---- auth
  auto* auth = app.add_subcommand("auth", "CHAP credentials")->require_subcommand(1);
  std::string c_target, c_user, c_secret_file, c_muser, c_msecret_file;
  bool c_discovery = false;
  {
    auto* set = auth->add_subcommand("set", "require CHAP for a target, or for discovery");
    set->add_option("target", c_target, "target (omit with --discovery)");
    set->add_flag("--discovery", c_discovery, "discovery sessions instead of a target");
    set->add_option("--user", c_user, "CHAP name the initiator sends")->required();
    set->add_option("--secret-file", c_secret_file, "file with the secret, or - for stdin")
        ->required();
    set->add_option("--mutual-user", c_muser, "CHAP name of the target (mutual CHAP)");
    set->add_option("--mutual-secret-file", c_msecret_file, "file with the target's secret");
    set->callback([&] {
      action = [&](Client& cl) {
        if (c_discovery == !c_target.empty()) {
          return Fail(kExitUsage, "give a target or --discovery (one of them)");
        }
        if (c_muser.empty() != c_msecret_file.empty()) {
          return Fail(kExitUsage, "--mutual-user and --mutual-secret-file go together");
        }
        if (c_secret_file == "-" && c_msecret_file == "-") {
          return Fail(kExitUsage, "only one secret can come from stdin");
        }
        v1::SetChapRequest req;
        req.set_target(c_target);
        std::string secret, err;
        if (!ReadFile(c_secret_file, &secret, &err)) return Fail(kExitNoInput, err);
        req.mutable_chap()->set_user(c_user);
        req.mutable_chap()->set_secret(secret);
        if (!c_muser.empty()) {
          std::string msecret;
          if (!ReadFile(c_msecret_file, &msecret, &err)) return Fail(kExitNoInput, err);
          req.mutable_chap()->set_mutual_user(c_muser);
          req.mutable_chap()->set_mutual_secret(msecret);
        }
        v1::ChapConfig resp;
        auto s = cl.Call(&v1::GatewayService::Stub::SetChap, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("CHAP set for %s (%s)\n", c_target.empty() ? "discovery" : c_target.c_str(),
                      resp.mutual_user().empty() ? "one-way" : "mutual");
        }
        return 0;
      };
    });
    auto* clear = auth->add_subcommand("clear", "stop requiring CHAP");
    clear->add_option("target", c_target, "target (omit with --discovery)");
    clear->add_flag("--discovery", c_discovery);
    clear->callback([&] {
      action = [&](Client& cl) {
        if (c_discovery == !c_target.empty()) {
          return Fail(kExitUsage, "give a target or --discovery (one of them)");
        }
        v1::ClearChapRequest req;
        req.set_target(c_target);
        v1::ChapConfig resp;
        auto s = cl.Call(&v1::GatewayService::Stub::ClearChap, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("CHAP cleared for %s\n", c_target.empty() ? "discovery" : c_target.c_str());
        }
        return 0;
      };
    });
  }

  // ---- session
  auto* session = app.add_subcommand("session", "live iSCSI sessions")->require_subcommand(1);
  std::string s_target;
  uint32_t s_tsih = 0, s_timeout = 0;
  {
    auto* list = session->add_subcommand("list", "list sessions");
    list->add_option("--target", s_target);
    list->callback([&] {
      action = [&](Client& cl) {
        v1::ListSessionsRequest req;
        req.set_target(s_target);
        v1::ListSessionsResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::ListSessions, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
          return 0;
        }
        Table t({"TSIH", "TARGET", "INITIATOR", "ISID", "PEER", "REACTOR", "DIGESTS"});
        for (const auto& x : resp.sessions()) {
          const auto& p = x.parameters();
          auto get = [&](const char* k) {
            auto it = p.find(k);
            return it == p.end() ? std::string("-") : it->second;
          };
          t.Add({std::to_string(x.tsih()), x.discovery() ? "(discovery)" : x.target(),
                 x.initiator_name(), x.isid(), x.connections_size() ? x.connections(0).peer() : "-",
                 std::to_string(x.reactor()), get("HeaderDigest") + "/" + get("DataDigest")});
        }
        t.Print();
        return 0;
      };
    });
    auto* kill = session->add_subcommand("kill", "ask the initiator to log out, then drop");
    kill->add_option("tsih", s_tsih)->required();
    kill->add_option("--timeout", s_timeout, "seconds to wait for the logout (default 2)");
    kill->callback([&] {
      action = [&](Client& cl) {
        v1::TerminateSessionRequest req;
        req.set_tsih(s_tsih);
        req.set_logout_timeout_seconds(s_timeout);
        v1::TerminateSessionResponse resp;
        auto s = cl.Call(&v1::GatewayService::Stub::TerminateSession, req, &resp);
        if (!s.ok()) return FailRpc(s);
        if (g.output == "json") {
          PrintJson(resp);
        } else {
          std::printf("session %u: logout requested\n", s_tsih);
        }
        return 0;
      };
    });
  }

  // ---- gateway
  auto* gw = app.add_subcommand("gateway", "the gateway itself")->require_subcommand(1);
  gw->add_subcommand("info", "version, uptime, portals, advertised addresses, reactors, state dir")
      ->callback([&] {
        action = [&](Client& cl) {
          v1::GatewayInfo resp;
          auto s = cl.Call(&v1::GatewayService::Stub::GetGatewayInfo, v1::GetGatewayInfoRequest(),
                           &resp);
          if (!s.ok()) return FailRpc(s);
          if (g.output == "json") {
            PrintJson(resp);
            return 0;
          }
          std::printf("version:     %s\n", resp.version().c_str());
          std::printf("uptime:      %llus\n",
                      static_cast<unsigned long long>(resp.uptime_seconds()));
          std::printf("portals:     %s\n", Join(resp.portals(), ", ").c_str());
          std::printf("advertised:  %s\n", resp.advertised().empty()
                                               ? "(the portal each discovery connection reached)"
                                               : Join(resp.advertised(), ", ").c_str());
          std::printf("reactors:    %u\n", resp.reactors());
          std::printf("targets:     %u\n", resp.targets());
          std::printf("sessions:    %u\n", resp.sessions());
          std::printf("connections: %u\n", resp.connections());
          std::printf("state dir:   %s (%s)\n", resp.state_dir().c_str(),
                      resp.state_dir_healthy() ? "ok" : resp.state_dir_error().c_str());
          std::printf("lun dir:     %s\n",
                      resp.lun_dir().empty() ? "(none)" : resp.lun_dir().c_str());
          return 0;
        };
      });
  gw->add_subcommand("capacity", "size and free space of the LUN directory")->callback([&] {
    action = [&](Client& cl) {
      v1::Capacity resp;
      auto s = cl.Call(&v1::GatewayService::Stub::GetCapacity, v1::GetCapacityRequest(), &resp);
      if (!s.ok()) return FailRpc(s);
      if (g.output == "json") {
        PrintJson(resp);
        return 0;
      }
      std::printf("lun dir:       %s\n", resp.lun_dir().c_str());
      std::printf("total:         %s\n", HumanSize(resp.total_bytes()).c_str());
      std::printf("available:     %s\n", HumanSize(resp.available_bytes()).c_str());
      std::printf("shares blocks: %s\n", resp.shares_blocks() ? "yes (reflink)" : "no");
      return 0;
    };
  });

  std::string g_level, g_logger;
  auto* loglevel = gw->add_subcommand(
      "log-level", "show the log levels, or set them (all loggers, or one with --logger)");
  loglevel->add_option("level", g_level, "trace|debug|info|warn|error|critical|off");
  loglevel->add_option("--logger", g_logger, "pdu|iscsi|scsi|backing|ctl (default: all)");
  loglevel->callback([&] {
    action = [&](Client& cl) {
      v1::LogLevels resp;
      grpc::Status s;
      if (g_level.empty()) {
        v1::GetLogLevelRequest req;
        req.set_logger(g_logger);
        s = cl.Call(&v1::GatewayService::Stub::GetLogLevel, req, &resp);
      } else {
        v1::SetLogLevelRequest req;
        req.set_level(g_level);
        req.set_logger(g_logger);
        s = cl.Call(&v1::GatewayService::Stub::SetLogLevel, req, &resp);
      }
      if (!s.ok()) return FailRpc(s);
      if (g.output == "json") {
        PrintJson(resp);
        return 0;
      }
      Table t({"LOGGER", "LEVEL"});
      for (const auto& l : resp.loggers()) t.Add({l.logger(), l.level()});
      t.Print();
      return 0;
    };
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(kExitUsage, e.what());
  }
  if (!action) return Fail(kExitUsage, "nothing to do (see --help)");

  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  if (g.tls_ca.empty() && g.tls_cert.empty()) {
    if (!g.tls_server_name.empty()) {
      return Fail(kExitUsage, "--tls-server-name needs TLS (--tls-ca or --tls-cert)");
    }
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions opts;
    std::string err;
    if (!g.tls_ca.empty() && !ReadFile(g.tls_ca, &opts.pem_root_certs, &err)) {
      return Fail(kExitNoInput, err);
    }
    if (!g.tls_cert.empty() && (!ReadFile(g.tls_cert, &opts.pem_cert_chain, &err) ||
                                !ReadFile(g.tls_key, &opts.pem_private_key, &err))) {
      return Fail(kExitNoInput, err);
    }
    creds = grpc::SslCredentials(opts);
    if (!g.tls_server_name.empty()) args.SetSslTargetNameOverride(g.tls_server_name);
  }
  Client client(g, grpc::CreateCustomChannel(g.server, creds, args));
  return action(client);
}

}  // namespace
}  // namespace iscsigw::ctl

int main(int argc, char** argv) { return iscsigw::ctl::Run(argc, argv); }
