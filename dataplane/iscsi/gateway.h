// Gateway: the iSCSI side's shared state. It holds the published configuration snapshot (targets,
// their LUNs and ACLs, portals), the session registry (TSIH allocation, reinstatement by initiator
// name + ISID), the negotiation limits and the reactor pool connections run on.
//
// Threading: the snapshot is immutable and swapped whole under a small mutex; readers take a
// shared_ptr at login time only, never per I/O. The session registry is touched at login, logout
// and by the control plane; each session itself is used only on its own reactor thread, so anything
// done to a session from elsewhere is posted to that reactor.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dataplane/iscsi/auth_throttle.h"
#include "dataplane/iscsi/chap.h"
#include "dataplane/iscsi/negotiation.h"
#include "dataplane/runtime/reactor_pool.h"
#include "dataplane/scsi/engine.h"

namespace iscsigw::iscsi {

class Session;
class TaskDrain;

// A source network in CIDR notation ("10.0.0.0/8", "fd00::/64", or one address).
struct SourceNet {
  std::array<uint8_t, 16> addr{};  // IPv4 as an IPv4-mapped IPv6 address
  uint8_t prefix = 128;            // in IPv6 bits (IPv4 /n is 96 + n)

  static std::optional<SourceNet> Parse(std::string_view cidr);
  // `ip` is a textual address; "ip:port" and "[v6]:port" are accepted too.
  bool Contains(std::string_view ip) const;
};

// One ACL entry: an initiator name and, optionally, the networks it may connect from.
struct AclEntry {
  std::string initiator;
  std::vector<SourceNet> sources;  // empty: any source address
};

struct TargetConfig {
  scsi::TargetInfo info;  // name, tpgt, relative port id, LUNs
  std::string alias;
  bool allow_any_initiator = false;
  std::vector<AclEntry> acl;
  ChapCredentials chap;  // user empty: no CHAP required

  // True when `initiator` connecting from `peer` ("ip:port") may log in to (and discover) this
  // target (docs/security.md: nobody until an ACL entry names it, or
  // allow_any_initiator).
  bool Allows(std::string_view initiator, std::string_view peer) const;
};

struct Snapshot {
  std::vector<std::shared_ptr<const TargetConfig>> targets;
  ChapCredentials discovery_chap;  // required of discovery sessions when set

  std::shared_ptr<const TargetConfig> Find(std::string_view name) const;
};

// What the control plane sees of a live session.
struct SessionInfo {
  uint16_t tsih = 0;
  std::string initiator_name;
  std::string isid;  // 12 hex digits
  std::string target_name;
  bool discovery = false;
  unsigned reactor = 0;
  std::string peer;  // "ip:port"
  SessionParams params;
};

struct GatewayOptions {
  TargetLimits limits;
  uint32_t login_timeout_ms = 15000;
  uint32_t nop_interval_ms = 30000;  // NOP-In ping after this much idle time
  uint32_t nop_timeout_ms = 15000;   // drop the connection when the ping is not answered in time
  uint32_t max_connections = 1024;
  // docs/security.md, "Connections": connections from one source (an IPv4 address, an IPv6 /64)
  // at once; discovery sessions in full feature phase at once, and how long one may stay idle.
  uint32_t max_connections_per_source = 256;
  uint32_t max_discovery_sessions = 64;
  uint32_t discovery_idle_timeout_ms = 30000;
  // TargetAddress values (HOST:PORT) that SendTargets returns, each with the target's portal group
  // tag, when initiators reach the gateway through NAT, a Service or a load balancer. Empty: the
  // address the discovery connection was accepted on.
  std::vector<std::string> advertise;
  // Lockout of CHAP guessing per initiator name and source, and per source and target
  // (auth_throttle.h).
  AuthThrottle::Options auth_throttle;
  // The CHAP digests initiators may choose (chap.h; --chap-digests).
  ChapDigests chap_digests;
};

class Gateway {
 public:
  Gateway(runtime::ReactorPool& pool, GatewayOptions options);

  runtime::ReactorPool& pool() { return pool_; }
  const GatewayOptions& options() const { return options_; }

  std::shared_ptr<const Snapshot> snapshot() const;
  void Publish(std::shared_ptr<const Snapshot> snapshot);

  // Session registry. Register allocates a TSIH (never 0, unique among registered sessions) and
  // returns the sessions it replaces (same initiator name + ISID + target), live or still closing,
  // so that the caller can reinstate: each unregisters itself once closed and its tasks have ended.
  uint16_t Register(const std::shared_ptr<Session>& session,
                    std::vector<std::shared_ptr<Session>>* replaced);
  void Unregister(uint16_t tsih, const Session* session);
  // A live (not closing) session.
  std::shared_ptr<Session> FindSession(uint16_t tsih) const;
  // Every registered session, closing ones included (they may still have writes in flight).
  std::vector<std::shared_ptr<Session>> Sessions() const;
  // The live sessions.
  std::vector<SessionInfo> ListSessions() const;
  // Posts a drop of the session to its reactor. Returns false when no such session exists.
  bool DropSession(uint16_t tsih);
  // Posts fn(session) to the reactor of every session of `target` (all targets if empty), those
  // being closed included: their tasks with store I/O in flight can still be waited for.
  void ForEachSession(const std::string& target, std::function<void(Session&)> fn);
  // CLEAR TASK SET (SAM-5 7.4) on the sessions of `target` but `except` (may be null): their
  // tasks for `lun` are aborted, holding `drain` (may be null) while their store I/O is in
  // flight, and each I_T nexus that had one gets COMMANDS CLEARED BY ANOTHER INITIATOR (the
  // control mode page's TAS is 0).
  void ClearTaskSet(const std::string& target, std::shared_ptr<scsi::Lun> lun,
                    const Session* except, std::shared_ptr<TaskDrain> drain);

  // Connection accounting (bounded by options.max_connections).
  bool TryAddConnection();
  void RemoveConnection();
  // Connections per source (AuthThrottle::SourcePrefix of the peer address): counted from accept
  // to the connection's end, evicted or not. Any thread; not on the I/O path.
  uint32_t SourceConnections(const std::string& source) const;
  void AddSourceConnection(const std::string& source);
  void RemoveSourceConnection(const std::string& source);
  // Discovery sessions in full feature phase (options.max_discovery_sessions). Any thread.
  bool TryAddDiscoverySession();
  void RemoveDiscoverySession();

  AuthThrottle& auth_throttle() { return auth_throttle_; }

 private:
  runtime::ReactorPool& pool_;
  const GatewayOptions options_;

  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const Snapshot> snapshot_;  // guarded by snapshot_mu_

  mutable std::mutex sessions_mu_;
  std::map<uint16_t, std::weak_ptr<Session>> sessions_;  // guarded by sessions_mu_
  uint16_t next_tsih_ = 1;                               // guarded by sessions_mu_
  std::atomic<uint32_t> connections_{0};
  std::atomic<uint32_t> discovery_sessions_{0};
  mutable std::mutex sources_mu_;
  std::unordered_map<std::string, uint32_t> sources_;  // guarded by sources_mu_
  AuthThrottle auth_throttle_;
};

}  // namespace iscsigw::iscsi
