#include "dataplane/iscsi/gateway.h"

#include <boost/asio/post.hpp>

#include <algorithm>

#include "dataplane/iscsi/session.h"

namespace iscsigw::iscsi {

bool TargetConfig::Allows(std::string_view initiator) const {
  if (allow_any_initiator) return true;
  return std::find(initiators.begin(), initiators.end(), initiator) != initiators.end();
}

std::shared_ptr<const TargetConfig> Snapshot::Find(std::string_view name) const {
  for (const auto& t : targets) {
    if (t->info.name == name) return t;
  }
  return nullptr;
}

Gateway::Gateway(runtime::ReactorPool& pool, GatewayOptions options)
    : pool_(pool), options_(std::move(options)), snapshot_(std::make_shared<Snapshot>()) {}

std::shared_ptr<const Snapshot> Gateway::snapshot() const {
  std::lock_guard lock(snapshot_mu_);
  return snapshot_;
}

void Gateway::Publish(std::shared_ptr<const Snapshot> snapshot) {
  std::lock_guard lock(snapshot_mu_);
  snapshot_ = std::move(snapshot);
}

uint16_t Gateway::Register(const std::shared_ptr<Session>& session,
                           std::shared_ptr<Session>* replaced) {
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
        old->target() == session->target() && old->discovery() == session->discovery()) {
      *replaced = old;
      it = sessions_.erase(it);
      continue;
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
  return it == sessions_.end() ? nullptr : it->second.lock();
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
  for (const auto& s : Sessions()) out.push_back(s->Info());
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
    if (!target.empty() && (!s->target() || s->target()->info.name != target)) continue;
    boost::asio::post(pool_.context(s->reactor()), [s, fn] { fn(*s); });
  }
}

bool Gateway::TryAddConnection() {
  uint32_t n = connections_.load(std::memory_order_relaxed);
  while (n < options_.max_connections) {
    if (connections_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void Gateway::RemoveConnection() { connections_.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace iscsigw::iscsi
