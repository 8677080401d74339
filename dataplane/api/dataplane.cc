#include "dataplane/api/dataplane.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "base/log.h"
#include "base/pending_steps.h"
#include "dataplane/api/apply_plan.h"
#include "dataplane/api/instrumented_store.h"
#include "dataplane/api/lun_reopen.h"
#include "dataplane/api/lun_state_files.h"
#include "dataplane/backing/file/file_store.h"
#include "dataplane/backing/null_store.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/backing/rbd/rbd_store.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/session.h"
#include "dataplane/runtime/cpus.h"
#include "dataplane/runtime/file_ring.h"
#include "dataplane/runtime/reactor_pool.h"

namespace iscsigw::api {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Result<tcp::endpoint> ParsePortal(const std::string& portal) {
  const auto colon = portal.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("portal " + portal + ": expected HOST:PORT");
  }
  std::string host = portal.substr(0, colon);
  const std::string port_str = portal.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  unsigned long port = 0;
  try {
    size_t used = 0;
    port = std::stoul(port_str, &used);
    if (used != port_str.size() || port > 65535) throw std::out_of_range("port");
  } catch (...) {
    return InvalidArgument("portal " + portal + ": port '" + port_str + "' is not 0..65535");
  }
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("portal " + portal + ": '" + host + "' is not an IP address");
  return tcp::endpoint(addr, static_cast<uint16_t>(port));
}

bool IsDnsName(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  size_t label = 0;
  for (size_t i = 0; i <= host.size(); ++i) {
    if (i == host.size() || host[i] == '.') {
      if (label == 0 || label > 63 || host[i - 1] == '-' || host[i - label] == '-') return false;
      label = 0;
      continue;
    }
    const char c = host[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    ++label;
  }
  return true;
}

// An advertised TargetAddress (RFC 7143 13.8): a DNS name, an IPv4 address or a bracketed IPv6
// address, then a port 1..65535. A wildcard address is refused: no initiator can reach it.
Status ValidateAdvertise(const std::string& a) {
  const std::string what = "advertise " + a + ": ";
  const auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgument(what + "expected HOST:PORT");
  std::string host = a.substr(0, colon);
  const std::string port_str = a.substr(colon + 1);
  if (port_str.empty() || port_str.size() > 5 ||
      port_str.find_first_not_of("0123456789") != std::string::npos || std::stoul(port_str) == 0 ||
      std::stoul(port_str) > 65535) {
    return InvalidArgument(what + "port '" + port_str + "' is not 1..65535");
  }
  boost::system::error_code ec;
  asio::ip::address addr;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return InvalidArgument(what + "unclosed '['");
    addr = asio::ip::make_address_v6(host.substr(1, host.size() - 2), ec);
    if (ec) return InvalidArgument(what + "'" + host + "' is not an IPv6 address");
  } else if (host.find(':') != std::string::npos) {
    return InvalidArgument(what + "an IPv6 address goes in brackets: [ADDR]:PORT");
  } else {
    addr = asio::ip::make_address_v4(host, ec);
    if (ec) {
      if (!IsDnsName(host)) {
        return InvalidArgument(what + "'" + host + "' is neither an IP address nor a DNS name");
      }
      return Status::Ok();
    }
  }
  if (addr.is_unspecified()) {
    return InvalidArgument(what + host + " is a wildcard address, which no initiator can reach");
  }
  return Status::Ok();
}

std::string EndpointString(const tcp::endpoint& ep) {
  if (ep.address().is_v6())
    return "[" + ep.address().to_string() + "]:" + std::to_string(ep.port());
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

#ifdef ISCSIGW_FAULT_INJECTION
constexpr bool kFaultInjectionBuilt = true;
#else
constexpr bool kFaultInjectionBuilt = false;
#endif

// Creates a missing file-backed LUN's file (thick: every block allocated), or refuses when the
// spec does not ask for creation. Existing files and devices are left alone.
Status PrepareFile(const std::string& who, const LunSpec& l, const AllowedPaths& allowed) {
  auto there = allowed.Open(l.path, O_PATH);
  if (there.ok()) return Status::Ok();
  if (there.status().code() != StatusCode::kNotFound) {
    return Status(there.status().code(), who + "file.path " + there.status().message());
  }
  if (!l.create) {
    return NotFound(who + "file.path " + l.path + " does not exist (set file.create to create it)");
  }
  if (l.size_bytes == 0) return InvalidArgument(who + "size_bytes must be set to create a file");
  if (l.read_only) return InvalidArgument(who + "cannot create a file for a read-only LUN");
  if (!l.thick) return Status::Ok();  // FileStore creates it sparse
  auto created = allowed.Open(l.path, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (!created.ok()) {
    return Status(created.status().code(), who + "file.path " + created.status().message());
  }
  const int err = ::posix_fallocate(created.value().get(), 0, static_cast<off_t>(l.size_bytes));
  created.value().Close();
  if (err != 0) {
    (void)allowed.Unlink(l.path);
    // A full file system is the caller's to handle (CSI: RESOURCE_EXHAUSTED), not an I/O error.
    const bool full = err == ENOSPC || err == EDQUOT;
    return Status(full ? StatusCode::kResourceExhausted : StatusCode::kIoError,
                  who + "file.path " + l.path + ": allocate " + std::to_string(l.size_bytes) +
                      " bytes: " + std::strerror(err));
  }
  return Status::Ok();
}

void RaiseOnTarget(const std::vector<std::shared_ptr<scsi::Lun>>& luns, scsi::UnitAttention ua,
                   const std::set<uint32_t>& except_ids) {
  for (const auto& lun : luns) {
    if (except_ids.count(static_cast<uint32_t>(lun->id()))) continue;
    lun->RaiseUnitAttention(ua, nullptr);
  }
}

}  // namespace

namespace {
backing::RbdStoreOptions RbdOptions(const RbdSpec& spec) {
  backing::RbdStoreOptions o;
  o.pool = spec.pool;
  o.ns = spec.ns;
  o.image = spec.image;
  o.conf = spec.conf;
  o.client_id = spec.client_id;
  o.keyring = spec.keyring;
  return o;
}

bool Listed(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}
}  // namespace

Status BackingPolicy::ValidateRbdAllow(std::string_view entry) {
  const size_t slash = entry.find('/');
  const std::string_view pool = entry.substr(0, slash);
  if (pool.empty() || (slash != std::string_view::npos &&
                       (slash + 1 == entry.size() || entry.find('/', slash + 1) != entry.npos))) {
    return InvalidArgument("--rbd-allow " + std::string(entry) +
                           ": expected POOL or POOL/NAMESPACE");
  }
  return Status::Ok();
}

Status BackingPolicy::Check(const LunSpec& lun, std::string_view who) const {
  const std::string w(who);
  if (lun.backing == BackingKind::kFile) {
    if (Status s = paths->Check(lun.path); !s.ok()) {
      return PermissionDenied(w + "file.path " + s.message());
    }
    return Status::Ok();
  }
  if (lun.backing != BackingKind::kRbd) return Status::Ok();
  const RbdSpec& r = lun.rbd;
  if (!Listed(rbd_pools, r.pool) && !Listed(rbd_pools, r.pool + "/" + r.ns)) {
    return PermissionDenied(w + "rbd pool " + r.pool + (r.ns.empty() ? "" : "/" + r.ns) +
                            " is not one --rbd-allow names");
  }
  if (!r.conf.empty() && !Listed(rbd_confs, r.conf)) {
    return PermissionDenied(w + "rbd.conf " + r.conf +
                            ": a ceph.conf comes from the daemon's --rbd-conf, never from the API");
  }
  if (!r.keyring.empty() && !Listed(rbd_keyrings, r.keyring)) {
    return PermissionDenied(w +
                            "rbd.keyring: a keyring comes from the daemon's --rbd-keyring, "
                            "never from the API");
  }
  return Status::Ok();
}

RbdSpec BackingPolicy::WithDefaults(RbdSpec spec) const {
  if (spec.conf.empty() && !rbd_confs.empty()) spec.conf = rbd_confs.front();
  if (spec.keyring.empty() && !rbd_keyrings.empty()) spec.keyring = rbd_keyrings.front();
  return spec;
}

Result<bool> CreateRbdImage(const RbdSpec& spec, uint64_t size_bytes) {
  backing::RbdStoreOptions o = RbdOptions(spec);
  o.size_bytes = size_bytes;
  return backing::RbdStore::CreateImage(o);
}

Status RemoveRbdImage(const RbdSpec& spec, std::chrono::milliseconds busy_wait) {
  return backing::RbdStore::RemoveImage(RbdOptions(spec), busy_wait);
}

Result<std::shared_ptr<SharedObject>> OpenSharedObject(const RbdSpec& where,
                                                       const std::string& oid) {
  return backing::RbdStore::OpenSharedObject(RbdOptions(where), oid);
}

Status ValidateChapCredentials(const ChapCredentials& creds, std::string_view who) {
  return iscsi::ValidateChapCredentials(creds, who);
}

Result<ChapDigests> ParseChapDigests(std::string_view list) {
  return iscsi::ParseChapDigests(list);
}

Status ValidateIscsiName(const std::string& name) {
  // RFC 7143 4.2.7.1 / 6.1: at most 223 bytes, no upper case (stringprep folds case), and one of
  // the iqn., eui. or naa. formats.
  if (name.empty()) return InvalidArgument("name is empty");
  if (name.size() > 223) return InvalidArgument("name " + name + " is longer than 223 bytes");
  for (unsigned char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == ':';
    if (!ok) {
      return InvalidArgument("name " + name + ": character '" +
                             std::string(1, static_cast<char>(c)) +
                             "' is not allowed (lower-case letters, digits, '.', '-', ':')");
    }
  }
  if (name.rfind("iqn.", 0) == 0) {
    // iqn.YYYY-MM.reversed.domain[:anything]
    if (name.size() < 12 || name[8] != '-' || name[11] != '.' ||
        !std::all_of(name.begin() + 4, name.begin() + 8, ::isdigit) ||
        !std::isdigit(static_cast<unsigned char>(name[9])) ||
        !std::isdigit(static_cast<unsigned char>(name[10]))) {
      return InvalidArgument("name " + name + ": an iqn. name is iqn.YYYY-MM.reversed.domain[:id]");
    }
    return Status::Ok();
  }
  auto hex_tail = [&](size_t prefix, std::initializer_list<size_t> lengths) {
    const std::string tail = name.substr(prefix);
    if (std::find(lengths.begin(), lengths.end(), tail.size()) == lengths.end()) return false;
    return std::all_of(tail.begin(), tail.end(), ::isxdigit);
  };
  if (name.rfind("eui.", 0) == 0) {
    if (hex_tail(4, {16})) return Status::Ok();
    return InvalidArgument("name " + name + ": an eui. name has 16 hex digits");
  }
  if (name.rfind("naa.", 0) == 0) {
    if (hex_tail(4, {16, 32})) return Status::Ok();
    return InvalidArgument("name " + name + ": a naa. name has 16 or 32 hex digits");
  }
  return InvalidArgument("name " + name + ": must start with iqn., eui. or naa.");
}

Status ValidateLun(const std::string& target, const LunSpec& lun) {
  const std::string who = "lun " + std::to_string(lun.id) + " of " + target + ": ";
  if (lun.id >= scsi::kMaxLuns) {
    return InvalidArgument(who + "id " + std::to_string(lun.id) + " is out of range 0..255");
  }
  if (lun.block_size != 512 && lun.block_size != 4096) {
    return InvalidArgument(who + "block_size " + std::to_string(lun.block_size) +
                           " is not 512 or 4096");
  }
  if (lun.physical_block_size != 0 && lun.physical_block_size != lun.block_size &&
      !(lun.physical_block_size == 4096 && lun.block_size == 512)) {
    return InvalidArgument(who + "physical_block_size " + std::to_string(lun.physical_block_size) +
                           " is not 0, block_size, or 4096 over a block_size of 512");
  }
  if (lun.size_bytes % lun.block_size != 0) {
    return InvalidArgument(who + "size_bytes " + std::to_string(lun.size_bytes) +
                           " is not a multiple of block_size " + std::to_string(lun.block_size));
  }
  const bool sized_by_medium =
      lun.backing == BackingKind::kFile || lun.backing == BackingKind::kRbd;
  if (!sized_by_medium && lun.size_bytes == 0) {
    return InvalidArgument(who + "size_bytes must be set for a ram or null store");
  }
  if (lun.backing == BackingKind::kFile && lun.path.empty()) {
    return InvalidArgument(who + "file.path is empty");
  }
  if (lun.serial.size() > 32) return InvalidArgument(who + "serial is longer than 32 characters");
  if (lun.backing != BackingKind::kFile && (lun.thick || lun.direct)) {
    return InvalidArgument(who + "thick and direct apply to file backing only");
  }
  if (!sized_by_medium && lun.create) {
    return InvalidArgument(who + "create applies to file and rbd backing only");
  }
  if (lun.backing == BackingKind::kRbd) {
    // Ceph names: a pool or namespace cannot hold '/', an image neither '/' nor '@' (snapshots).
    auto check = [&](const std::string& v, const char* field, const char* bad) -> Status {
      if (v.size() > 255) return InvalidArgument(who + field + " is longer than 255 bytes");
      for (unsigned char c : v) {
        if (c < 0x20 || c == 0x7f || std::strchr(bad, c) != nullptr) {
          return InvalidArgument(who + field + " " + v + ": character '" +
                                 std::string(1, static_cast<char>(c)) + "' is not allowed");
        }
      }
      return Status::Ok();
    };
    if (lun.rbd.pool.empty()) return InvalidArgument(who + "rbd.pool is empty");
    if (lun.rbd.image.empty()) return InvalidArgument(who + "rbd.image is empty");
    if (Status s = check(lun.rbd.pool, "rbd.pool", "/"); !s.ok()) return s;
    if (Status s = check(lun.rbd.image, "rbd.image", "/@"); !s.ok()) return s;
    if (Status s = check(lun.rbd.ns, "rbd.namespace", "/"); !s.ok()) return s;
    if (Status s = check(lun.rbd.client_id, "rbd.client_id", "/ "); !s.ok()) return s;
    // librados reads the conf file in the gateway, and a conf names further files (log file,
    // admin socket, keyring): a path relative to wherever the daemon was started is a surprise.
    // The keyring's path is not repeated in the message.
    for (const auto& [path, field] :
         {std::pair{&lun.rbd.conf, "rbd.conf"}, std::pair{&lun.rbd.keyring, "rbd.keyring"}}) {
      if (path->empty()) continue;
      if (path->front() != '/') return InvalidArgument(who + field + " must be an absolute path");
      for (unsigned char c : *path) {
        if (c < 0x20 || c == 0x7f) {
          return InvalidArgument(who + field + " holds a control character");
        }
      }
    }
    if (lun.create && lun.size_bytes == 0) {
      return InvalidArgument(who + "size_bytes must be set to create an rbd image");
    }
  }
  return Status::Ok();
}

Status ValidateAclEntry(const std::string& target, const AclEntrySpec& entry) {
  if (Status s = ValidateIscsiName(entry.initiator); !s.ok()) {
    return InvalidArgument("acl of " + target + ": initiator " + s.message());
  }
  for (const auto& src : entry.sources) {
    if (!iscsi::SourceNet::Parse(src)) {
      return InvalidArgument("acl entry " + entry.initiator + " of " + target + ": source '" + src +
                             "' is not an address or CIDR with zero host bits");
    }
  }
  return Status::Ok();
}

struct Dataplane::Impl {
  explicit Impl(const Options& o)
      : pool(o.reactors ? o.reactors : runtime::UsableCpus()),
        gateway(pool, o.gateway),
        gateway_id(std::max<uint16_t>(o.gateway_id, 1)),
        shared_images(o.gateway_id != 0),
        backing(o.backing) {
    if (!o.state_dir.empty()) {
      lun_state = std::make_unique<LunStateFiles>(o.state_dir + "/lun-state",
                                                  [this](unsigned slot, std::function<void()> fn) {
                                                    asio::post(pool.context(slot), std::move(fn));
                                                  });
    }
  }

  // The ALUA access state of every LUN through this gateway, looked at four times a second: a
  // change (an rbd image's exclusive lock moved between gateways) that holds for 4 s becomes
  // ASYMMETRIC ACCESS STATE CHANGED for the sessions (scsi::Engine::CheckAccessState). Nothing in
  // it waits. Looks, 250 ms apart: a new state must hold 4 s. An initiator writing through two
  // gateways in turn (libiscsi's MultipathIO tests, a multibus map) moves the lock with each turn;
  // states that last are what matter to an initiator choosing paths.
  static constexpr unsigned kAccessStateSettle = 16;
  asio::awaitable<void> AccessStateLoop() {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    while (!stopping.load()) {
      timer.expires_after(std::chrono::milliseconds(250));
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (stopping.load()) break;
      const auto snapshot = gateway.snapshot();
      for (const auto& t : snapshot->targets) {
        for (const auto& lun : t->info.luns) {
          if (scsi::Engine::CheckAccessState(*lun, kAccessStateSettle)) {
            log::Scsi().info(
                "lun {} of {}: now {} through this gateway", lun->id(), t->info.name,
                lun->reported_preferred().load() ? "active/optimized" : "active/non-optimized");
          }
        }
      }
    }
  }

  asio::awaitable<void> AcceptLoop(tcp::acceptor* acc) {
    asio::steady_timer backoff(acc->get_executor());
    while (!stopping.load()) {
      const unsigned r = pool.PickLeastLoaded();
      auto [ec, sock] =
          co_await acc->async_accept(pool.context(r), asio::as_tuple(asio::use_awaitable));
      if (stopping.load() || !acc->is_open()) break;
      if (ec) {
        // EMFILE and friends: back off instead of spinning.
        log::Iscsi().warn("accept on {}: {}", EndpointString(acc->local_endpoint()), ec.message());
        backoff.expires_after(std::chrono::milliseconds(100));
        co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      // docs/security.md, "Connections": one source may hold max_connections_per_source; past
      // it, or past max_connections, the oldest connection still logging in (then the oldest
      // discovery session) of that source, or of any, makes room.
      boost::system::error_code peer_ec;
      const auto peer = sock.remote_endpoint(peer_ec);
      const std::string source =
          iscsi::AuthThrottle::SourcePrefix(peer_ec ? "?" : peer.address().to_string());
      const auto& gopts = gateway.options();
      bool admitted = false;
      if (gateway.SourceConnections(source) >= gopts.max_connections_per_source) {
        admitted = EvictOldest(&source);  // its slot passes to this one
        if (!admitted) {
          ISCSIGW_LOG_LIMITED(accept_log_limiter, log::Iscsi(), spdlog::level::warn,
                              "{} has {} connections, every one in a normal session: refusing "
                              "another (--max-connections-per-source)",
                              source, gopts.max_connections_per_source);
        }
      } else {
        admitted = gateway.TryAddConnection() || EvictOldest(nullptr);
        if (!admitted) {
          ISCSIGW_LOG_LIMITED(accept_log_limiter, log::Iscsi(), spdlog::level::warn,
                              "connection limit {} reached, every connection in a normal "
                              "session: refusing a connection",
                              gopts.max_connections);
        }
      }
      if (!admitted) {
        boost::system::error_code ignored;
        sock.close(ignored);
        continue;
      }
      // Counted now, not when the connection starts on its reactor: the next accept picks its
      // reactor right away and must see this one.
      pool.AddConnection(r, 1);
      auto conn = std::make_shared<iscsi::Connection>(gateway, r, std::move(sock), ++next_conn_id);
      {
        std::lock_guard lock(conns_mu);
        std::erase_if(conns, [](const auto& w) { return w.second.expired(); });
        conns.emplace_back(r, conn);
      }
      asio::post(pool.context(r), [conn] { conn->Start(); });
    }
  }

  // At a connection limit: evicts the oldest connection still logging in, or else the oldest
  // discovery session, of `source` (any source when null), and hands its slot to the one just
  // accepted (iscsi::Connection::EvictIfLoggingIn, EvictIfDiscovery). False when every such
  // connection is in a normal session.
  bool EvictOldest(const std::string* source) {
    std::shared_ptr<iscsi::Connection> victim;
    unsigned victim_reactor = 0;
    const char* what = "";
    {
      std::lock_guard lock(conns_mu);
      for (int pass = 0; pass < 2 && !victim; ++pass) {
        for (const auto& [r, weak] : conns) {  // oldest first
          auto c = weak.lock();
          if (!c || (source != nullptr && c->source() != *source)) continue;
          if (pass == 0 ? c->EvictIfLoggingIn() : c->EvictIfDiscovery()) {
            victim = std::move(c);
            victim_reactor = r;
            what = pass == 0 ? "connection still logging in" : "discovery session";
            break;
          }
        }
      }
    }
    if (!victim) return false;
    ISCSIGW_LOG_LIMITED(accept_log_limiter, log::Iscsi(), spdlog::level::warn,
                        "connection limit reached{}{}: dropping the oldest {} to admit a new one",
                        source != nullptr ? " for " : "", source != nullptr ? *source : "", what);
    asio::post(pool.context(victim_reactor), [victim] { victim->Close(); });
    return true;
  }

  runtime::ReactorPool pool;
  iscsi::Gateway gateway;
  const uint16_t gateway_id;  // target port group and relative port id (Options::gateway_id)
  const bool shared_images;   // other gateways export the rbd images too
  const BackingPolicy backing;
  log::RateLimiter accept_log_limiter;  // used by the accept loops only, all on reactor 0
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::atomic<bool> stopping{false};
  // UnresponsiveReactors: per reactor, when the no-op posted to it was posted (steady clock, ns),
  // 0 when none waits. Set by the prober, cleared by the reactor.
  std::unique_ptr<std::atomic<int64_t>[]> ping_posted =
      std::make_unique<std::atomic<int64_t>[]>(pool.size());
  std::atomic<uint64_t> next_conn_id{0};
  mutable std::mutex conns_mu;
  std::vector<std::pair<unsigned, std::weak_ptr<iscsi::Connection>>> conns;  // guarded

  // How a live LUN's store is reopened (lun_reopen.h); under config_mu.
  ReopenContext Reopening();

  mutable std::mutex config_mu;
  struct LunEntry {
    LunSpec spec;
    std::shared_ptr<scsi::Lun> lun;
  };
  std::map<LunKey, LunEntry> luns;  // guarded by config_mu

  // The steps of Dataplane::Apply after ValidateConfig, all but OpenRbdImages under config_mu.
  //
  // The LUNs served now, as PlanApply takes them.
  std::map<LunKey, LiveLun> Live() const;
  // The rbd images of the LUNs the plan opens, opened without the lock; in kStrict, up to the
  // first that fails.
  using PreOpened = std::map<LunKey, Result<std::unique_ptr<backing::RbdStore>>>;
  PreOpened OpenRbdImages(const Config& config, const ApplyPlan& plan, ApplyMode mode);
  // A new LUN's store, ready to serve: its file created when the spec asks, opened (or taken from
  // `pre`), behind a fault wrapper when the spec asks and an InstrumentedStore.
  struct LunStore {
    std::shared_ptr<backing::BackingStore> store;
    std::shared_ptr<backing::OfflineRbdStore> offline;    // kStartup: an rbd image not open yet
    std::shared_ptr<backing::SharedObject> shared_state;  // rbd with other gateways
    uint64_t size = 0;
  };
  Result<LunStore> OpenStore(const std::string& target, const LunSpec& l, const std::string& who,
                             ApplyMode mode, PreOpened& pre);
  scsi::LunConfig LunConfigOf(const std::string& target, const LunSpec& l,
                              std::shared_ptr<backing::SharedObject> shared_state);
  // What a configuration builds before anything of it is published. Dropped unpublished, it
  // rolls the change back: the stores it opened close, and `luns` and the snapshot the gateway
  // serves stay as they were.
  struct Staged {
    std::map<LunKey, LunEntry> luns;
    std::shared_ptr<iscsi::Snapshot> snapshot;
    struct Grow {
      std::shared_ptr<scsi::Lun> lun;
      uint64_t size;
      std::string who;
    };
    std::vector<Grow> grows;
    // rbd LUNs configured offline (kStartup), whose retry starts once the configuration is live.
    struct OfflineStart {
      std::shared_ptr<backing::OfflineRbdStore> store;
      std::shared_ptr<scsi::Lun> lun;
    };
    std::vector<OfflineStart> offline_starts;
    // Targets whose LUNs were added or removed, with the ids added.
    std::vector<std::pair<std::shared_ptr<iscsi::TargetConfig>, std::set<uint32_t>>>
        changed_inventory;
  };
  // Reopens the LUNs the plan reopens (in place, at once) and builds the rest into `staged`.
  Status Stage(const Config& config, const ApplyPlan& plan, ApplyMode mode, PreOpened& pre,
               Staged* staged);
  // Grows the stores of LUNs whose size grew; every I_T nexus of each hears of it.
  Status GrowStores(const std::vector<Staged::Grow>& grows);
  // Publishes `staged`: unit attentions for the targets whose LUNs changed, the durable state of
  // removed LUNs removed, the new snapshot served, offline rbd LUNs retried.
  void Commit(const ApplyPlan& plan, Staged staged);

  bool stopped = false;
  // Declared last: its writer drains (posting to the reactors) before the pool goes.
  std::unique_ptr<LunStateFiles> lun_state;
};

Dataplane::Dataplane(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Dataplane::~Dataplane() { Stop(); }

unsigned Dataplane::reactors() const { return impl_->pool.size(); }

std::vector<unsigned> Dataplane::UnresponsiveReactors(std::chrono::milliseconds within) {
  std::vector<unsigned> stalled;
  if (impl_->stopping.load()) return stalled;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  for (unsigned i = 0; i < impl_->pool.size(); ++i) {
    std::atomic<int64_t>& posted = impl_->ping_posted[i];
    const int64_t since = posted.load(std::memory_order_acquire);
    if (since != 0) {
      // One no-op at a time: a stalled reactor's queue does not grow with each probe.
      if (now - since > std::chrono::nanoseconds(within).count()) stalled.push_back(i);
      continue;
    }
    posted.store(now, std::memory_order_release);
    asio::post(impl_->pool.context(i), [&posted] { posted.store(0, std::memory_order_release); });
  }
  return stalled;
}

void Dataplane::PostForTest(unsigned reactor, std::function<void()> fn) {
  asio::post(impl_->pool.context(reactor), std::move(fn));
}

const std::vector<std::string>& Dataplane::advertised() const {
  return impl_->gateway.options().advertise;
}

Result<std::unique_ptr<Dataplane>> Dataplane::Start(const Options& options) {
  for (const auto& a : options.gateway.advertise) {
    if (Status s = ValidateAdvertise(a); !s.ok()) return s;
  }
  // Whether file LUNs will have io_uring is known (and monitored) before the first one opens.
  runtime::FileRing::Probe();
  auto impl = std::make_unique<Impl>(options);
  std::vector<std::string> bound;
  for (const auto& portal : options.portals) {
    auto ep = ParsePortal(portal);
    if (!ep.ok()) return ep.status();
    auto acc = std::make_unique<tcp::acceptor>(impl->pool.context(0));
    boost::system::error_code ec;
    acc->open(ep->protocol(), ec);
    if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc->bind(ep.value(), ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status(StatusCode::kUnavailable, "portal " + portal + ": " + ec.message());
    bound.push_back(EndpointString(acc->local_endpoint()));
    impl->acceptors.push_back(std::move(acc));
  }
  Impl* raw = impl.get();
  for (auto& acc : impl->acceptors) {
    tcp::acceptor* a = acc.get();
    asio::co_spawn(
        impl->pool.context(0), [raw, a] { return raw->AcceptLoop(a); }, asio::detached);
  }
  asio::co_spawn(
      impl->pool.context(0), [raw] { return raw->AccessStateLoop(); }, asio::detached);
  impl->pool.Start();
  std::unique_ptr<Dataplane> dp(new Dataplane(std::move(impl)));
  dp->bound_ = std::move(bound);
  return dp;
}

namespace {
backing::RbdStoreOptions RbdOptionsOf(const LunSpec& l, const BackingPolicy& policy,
                                      uint16_t gateway_id) {
  backing::RbdStoreOptions o = RbdOptions(policy.WithDefaults(l.rbd));
  o.create = l.create;
  o.size_bytes = l.size_bytes;
  o.read_only = l.read_only;
  o.gateway_id = gateway_id;
  return o;
}

backing::FileStoreOptions FileOptionsOf(const LunSpec& l, const BackingPolicy& policy) {
  backing::FileStoreOptions fo;
  fo.path = l.path;
  fo.size_bytes = l.size_bytes;
  fo.read_only = l.read_only;
  fo.direct = l.direct;
  fo.allowed = policy.paths;
  return fo;
}

// A fault wrapper's delays: a steady timer on the reactor.
backing::DeferFn DeferOn(runtime::ReactorPool* pool) {
  return [pool](unsigned slot, std::chrono::milliseconds delay, std::function<void()> fn) {
    auto timer = std::make_shared<asio::steady_timer>(pool->context(slot), delay);
    timer->async_wait([timer, fn = std::move(fn)](const boost::system::error_code&) { fn(); });
  };
}
}  // namespace

ReopenContext Dataplane::Impl::Reopening() {
  const uint16_t gw = shared_images ? gateway_id : 0;
  auto open = [this, gw](const LunSpec& l) -> Result<OpenedMedium> {
    if (l.backing == BackingKind::kFile) {
      auto fs = backing::FileStore::Open(FileOptionsOf(l, backing), pool.contexts());
      if (!fs.ok()) return fs.status();
      return OpenedMedium{std::move(fs).value(), nullptr};
    }
    if (l.backing == BackingKind::kRbd) {
      auto rs = backing::RbdStore::Open(RbdOptionsOf(l, backing, gw), pool.contexts());
      if (!rs.ok()) return rs.status();
      std::shared_ptr<backing::SharedObject> shared = rs.value()->shared_object();
      return OpenedMedium{std::move(rs).value(), std::move(shared)};
    }
    return Internal("a ram or null LUN's medium is never reopened");
  };
  return ReopenContext{gateway, pool, std::move(open), DeferOn(&pool)};
}

namespace {
// A target as the iSCSI layer serves it, its LUNs still to come.
std::shared_ptr<iscsi::TargetConfig> NewTargetConfig(const TargetSpec& t, uint16_t gateway_id) {
  auto tc = std::make_shared<iscsi::TargetConfig>();
  tc->info.name = t.name;
  // A target has one port on each gateway: its relative port id and its target port group are
  // the gateway's id, the same for every target and across restarts (VPD 0x83, RTPG).
  tc->info.relative_port_id = gateway_id;
  tc->info.target_port_group = gateway_id;
  // And its portal group tag: the SCSI target port name (VPD 0x83, "name,t,0x<tpgt>") must
  // differ between the ports of one target.
  tc->info.tpgt = gateway_id;
  tc->alias = t.alias;
  tc->allow_any_initiator = t.allow_any_initiator;
  for (const auto& e : t.acl) {
    iscsi::AclEntry entry;
    entry.initiator = e.initiator;
    for (const auto& src : e.sources) entry.sources.push_back(*iscsi::SourceNet::Parse(src));
    tc->acl.push_back(std::move(entry));
  }
  tc->chap = t.chap;
  return tc;
}

const LunPlan* FindLun(const TargetPlan& tp, uint32_t id) {
  for (const auto& lp : tp.luns) {
    if (lp.spec.id == id) return &lp;
  }
  return nullptr;
}
}  // namespace

std::map<LunKey, LiveLun> Dataplane::Impl::Live() const {
  std::map<LunKey, LiveLun> live;
  for (const auto& [key, entry] : luns)
    live.emplace(key, LiveLun{entry.spec, LeftClosed(*entry.lun)});
  return live;
}

Dataplane::Impl::PreOpened Dataplane::Impl::OpenRbdImages(const Config& config,
                                                          const ApplyPlan& plan, ApplyMode mode) {
  PreOpened pre;
  for (size_t i = 0; i < config.targets.size(); ++i) {
    const TargetSpec& t = config.targets[i];
    for (const auto& l : t.luns) {
      // A LUN whose settings change reopens its store itself, once the old one has closed.
      const LunPlan* lp = FindLun(plan.targets[i], l.id);
      if (l.backing != BackingKind::kRbd || lp->action != LunPlan::Action::kOpen) continue;
      auto store = backing::RbdStore::Open(RbdOptionsOf(l, backing, shared_images ? gateway_id : 0),
                                           pool.contexts());
      const bool failed = !store.ok();
      pre.emplace(LunKey{t.name, l.id}, std::move(store));
      if (failed && mode == ApplyMode::kStrict) return pre;
    }
  }
  return pre;
}

Result<Dataplane::Impl::LunStore> Dataplane::Impl::OpenStore(const std::string& target,
                                                             const LunSpec& l,
                                                             const std::string& who, ApplyMode mode,
                                                             PreOpened& pre) {
  if (l.backing == BackingKind::kFile) {
    if (Status s = PrepareFile(who, l, *backing.paths); !s.ok()) {
      return s;
    }
  }
  LunStore out;
  std::shared_ptr<backing::BackingStore>& store = out.store;
  uint64_t& size = out.size;
  size = l.size_bytes;
  switch (l.backing) {
    case BackingKind::kRam:
      store = backing::NewRamStore(l.size_bytes);
      break;
    case BackingKind::kNull:
      store = backing::NewNullStore(l.size_bytes);
      break;
    case BackingKind::kFile: {
      auto fs = backing::FileStore::Open(FileOptionsOf(l, backing), pool.contexts());
      if (!fs.ok()) {
        return Status(fs.status().code(), who + fs.status().message());
      }
      size = fs.value()->size_bytes();
      if (size % l.block_size != 0) {
        return InvalidArgument(who + "file " + l.path + " size " + std::to_string(size) +
                               " is not a multiple of block_size " + std::to_string(l.block_size));
      }
      store = std::move(fs).value();
      break;
    }
    case BackingKind::kRbd: {
      const backing::RbdStoreOptions ro = RbdOptionsOf(l, backing, shared_images ? gateway_id : 0);
      auto opened = pre.find(LunKey{target, l.id});
      auto rs = opened != pre.end() ? std::move(opened->second)
                                    : backing::RbdStore::Open(ro, pool.contexts());
      if (!rs.ok() && mode == ApplyMode::kStartup &&
          rs.status().code() != StatusCode::kInvalidArgument) {
        // One unreachable cluster must not keep the daemon, and every other LUN, down.
        out.offline = std::make_shared<backing::OfflineRbdStore>(ro, pool.contexts(), l.block_size,
                                                                 who + rs.status().message());
        size = out.offline->size_bytes();
        out.shared_state = out.offline->shared_object();
        store = out.offline;
        break;
      }
      if (!rs.ok()) {
        return Status(rs.status().code(), who + rs.status().message());
      }
      size = rs.value()->size_bytes();
      if (size % l.block_size != 0) {
        return InvalidArgument(who + "rbd image " + rs.value()->name() + " size " +
                               std::to_string(size) + " is not a multiple of block_size " +
                               std::to_string(l.block_size));
      }
      out.shared_state = rs.value()->shared_object();
      store = std::move(rs).value();
      break;
    }
  }
  if (l.fault.active()) {
    // Inside the instrumented wrapper, so that injected errors are counted like real ones.
    store = std::make_shared<backing::FaultStore>(std::move(store), l.fault, DeferOn(&pool));
    log::Ctl().warn("lun {} of {}: fault injection on (delay {} ms, error {}, after {} calls)",
                    l.id, target, l.fault.delay.count(), l.fault.error, l.fault.after_ops);
  }
  // Backing I/O errors are counted per LUN around every store call, and the latency of the
  // stores whose calls can wait (files, rbd); ram and null complete inline in memory.
  store = std::make_shared<InstrumentedStore>(
      std::move(store), runtime::Stats::Global().ForLun(target, l.id),
      l.backing == BackingKind::kFile || l.backing == BackingKind::kRbd);
  return out;
}

scsi::LunConfig Dataplane::Impl::LunConfigOf(const std::string& target, const LunSpec& l,
                                             std::shared_ptr<backing::SharedObject> shared_state) {
  scsi::LunConfig lc;
  lc.id = l.id;
  lc.block_size = l.block_size;
  lc.physical_block_size = l.physical_block_size;
  lc.read_only = l.read_only;
  // Other gateways export an rbd image too: its reservations live in the image's shared
  // object. Without one (the image was not reachable at start) none here, rather than one
  // that fences this gateway's paths only.
  lc.reservations = !(shared_images && l.backing == BackingKind::kRbd) || shared_state != nullptr;
  lc.shared_state = std::move(shared_state);
  const uint64_t h = Fnv1a(target + "/" + std::to_string(l.id));
  if (l.serial.empty()) {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    lc.serial = buf;
  } else {
    lc.serial = l.serial;
  }
  // NAA 6 (IEEE Registered Extended) with a locally derived, stable identifier.
  lc.naa_id = l.device_id ? l.device_id : ((uint64_t{6} << 60) | (h & 0x0fffffffffffffffull));
  lc.state_store = lun_state ? lun_state->ForLun(target, l.id) : nullptr;
  lc.task_aborter = std::make_shared<GatewayTaskAborter>(gateway, target);
  lc.post = [p = &pool](unsigned slot, std::function<void()> fn) {
    asio::post(p->context(slot), std::move(fn));
  };
  return lc;
}

Status Dataplane::Impl::Stage(const Config& config, const ApplyPlan& plan, ApplyMode mode,
                              PreOpened& pre, Staged* staged) {
  staged->snapshot = std::make_shared<iscsi::Snapshot>();
  staged->snapshot->discovery_chap = config.discovery_chap;
  for (size_t i = 0; i < config.targets.size(); ++i) {
    const TargetSpec& t = config.targets[i];
    const TargetPlan& tp = plan.targets[i];
    auto tc = NewTargetConfig(t, gateway_id);
    for (const LunPlan& lp : tp.luns) {
      const LunSpec& l = lp.spec;
      const LunKey key{t.name, l.id};
      const std::string who = "lun " + std::to_string(l.id) + " of " + t.name + ": ";
      if (l.fault.active() && !kFaultInjectionBuilt) {
        return InvalidArgument(who +
                               "fault is for tests; this build has no fault injection "
                               "(configure with -DISCSIGW_FAULT_INJECTION=ON)");
      }
      if (lp.action != LunPlan::Action::kOpen) {
        LunEntry& entry = luns.at(key);
        if (lp.action == LunPlan::Action::kReopen) {
          if (Status s = ReopenLun(Reopening(), *entry.lun, entry.spec, lp.reopen_to, who);
              !s.ok()) {
            return s;
          }
          entry.spec = lp.reopen_to;  // what the store is now, whatever else this change meets
        }
        staged->luns[key] = LunEntry{l, entry.lun};
        tc->info.luns.push_back(entry.lun);
        if (lp.grow) staged->grows.push_back({entry.lun, l.size_bytes, who});
        continue;
      }
      auto opened = OpenStore(t.name, l, who, mode, pre);
      if (!opened.ok()) return opened.status();
      LunStore& ls = opened.value();
      auto lun =
          std::make_shared<scsi::Lun>(LunConfigOf(t.name, l, ls.shared_state), std::move(ls.store));
      staged->luns[key] = LunEntry{l, lun};
      if (ls.offline) staged->offline_starts.push_back({ls.offline, lun});
      tc->info.luns.push_back(lun);
      log::Ctl().info(
          "lun {} of {}: {} store, {} bytes, block size {}{}", l.id, t.name,
          l.backing == BackingKind::kRam    ? "ram (volatile)"
          : l.backing == BackingKind::kNull ? "null"
          : l.backing == BackingKind::kRbd
              ? "rbd " + l.rbd.pool + "/" + (l.rbd.ns.empty() ? "" : l.rbd.ns + "/") + l.rbd.image
              : "file " + l.path,
          ls.size, l.block_size, l.read_only ? ", read-only" : "");
    }
    if (tp.inventory_changed) staged->changed_inventory.push_back({tc, tp.added});
    staged->snapshot->targets.push_back(std::move(tc));
  }
  return Status::Ok();
}

Status Dataplane::Impl::GrowStores(const std::vector<Staged::Grow>& grows) {
  for (const auto& g : grows) {
    if (g.size % g.lun->block_size() != 0) {
      return InvalidArgument(g.who + "size_bytes " + std::to_string(g.size) +
                             " is not a multiple of block_size " +
                             std::to_string(g.lun->block_size()));
    }
    if (const int err = g.lun->store().Grow(g.size); err != 0) {
      return Status(
          err == ENOSPC ? StatusCode::kResourceExhausted : StatusCode::kIoError,
          g.who + "cannot grow to " + std::to_string(g.size) + " bytes: " + std::strerror(err));
    }
    // SBC-3 4.7 / SPC-4 6.x: every I_T nexus learns of the new capacity.
    g.lun->RaiseUnitAttention(scsi::UnitAttention{0x2a, 0x09}, nullptr);
    log::Ctl().info("{}grown to {} bytes", g.who, g.size);
  }
  return Status::Ok();
}

void Dataplane::Impl::Commit(const ApplyPlan& plan, Staged staged) {
  for (const auto& [tc, added] : staged.changed_inventory) {
    // SPC-4 7.x REPORT LUNS: REPORTED LUNS DATA HAS CHANGED on the LUNs that existed before.
    RaiseOnTarget(tc->info.luns, scsi::UnitAttention{0x3f, 0x0e}, added);
  }
  if (lun_state) {
    // A LUN that is gone takes its durable SCSI state with it: a LUN created later under the same
    // id must not inherit its persistent reservations or saved mode pages.
    for (const auto& key : plan.removed) lun_state->Remove(luns.at(key).lun->config().state_store);
  }
  luns = std::move(staged.luns);
  gateway.Publish(std::move(staged.snapshot));
  for (auto& o : staged.offline_starts) {
    o.store->Start([weak = std::weak_ptr<scsi::Lun>(o.lun)](uint64_t offline_size, uint64_t size) {
      // SBC-3 4.7: the image's size is not the one the LUN reported while offline.
      auto lun = weak.lock();
      if (lun && size != offline_size) {
        lun->RaiseUnitAttention(scsi::UnitAttention{0x2a, 0x09}, nullptr);
      }
    });
  }
}

// Validate, plan, build the new LUNs' stores, and publish them, or nothing: a change that fails
// after validation drops what it built, and the LUNs and targets served stay as they were. What
// cannot be taken back stays: a store reopened in place keeps its new settings
// (docs/live-lun-changes.md), one grown before another failed to grow its size.
Status Dataplane::Apply(const Config& config, ApplyMode mode) {
  // The whole configuration is checked first: nothing reaches a cluster for a refused change.
  if (Status s = ValidateConfig(config, impl_->backing, mode); !s.ok()) return s;

  // rbd images are opened before the configuration lock is taken: an open waits for its cluster
  // (up to client_mount_timeout), and lun get/list and the metrics scrape, which take the lock,
  // must not wait with it. Only LUNs that are new or whose backing changed are opened, in order;
  // a strict change stops at the first that fails (the locked pass refuses it there). Changes are
  // serialized by the caller (state::StateStore), so the locked pass finds the LUNs as they were.
  Impl::PreOpened pre;
  {
    ApplyPlan plan;
    {
      std::lock_guard lock(impl_->config_mu);
      plan = PlanApply(impl_->Live(), config);
    }
    pre = impl_->OpenRbdImages(config, plan, mode);
  }

  std::lock_guard lock(impl_->config_mu);
  const ApplyPlan plan = PlanApply(impl_->Live(), config);
  // Unit attentions are raised only once everything opened and the snapshot is about to go out.
  Impl::Staged staged;
  if (Status s = impl_->Stage(config, plan, mode, pre, &staged); !s.ok()) return s;
  if (Status s = impl_->GrowStores(staged.grows); !s.ok()) return s;
  impl_->Commit(plan, std::move(staged));
  return Status::Ok();
}

std::optional<Dataplane::LunStatus> Dataplane::LunStatusOf(const std::string& target,
                                                           uint32_t lun) const {
  std::lock_guard lock(impl_->config_mu);
  auto it = impl_->luns.find({target, lun});
  if (it == impl_->luns.end()) return std::nullopt;
  const backing::BackingStore& store = it->second.lun->store();
  LunStatus now{store.size_bytes(), {}, it->second.lun->reported_preferred().load()};
  if (int err = store.ready(); err != 0) {
    now.offline_reason = store.offline_reason();
    if (now.offline_reason.empty()) now.offline_reason = std::strerror(err);
  }
  return now;
}

std::vector<Dataplane::LunUsage> Dataplane::LunUsages() const {
  std::lock_guard lock(impl_->config_mu);
  std::vector<LunUsage> out;
  out.reserve(impl_->luns.size());
  for (const auto& [key, entry] : impl_->luns) {
    backing::BackingStore& store = entry.lun->store();
    out.push_back({key.first, key.second, store.size_bytes(), store.allocated_bytes(),
                   store.ready() == 0, entry.lun->reported_preferred().load()});
  }
  return out;
}

size_t Dataplane::connections() const {
  std::lock_guard lock(impl_->conns_mu);
  size_t n = 0;
  for (const auto& [r, weak] : impl_->conns) n += weak.expired() ? 0 : 1;
  return n;
}

std::vector<iscsi::SessionInfo> Dataplane::ListSessions() const {
  return impl_->gateway.ListSessions();
}

bool Dataplane::DropSession(uint16_t tsih) { return impl_->gateway.DropSession(tsih); }

size_t Dataplane::DropSessions(const std::string& target, const std::string& initiator,
                               bool only_disallowed) {
  auto snap = impl_->gateway.snapshot();
  size_t n = 0;
  for (const auto& info : impl_->gateway.ListSessions()) {
    if (info.discovery) continue;
    if (!target.empty() && info.target_name != target) continue;
    if (!initiator.empty() && info.initiator_name != initiator) continue;
    if (only_disallowed) {
      auto tc = snap->Find(info.target_name);
      if (tc && tc->Allows(info.initiator_name, info.peer)) continue;
    }
    if (impl_->gateway.DropSession(info.tsih)) ++n;
  }
  return n;
}

bool Dataplane::RequestLogout(uint16_t tsih, std::chrono::seconds within) {
  auto s = impl_->gateway.FindSession(tsih);
  if (!s) return false;
  asio::post(impl_->pool.context(s->reactor()), [s, within] {
    if (auto* c = s->connection()) c->RequestLogout(within);
  });
  return true;
}

void Dataplane::Stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping.store(true);
  // Stop accepting.
  {
    std::promise<void> done;
    asio::post(impl_->pool.context(0), [this, &done] {
      for (auto& acc : impl_->acceptors) {
        boost::system::error_code ec;
        acc->close(ec);
      }
      done.set_value();
    });
    done.get_future().wait();
  }
  // Close every connection on its own reactor; tasks still waiting for data are failed, tasks in
  // a store finish before their connection goes.
  {
    std::lock_guard lock(impl_->conns_mu);
    for (auto& [r, weak] : impl_->conns) {
      if (auto c = weak.lock()) asio::post(impl_->pool.context(r), [c] { c->Close(); });
    }
  }
  // Make every acknowledged write durable.
  {
    std::lock_guard lock(impl_->config_mu);
    for (auto& [key, entry] : impl_->luns) {
      if (!entry.lun->store().persistent()) continue;
      std::promise<int> done;
      auto* lun = entry.lun.get();
      const PendingStep step("the flush of lun " + std::to_string(key.second) + " of " + key.first);
      asio::post(impl_->pool.context(0), [lun, &done] {
        lun->store().Flush(
            0, backing::IoCompletion{
                   [](void* ctx, int err) { static_cast<std::promise<int>*>(ctx)->set_value(err); },
                   &done});
      });
      const int err = done.get_future().get();
      if (err != 0) {
        log::Backing().error("flush of lun {} of {} at shutdown failed: {}", key.second, key.first,
                             std::strerror(err));
      }
    }
  }
  // Flushes of IMMED SYNCHRONIZE CACHE commands (answered already) complete on the reactors,
  // which must still run then: a store's completion must not find its reactor gone.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (scsi::Lun::DetachedFlushesInFlight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (const uint64_t left = scsi::Lun::DetachedFlushesInFlight(); left > 0) {
    log::Backing().error("{} IMMED SYNCHRONIZE CACHE flush(es) still in flight after 60 s", left);
  }
  impl_->pool.Stop();
  // Retry threads of offline rbd LUNs removed on a reactor: none may outlive the process's state.
  backing::OfflineRbdStore::JoinRetiredRetries();
}

}  // namespace iscsigw::api
