#include "dataplane/iscsi/gateway.h"

#include <arpa/inet.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <charconv>
#include <cstring>

#include "dataplane/iscsi/session.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::iscsi {

namespace {

// Parses a textual IPv4 or IPv6 address (an "ip:port" or "[v6]:port" suffix is stripped) into the
// IPv6 form; IPv4 becomes ::ffff:a.b.c.d.
std::optional<std::array<uint8_t, 16>> ParseAddress(std::string_view s) {
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    s = s.substr(1, close - 1);
  } else if (std::count(s.begin(), s.end(), ':') == 1) {
    s = s.substr(0, s.find(':'));  // a.b.c.d:port
  }
  const std::string text(s);
  std::array<uint8_t, 16> out{};
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(&out[12], &v4, 4);
    return out;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    std::memcpy(out.data(), &v6, 16);
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::optional<SourceNet> SourceNet::Parse(std::string_view cidr) {
  const auto slash = cidr.find('/');
  const std::string_view host = cidr.substr(0, slash);
  if (host.empty() || host.front() == '[') return std::nullopt;
  const bool v4 = host.find(':') == std::string_view::npos;
  auto addr = ParseAddress(v4 ? host : "[" + std::string(host) + "]");
  if (!addr) return std::nullopt;
  SourceNet net;
  net.addr = *addr;
  if (slash != std::string_view::npos) {
    const std::string_view len = cidr.substr(slash + 1);
    unsigned n = 0;
    auto [p, ec] = std::from_chars(len.data(), len.data() + len.size(), n);
    if (len.empty() || ec != std::errc() || p != len.data() + len.size() || n > (v4 ? 32u : 128u)) {
      return std::nullopt;
    }
    net.prefix = static_cast<uint8_t>(v4 ? 96 + n : n);
  }
  // Host bits must be zero, so that "10.1.2.3/8" is not silently read as 10.0.0.0/8.
  for (unsigned bit = net.prefix; bit < 128; ++bit) {
    if (net.addr[bit / 8] & (0x80 >> (bit % 8))) return std::nullopt;
  }
  return net;
}

bool SourceNet::Contains(std::string_view ip) const {
  const auto a = ParseAddress(ip);
  if (!a) return false;
  for (unsigned bit = 0; bit < prefix; ++bit) {
    const uint8_t mask = static_cast<uint8_t>(0x80 >> (bit % 8));
    if (((*a)[bit / 8] & mask) != (addr[bit / 8] & mask)) return false;
  }
  return true;
}

bool TargetConfig::Allows(std::string_view initiator, std::string_view peer) const {
  if (allow_any_initiator) return true;
  for (const auto& e : acl) {
    if (e.initiator != initiator) continue;
    if (e.sources.empty()) return true;
    for (const auto& net : e.sources) {
      if (net.Contains(peer)) return true;
    }
  }
  return false;
}

std::shared_ptr<const TargetConfig> Snapshot::Find(std::string_view name) const {
  for (const auto& t : targets) {
    if (t->info.name == name) return t;
  }
  return nullptr;
}

Gateway::Gateway(runtime::ReactorPool& pool, GatewayOptions options)
    : pool_(pool),
      options_(std::move(options)),
      snapshot_(std::make_shared<Snapshot>()),
      auth_throttle_(options_.auth_throttle) {}

std::shared_ptr<const Snapshot> Gateway::snapshot() const {
  std::lock_guard lock(snapshot_mu_);
  return snapshot_;
}

void Gateway::Publish(std::shared_ptr<const Snapshot> snapshot) {
  {
    std::lock_guard lock(snapshot_mu_);
    snapshot_ = snapshot;
  }
  // Live sessions see the new configuration of their target (new LUNs, new sizes); a session
  // whose target is gone is dropped.
  for (auto& s : Sessions()) {
    if (s->discovery()) continue;
    auto tc = snapshot->Find(s->target_name());
    boost::asio::post(pool_.context(s->reactor()), [s, tc] {
      if (tc) {
        s->set_target(tc);
      } else {
        s->Drop();
      }
    });
  }
}

uint16_t Gateway::Register(const std::shared_ptr<Session>& session,
                           std::vector<std::shared_ptr<Session>>* replaced) {
  std::lock_guard lock(sessions_mu_);
  // RFC 7143 6.3.5: a new session with the same SSID (initiator name, ISID, target) reinstates,
  // i.e. replaces, the old one.
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto old = it->second.lock();
    if (!old) {
      it = sessions_.erase(it);
      continue;
    }
    if (old->initiator_name() == session->initiator_name() && old->isid() == session->isid() &&
        old->target_name() == session->target_name() && old->discovery() == session->discovery()) {
      replaced->push_back(std::move(old));
    }
    ++it;
  }
  for (;;) {
    const uint16_t tsih = next_tsih_++;
    if (next_tsih_ == 0) next_tsih_ = 1;
    if (tsih != 0 && sessions_.find(tsih) == sessions_.end()) {
      session->set_tsih(tsih);
      sessions_[tsih] = session;
      return tsih;
    }
  }
}

void Gateway::Unregister(uint16_t tsih, const Session* session) {
  std::lock_guard lock(sessions_mu_);
  auto it = sessions_.find(tsih);
  if (it == sessions_.end()) return;
  auto s = it->second.lock();
  if (!s || s.get() == session) sessions_.erase(it);
}

std::shared_ptr<Session> Gateway::FindSession(uint16_t tsih) const {
  std::lock_guard lock(sessions_mu_);
  auto it = sessions_.find(tsih);
  if (it == sessions_.end()) return nullptr;
  auto s = it->second.lock();
  return s && !s->closing() ? s : nullptr;
}

std::vector<std::shared_ptr<Session>> Gateway::Sessions() const {
  std::vector<std::shared_ptr<Session>> out;
  std::lock_guard lock(sessions_mu_);
  for (const auto& [tsih, weak] : sessions_) {
    if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;
}

std::vector<SessionInfo> Gateway::ListSessions() const {
  std::vector<SessionInfo> out;
  for (const auto& s : Sessions()) {
    if (!s->closing()) out.push_back(s->Info());
  }
  return out;
}

bool Gateway::DropSession(uint16_t tsih) {
  auto s = FindSession(tsih);
  if (!s) return false;
  boost::asio::post(pool_.context(s->reactor()), [s] { s->Drop(); });
  return true;
}

void Gateway::ForEachSession(const std::string& target, std::function<void(Session&)> fn) {
  for (auto& s : Sessions()) {
    if (!target.empty() && s->target_name() != target) continue;
    boost::asio::post(pool_.context(s->reactor()), [s, fn] { fn(*s); });
  }
}

void Gateway::ClearTaskSet(const std::string& target, std::shared_ptr<scsi::Lun> lun,
                           const Session* except, std::shared_ptr<TaskDrain> drain) {
  ForEachSession(target, [lun = std::move(lun), except, drain = std::move(drain)](Session& s) {
    if (&s == except || !s.AbortTasks(lun->id(), drain)) return;
    const scsi::Nexus& n = s.nexus();
    lun->RaiseUnitAttentionFor(
        scsi::UnitAttention{scsi::Asc::kCommandsClearedByAnotherInitiator.asc,
                            scsi::Asc::kCommandsClearedByAnotherInitiator.ascq},
        scsi::NexusMatch{n.initiator_port(), false, n.relative_port_id()}, nullptr);
  });
}

bool Gateway::TryAddConnection() {
  uint32_t n = connections_.load(std::memory_order_relaxed);
  while (n < options_.max_connections) {
    if (connections_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void Gateway::RemoveConnection() { connections_.fetch_sub(1, std::memory_order_relaxed); }

uint32_t Gateway::SourceConnections(const std::string& source) const {
  std::lock_guard lock(sources_mu_);
  auto it = sources_.find(source);
  return it == sources_.end() ? 0 : it->second;
}

void Gateway::AddSourceConnection(const std::string& source) {
  std::lock_guard lock(sources_mu_);
  ++sources_[source];
}

void Gateway::RemoveSourceConnection(const std::string& source) {
  std::lock_guard lock(sources_mu_);
  auto it = sources_.find(source);
  if (it != sources_.end() && --it->second == 0) sources_.erase(it);
}

bool Gateway::TryAddDiscoverySession() {
  uint32_t n = discovery_sessions_.load(std::memory_order_relaxed);
  while (n < options_.max_discovery_sessions) {
    if (discovery_sessions_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void Gateway::RemoveDiscoverySession() {
  discovery_sessions_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace iscsigw::iscsi
