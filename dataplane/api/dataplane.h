// The data plane's face: the only surface the control plane and server/ see. It starts the reactor
// pool and the portals, takes whole configurations (targets, LUNs, ACLs) and turns them into the
// immutable snapshot the iSCSI layer reads at login, lists and drops sessions, and shuts down.
//
// Threading: every method may be called from any non-reactor thread; Apply and Stop are
// serialised by the caller (the control plane owns the configuration).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "dataplane/backing/fault_store.h"
#include "dataplane/backing/file/allowed_paths.h"
#include "dataplane/backing/shared_object.h"
#include "dataplane/iscsi/gateway.h"

namespace iscsigw::api {

enum class BackingKind { kRam, kNull, kFile, kRbd };

// Where an rbd LUN's image lives (backing::RbdStoreOptions). The keyring is a path, never a key;
// it is neither logged nor put into a message.
struct RbdSpec {
  std::string pool;
  std::string image;
  std::string ns;         // RADOS namespace; empty: the pool's default
  std::string conf;       // ceph.conf path; empty: librados' default search
  std::string client_id;  // empty: admin
  std::string keyring;    // keyring path; empty: what the conf says
  friend bool operator==(const RbdSpec&, const RbdSpec&) = default;
};

struct LunSpec {
  uint32_t id = 0;
  BackingKind backing = BackingKind::kRam;
  std::string path;     // file backing
  RbdSpec rbd;          // rbd backing
  bool create = false;  // file and rbd backing: create the file or image if missing
  uint64_t size_bytes = 0;
  uint32_t block_size = 512;
  uint32_t physical_block_size = 0;  // 0 or block_size: the same; 4096 over 512: 512e
  bool read_only = false;
  bool thick = false;   // file backing: allocate every block when the file is created
  bool direct = false;  // file backing: O_DIRECT (backing::FileStoreOptions::direct)
  std::string serial;
  uint64_t device_id = 0;
  // Test builds only (ISCSIGW_FAULT_INJECTION): faults wrapped around the store; inactive by
  // default. Other builds refuse a LUN whose faults are active.
  backing::FaultSpec fault;
};

// An object in the cluster that several gateways read, write and watch (OpenSharedObject).
using SharedObject = backing::SharedObject;

// CHAP credentials of a target or of discovery: user, secret, mutual user and mutual secret.
using ChapCredentials = iscsi::ChapCredentials;

struct AclEntrySpec {
  std::string initiator;             // IQN / EUI / NAA name
  std::vector<std::string> sources;  // CIDRs the initiator may connect from; empty: any
};

struct TargetSpec {
  std::string name;
  std::string alias;
  bool allow_any_initiator = false;
  std::vector<AclEntrySpec> acl;
  ChapCredentials chap;  // user empty: no CHAP
  std::vector<LunSpec> luns;
};

struct Config {
  std::vector<TargetSpec> targets;
  ChapCredentials discovery_chap;  // user empty: discovery without CHAP
};

// Where file LUNs may live (--lun-dir, --backing-allow), confined as backing::AllowedPaths says.
using AllowedPaths = backing::AllowedPaths;

// What backings this gateway's LUNs may use (docs/security.md, "Backing paths"): file LUNs only
// beneath the allowed paths; rbd LUNs only in the allowed pools, with a ceph.conf and keyring
// the daemon was started with (--rbd-conf, --rbd-keyring), never one an API call names. The
// data plane enforces it on every configuration it applies (the state file, the API, the shared
// configuration); the control plane copies and removes files only through `paths`, and checks an
// rbd LUN before it creates its image.
struct BackingPolicy {
  std::shared_ptr<const AllowedPaths> paths = AllowedPaths::None();
  std::vector<std::string> rbd_pools;     // "POOL" (any namespace) or "POOL/NAMESPACE"
  std::vector<std::string> rbd_confs;     // the first is used when a LUN names none
  std::vector<std::string> rbd_keyrings;  // the first is used when a LUN names none

  // PERMISSION_DENIED, naming `who`, the path or pool and the flag that would allow it.
  Status Check(const LunSpec& lun, std::string_view who) const;
  // `spec` with the conf and keyring the daemon's flags give where it names none.
  RbdSpec WithDefaults(RbdSpec spec) const;
  // A "POOL" or "POOL/NAMESPACE" of --rbd-allow.
  static Status ValidateRbdAllow(std::string_view entry);
};

struct Options {
  std::vector<std::string> portals{"0.0.0.0:3260"};  // HOST:PORT; port 0 picks a free one
  unsigned reactors = 0;  // 0: one per CPU the process may use (runtime::UsableCpus)
  // This gateway among those that export the same rbd images (1..65535, different on each): its
  // ALUA target port group and its relative target port identifier in every target; its rbd
  // LUNs then open without librbd's cache (RbdStoreOptions::shared). 0: the gateway is alone,
  // with target port group and relative port 1.
  uint16_t gateway_id = 0;
  iscsi::GatewayOptions gateway;
  // Where LUNs keep durable SCSI state (APTPL reservations, saved mode pages) in lun-state/;
  // empty: none (REPORT CAPABILITIES then reports PTPL_C=0).
  std::string state_dir;
  BackingPolicy backing;  // default: no file and no rbd LUN
};

class Dataplane {
 public:
  // Binds every portal and starts the reactors. Errors name the portal that failed.
  static Result<std::unique_ptr<Dataplane>> Start(const Options& options);
  ~Dataplane();

  // The bound portals as "host:port" (port 0 resolved).
  const std::vector<std::string>& portals() const { return bound_; }
  // What SendTargets returns instead (Options::gateway.advertise); empty: the bound address.
  const std::vector<std::string>& advertised() const;
  unsigned reactors() const;
  // The liveness of the reactors (grpc.health.v1 "iscsigw.liveness", docs/operations.md): posts a
  // no-op to each reactor that has none waiting, and returns the index of each reactor whose
  // no-op has waited longer than `within` (a reactor blocked in a call, or spinning). Never waits:
  // the first call after a stall returns it at the earliest `within` after the stall began. Takes
  // no lock of ours; each post, as any asio::post, allocates its handler and takes the
  // io_context's own queue mutex, once per reactor every few seconds, off the per-I/O path. From
  // one control-plane thread at a time, every few seconds.
  std::vector<unsigned> UnresponsiveReactors(std::chrono::milliseconds within);
  // Runs `fn` on reactor `reactor` (tests: a reactor made to block).
  void PostForTest(unsigned reactor, std::function<void()> fn);

  // Validates and applies a whole configuration. LUNs whose spec is unchanged keep their store
  // and state; new ones are created (files opened); removed ones go once no session uses them.
  // A LUN whose only change is a larger size_bytes grows online and raises CAPACITY DATA HAS
  // CHANGED (SBC-3 4.7, 2Ah/09h); adding or removing LUNs raises REPORTED LUNS DATA HAS CHANGED
  // (3Fh/0Eh) on the target's other LUNs. Live sessions see the new configuration. On error
  // nothing is published and the Status names the target, LUN and field.
  // kStartup (the configuration the daemon starts or rolls back with): an rbd LUN whose image
  // cannot be opened (the cluster down, the pool or image missing) is not an error; the LUN is
  // configured offline, answers NOT READY, and opens in the background (backing::OfflineRbdStore).
  // kStrict (a change through the API): it is an error, at once.
  enum class ApplyMode { kStrict, kStartup };
  Status Apply(const Config& config, ApplyMode mode = ApplyMode::kStrict);

  // What a configured LUN's store reports now: its size (for a file LUN created with size 0, the
  // file's size) and, while it cannot serve I/O, why. nullopt when the LUN is not configured.
  struct LunStatus {
    uint64_t size_bytes = 0;
    std::string offline_reason;  // empty while the LUN serves I/O
    bool optimized = true;       // the ALUA state reported (scsi::Lun::reported_preferred)
  };
  std::optional<LunStatus> LunStatusOf(const std::string& target, uint32_t lun) const;
  size_t connections() const;

  // Size, storage in use and state of every configured LUN's store, for monitoring. Takes the
  // configuration lock and may make a system call per file LUN (fstat); never call it per I/O.
  struct LunUsage {
    std::string target;
    uint32_t lun = 0;
    uint64_t capacity_bytes = 0;
    uint64_t allocated_bytes = 0;
    // Whether the store serves I/O (ready() == 0): false for an rbd image not open yet or whose
    // lock was taken (fenced), a file store fenced by a failed atomic write, a store closed by a
    // live change (LunStatus::offline_reason says why).
    bool online = true;
    bool optimized = true;  // the ALUA state reported, as LunStatus::optimized
  };
  std::vector<LunUsage> LunUsages() const;

  std::vector<iscsi::SessionInfo> ListSessions() const;
  bool DropSession(uint16_t tsih);
  // Drops every session of `target` (all targets if empty) whose initiator is `initiator` (any
  // initiator if empty), or, with `only_disallowed`, only those the current ACL no longer admits.
  // Returns how many were dropped.
  size_t DropSessions(const std::string& target, const std::string& initiator,
                      bool only_disallowed = false);
  // RFC 7143 11.9.1: asks the session's initiator to log out (Async Message, AsyncEvent 1) and
  // drops the session if it has not done so within `within`. False when no such session exists.
  bool RequestLogout(uint16_t tsih, std::chrono::seconds within);

  // Stops accepting, closes every connection (in-flight commands are failed or finished), flushes
  // the file stores and joins the reactors. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit Dataplane(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::vector<std::string> bound_;
};

// Checks one LUN spec; the message names target, LUN and field.
Status ValidateLun(const std::string& target, const LunSpec& lun);
// rbd images for the control plane, which creates an image before the LUN that uses it and
// removes one it created after the LUN is gone (backing::RbdStore::CreateImage, RemoveImage).
// Blocking: they talk to the cluster. CreateRbdImage is true when it made the image.
Result<bool> CreateRbdImage(const RbdSpec& spec, uint64_t size_bytes);
Status RemoveRbdImage(const RbdSpec& spec, std::chrono::milliseconds busy_wait);
// Blocking: the object `oid` in the pool and namespace `where` names (its image is ignored),
// created when missing and watched (backing::RbdStore::OpenSharedObject): the configuration that
// gateways share. Destroy it off the reactors.
Result<std::shared_ptr<SharedObject>> OpenSharedObject(const RbdSpec& where,
                                                       const std::string& oid);
// RFC 7143 4.2.7: iqn., eui. and naa. names, lower case, at most 223 bytes.
Status ValidateIscsiName(const std::string& name);
// Checks one ACL entry of `target`: the initiator name and each source CIDR.
Status ValidateAclEntry(const std::string& target, const AclEntrySpec& entry);
// CHAP credentials as logins will check them: secret lengths, a mutual secret that differs from
// the initiator's (RFC 7143 9.2.1), names without control characters. `who` prefixes the message.
Status ValidateChapCredentials(const ChapCredentials& creds, std::string_view who);

// The CHAP digests initiators may choose (Options::gateway.chap_digests), parsed from a list of
// MD5, SHA-1, SHA-256, SHA3-256 (--chap-digests).
using ChapDigests = iscsi::ChapDigests;
Result<ChapDigests> ParseChapDigests(std::string_view list);

}  // namespace iscsigw::api
