// The librados handle of a conf, client id and keyring (RbdStore::Cluster), and the options set
// where the conf file leaves Ceph's default (rbd_store.h).
#include <rados/librados.h>
#include <rbd/librbd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "base/log.h"
#include "dataplane/backing/rbd/rbd_internal.h"
#include "dataplane/runtime/cpus.h"

namespace iscsigw::backing {
namespace {

// The options set where the conf file leaves Ceph's default (see rbd_store.h).
struct Default {
  const char* option;
  const char* ceph_default;
  const char* ours;
};
constexpr Default kDefaults[] = {
    {"client_mount_timeout", "300", "15"},
    {"rados_osd_op_timeout", "0", "30"},
    {"rados_mon_op_timeout", "0", "30"},
    {"rbd_cache_writethrough_until_flush", "true", "false"},
    // Unbounded: librados makes the objecter's throttle blocking, and with inline dispatch it
    // would block a reactor. The sessions' command windows bound what is in flight instead.
    {"objecter_inflight_ops", "1024", "0"},
    {"objecter_inflight_op_bytes", "104857600", "0"},
};

// Only on a host of fewer than kFewCores cores (rbd_store.h says why and what it was measured at).
constexpr Default kFewCoresThreads = {"librados_thread_count", "2", "1"};
// For an image that other gateways export too (RbdStoreOptions::shared).
constexpr Default kSharedNoCache = {"rbd_cache", "true", "false"};
constexpr unsigned kFewCores = 4;

std::string ConfGet(rados_t h, const char* option) {
  char buf[512] = {};
  if (rados_conf_get(h, option, buf, sizeof(buf)) != 0) return {};
  return buf;
}

// Why librbd called with rbd_non_blocking_aio = false (on the calling thread, a reactor) could
// wait there; empty when nothing on that path waits. librbd's dispatch layers queue what they
// cannot do yet (exclusive lock, refresh, QoS, the write-around cache's dirty limit) instead of
// waiting; what remains is the objecter's throttle, which librados makes blocking, and a
// writeback cache told to block writes up front.
std::string InlineDispatchWaits(rados_t h) {
  for (const char* option : {"objecter_inflight_ops", "objecter_inflight_op_bytes"}) {
    if (const std::string v = ConfGet(h, option); v != "0") return std::string(option) + " " + v;
  }
  if (ConfGet(h, "rbd_cache_block_writes_upfront") == "true") {
    return "rbd_cache_block_writes_upfront true";
  }
  return {};
}

}  // namespace

namespace rbd_internal {

// An option as librbd applies it to one image: the image's conf_<option> metadata overrides the
// handle's value.
std::string ImageConfGet(rados_t h, rbd_image_t image, const char* option) {
  char value[64] = {};
  size_t len = sizeof(value) - 1;
  const std::string key = std::string("conf_") + option;
  if (rbd_metadata_get(image, key.c_str(), value, &len) == 0) return std::string(value);
  return ConfGet(h, option);
}

// What librbd sends to the cluster as one request to one object, which the OSD applies whole: a
// stripe unit (the object size unless the image uses fancy striping), provided writes reach the
// cluster as they were made. Ceph 16's default cache policy (writearound) sends each write on at
// once; with rbd_cache_policy writeback (in the conf, or the image's conf_rbd_cache_policy
// metadata) librbd's ObjectCacher may write a range back in pieces, so there is no atomic unit: 0.
uint64_t AtomicUnit(rados_t h, rbd_image_t image) {
  uint64_t unit = 0;
  if (rbd_get_stripe_unit(image, &unit) < 0 || unit == 0 || (unit & (unit - 1)) != 0) return 0;
  if (ImageConfGet(h, image, "rbd_cache_policy") == "writeback" &&
      ImageConfGet(h, image, "rbd_cache") != "false") {
    return 0;
  }
  return unit;
}

}  // namespace rbd_internal

namespace {

// The options the conf files set for client.<id> ([global], [client] or [client.<id>]), each in
// the underscore spelling (Ceph 16 also accepts spaces, not dashes). `paths` is what
// rados_conf_read_file takes: one path or several, comma-separated. A value equal to Ceph's
// default cannot be told from no value through librados, so the files themselves are read.
std::set<std::string> ConfFileOptions(const std::string& paths, const std::string& id) {
  auto trim = [](const std::string& s) {
    const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  // As Ceph normalizes a key: a run of blanks inside it is one '_'; case matters.
  auto normal = [&](const std::string& s) {
    std::string n;
    for (char ch : trim(s)) {
      if (ch != ' ' && ch != '\t') {
        n += ch;
      } else if (n.back() != '_') {
        n += '_';
      }
    }
    return n;
  };
  std::set<std::string> out;
  std::istringstream list(paths);
  for (std::string path; std::getline(list, path, ',');) {
    std::ifstream in(trim(path));
    bool applies = true;  // lines before any section header are global
    for (std::string line; std::getline(in, line);) {
      const std::string l = trim(line.substr(0, line.find_first_of("#;")));
      if (!l.empty() && l.front() == '[') {
        const std::string section = normal(l.substr(1, l.find(']') - 1));
        applies = section == "global" || section == "client" || section == "client." + id;
      } else if (const auto eq = l.find('='); applies && eq != std::string::npos) {
        out.insert(normal(l.substr(0, eq)));
      }
    }
  }
  return out;
}

bool IsCephDefault(const std::string& value, const char* ceph_default) {
  if (value == ceph_default) return true;
  // Durations read back as seconds with a fraction ("300.000000") in some versions.
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  return end != value.c_str() && *end == '\0' && v == std::strtod(ceph_default, nullptr);
}

}  // namespace

Result<std::shared_ptr<RbdStore::Cluster>> RbdStore::Cluster::Get(const RbdStoreOptions& o,
                                                                  const std::string& who) {
  // One entry per conf, client id and keyring. Its lock is held while connecting, so that two
  // stores of one cluster do not both connect; a cluster that does not answer (up to
  // client_mount_timeout) delays only the opens of that cluster.
  struct Entry {
    std::mutex mu;
    std::weak_ptr<Cluster> cluster;  // guarded by mu
  };
  static std::mutex map_mu;
  static std::map<std::string, std::shared_ptr<Entry>> entries;  // guarded by map_mu
  const std::string key = o.conf + '\0' + o.client_id + '\0' + o.keyring +
                          (o.shared() ? std::string("\0shared", 7) : "");
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(map_mu);
    auto& e = entries[key];
    if (e == nullptr) e = std::make_shared<Entry>();
    entry = e;
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  if (auto c = entry->cluster.lock(); c != nullptr && !c->fenced.load()) return c;
  auto c = std::make_shared<Cluster>();
  const std::string conf_name = o.conf.empty() ? "the default ceph.conf" : o.conf;
  std::string id = o.client_id.empty() ? "admin" : o.client_id;
  if (id.rfind("client.", 0) == 0) id = id.substr(7);
  if (int r = rados_create(&c->handle, id.c_str()); r < 0) {
    c->handle = nullptr;
    return Internal(who + "rados_create for client." + id + ": " + ErrnoText(-r));
  }
  if (int r = rados_conf_read_file(c->handle, o.conf.empty() ? nullptr : o.conf.c_str()); r < 0) {
    return InvalidArgument(who + "ceph conf " + conf_name + ": " + ErrnoText(-r));
  }
  if (!o.keyring.empty()) {
    if (int r = rados_conf_set(c->handle, "keyring", o.keyring.c_str()); r < 0) {
      return InvalidArgument(who + "keyring: " + ErrnoText(-r));  // the path is not repeated
    }
  }
  // The files read: the named ones, or the default one ($CEPH_CONF, else /etc/ceph/ceph.conf).
  std::string conf_paths = o.conf;
  if (conf_paths.empty()) {
    const char* env = std::getenv("CEPH_CONF");
    conf_paths = env != nullptr && *env != '\0' ? env : "/etc/ceph/ceph.conf";
  }
  const std::set<std::string> named = ConfFileOptions(conf_paths, id);
  const auto set_default = [&](const Default& d) {
    if (named.count(d.option) == 0 && IsCephDefault(ConfGet(c->handle, d.option), d.ceph_default)) {
      (void)rados_conf_set(c->handle, d.option, d.ours);
    }
  };
  for (const Default& d : kDefaults) set_default(d);
  if (runtime::UsableCpus() < kFewCores) set_default(kFewCoresThreads);
  if (o.shared()) {
    set_default(kSharedNoCache);
    if (ConfGet(c->handle, "rbd_cache") == "true") {
      log::Backing().warn(
          "{}ceph conf {}: rbd_cache true on an image other gateways export: a write it "
          "acknowledged is not seen through another gateway until it is flushed",
          who, conf_name);
    }
  }
  // librbd's calls run on the reactor that makes them (no thread switch per I/O), where they
  // cannot wait; otherwise, or where the conf file says so, librbd queues them to its thread.
  const std::string waits = InlineDispatchWaits(c->handle);
  if (named.count("rbd_non_blocking_aio") == 0 && waits.empty()) {
    (void)rados_conf_set(c->handle, "rbd_non_blocking_aio", "false");
  } else if (ConfGet(c->handle, "rbd_non_blocking_aio") == "false" && !waits.empty()) {
    log::Backing().warn(
        "{}ceph conf {}: rbd_non_blocking_aio false with {}: librbd may block a reactor", who,
        conf_name, waits);
  }
  // An unmapped block must read as zeros (LBPRZ=1): no discard may be skipped.
  (void)rados_conf_set(c->handle, "rbd_skip_partial_discard", "false");
  if (int r = rados_connect(c->handle); r < 0) {
    const std::string mons = ConfGet(c->handle, "mon_host");
    return Status(
        StatusCode::kUnavailable,
        who + "connecting to the Ceph cluster of " + conf_name +
            (mons.empty() ? std::string(" (no mon host set)") : " (mon host " + mons + ")") +
            " as client." + id + " within client_mount_timeout " +
            ConfGet(c->handle, "client_mount_timeout") + " s: " + ErrnoText(-r));
  }
  entry->cluster = c;
  return c;
}

}  // namespace iscsigw::backing
