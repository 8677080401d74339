// How iscsigw-csi maps CSI volumes and snapshots onto gateway objects: names, sizes, parameters
// and capabilities. Pure functions of their arguments (no I/O, no gRPC), shared by the controller
// (csi/controller_service.h) and its unit tests; any thread may call them.
//
// The volume model, a contract the node service relies on:
//   - One gateway target per volume, its LUN 0. volume_id is the target's short name: the CSI
//     name itself when it is a plain IQN suffix (VolumeIdForName), else "vol-" + 32 hex digits of
//     its SHA-256. The target's full IQN is kGatewayIqnPrefix + volume_id; its alias is
//     VolumeAlias: kVolumeAliasPrefix + the CSI name, and for a copy the source it was made from
//     (only targets so named are volumes). The alias is the volume's record of its origin, kept in
//     the gateway's state across restarts; initiators see it only as the TargetAlias text key,
//     never as SCSI identity (each LUN's serial and device id stay its own).
//   - The backing is a file the gateway creates, `<volume_id>.img` relative to its --lun-dir.
//   - volume_context: targetIqn, lun ("0"), portals (comma-separated HOST:PORT), blockSize.
//   - CHAP comes from the secrets under kChap* keys (the provisioner's and the node-stage secret).
//     With the StorageClass parameter chapPerVolume each volume's secrets are its own, derived
//     from the Secret's (ChapForVolume); the alias records it (kOwnChapAliasTag) and
//     volume_context says so (kCtxChapPerVolume), so the node derives the same ones.
//   - node_id is the node's initiator name, then '@' and its addresses when the node plugin
//     knows them (NodeIdentity): the ACL entry a publish adds admits that name from those
//     addresses only.
//   - snapshot_id is the gateway snapshot's name (SnapshotIdForName), always under
//     kSnapshotIdPrefix: only snapshots so named are the driver's to list and delete, so an
//     operator's own gateway snapshots stay out of its reach.
#pragma once

#include <google/protobuf/map.h>
#include <google/protobuf/message_lite.h>
#include <google/protobuf/repeated_ptr_field.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "csi/v1/csi.pb.h"

namespace iscsigw::csi {

// The gateway's default IQN prefix (a contract with the gateway): a short target name lives under
// it.
inline constexpr std::string_view kGatewayIqnPrefix = "iqn.2026-11.io.iscsigw:";
inline constexpr std::string_view kVolumeAliasPrefix = "csi:";
inline constexpr std::string_view kSnapshotIdPrefix = "csi-";
// RFC 7143 13.6: TargetAlias is a text value of at most 255 bytes (the gateway's limit too).
inline constexpr size_t kMaxAliasBytes = 255;
inline constexpr uint64_t kDefaultVolumeBytes = uint64_t{1} << 30;
// CSI spec "Size Limits": a CO keeps names and ids within 128 bytes.
inline constexpr size_t kMaxNameBytes = 128;

// volume_context keys.
inline constexpr char kCtxTargetIqn[] = "targetIqn";
inline constexpr char kCtxLun[] = "lun";
inline constexpr char kCtxPortals[] = "portals";
inline constexpr char kCtxBlockSize[] = "blockSize";
inline constexpr char kCtxChapPerVolume[] = "chapPerVolume";  // "true": ChapForVolume's secrets
// The end of the alias of a volume with CHAP secrets of its own.
inline constexpr std::string_view kOwnChapAliasTag = " <own chap>";

// Secret keys (open-iscsi's node.session.auth.* names). The *_in pair is mutual CHAP.
inline constexpr char kChapUser[] = "node.session.auth.username";
inline constexpr char kChapSecret[] = "node.session.auth.password";
inline constexpr char kChapUserIn[] = "node.session.auth.username_in";
inline constexpr char kChapSecretIn[] = "node.session.auth.password_in";

// The SHA-256 of `data` as 64 lower-case hex digits: names made from names that do not fit.
std::string Sha256Hex(std::string_view data);
// A name usable as the target's short name as it is: 1..64 of [a-z0-9.-] and not itself a full
// iSCSI name (iqn., eui., naa.), which the gateway would take as one.
bool IsPlainVolumeName(std::string_view name);
// The volume_id (target short name) of the volume named `name`.
std::string VolumeIdForName(std::string_view name);
// The gateway's snapshot name rule: 1..128 of [A-Za-z0-9._-], not starting with '.'.
bool IsGatewaySnapshotName(std::string_view name);
// The snapshot_id of the snapshot named `name`: kSnapshotIdPrefix + the name when the gateway
// takes that, else kSnapshotIdPrefix + "snap-" + 64 hex digits of the name's SHA-256.
std::string SnapshotIdForName(std::string_view name);
// A gateway snapshot name SnapshotIdForName can have made: one of the driver's snapshots.
bool IsCsiSnapshotId(std::string_view id);
// The alias of the target of volume `name` made from `source`: kVolumeAliasPrefix + name, then
// " <from snapshot ID>" or " <from volume ID>" for a copy, then kOwnChapAliasTag when
// `own_chap`. An ID that would take the alias past kMaxAliasBytes is written "sha256:" + 32 hex
// digits of its SHA-256 instead. A retried CreateVolume finds the same alias only for the same
// name, the same source and the same CHAP scheme.
std::string VolumeAlias(std::string_view name, const ::csi::v1::VolumeContentSource& source,
                        bool own_chap = false);
// The volume_id of a gateway target name, if it is a short name under kGatewayIqnPrefix.
std::optional<std::string> VolumeIdOfTarget(std::string_view target_iqn);
// The relative path of a volume's backing file (resolved under the gateway's --lun-dir).
std::string BackingPathFor(std::string_view volume_id);
// A HOST:PORT portal (host an IPv4 address, [IPv6] or a DNS name) whose host is empty or the
// unspecified address (0.0.0.0, [::], [::ffff:0.0.0.0]): a node told to log in there would
// connect to itself.
bool IsUnspecifiedPortal(std::string_view portal);
// The request_id of a gateway create: "csi-" + kind + "-" + 32 hex digits of the SHA-256 of
// `key`, the request itself with request_id and every secret cleared. The same CSI request
// makes the same gateway request and so the same id, in this call, in the CO's retry or in a
// restarted controller, so the gateway answers a repeat with the first one's result.
std::string GatewayRequestId(std::string_view kind, const google::protobuf::MessageLite& key);

// CreateVolume's (and GetCapacity's) StorageClass parameters.
struct VolumeParams {
  uint32_t block_size = 512;     // blockSize: 512 | 4096
  bool thick = false;            // provisioning: thin | thick
  bool direct = false;           // direct: true | false (O_DIRECT backing)
  bool chap_per_volume = false;  // chapPerVolume: true | false (ChapForVolume)
};
// INVALID_ARGUMENT names the key for an unknown key or a bad value. Keys under
// "csi.storage.k8s.io/" (fstype, PVC name and namespace passed by external-provisioner) are
// the CO's and the node's business and are accepted unread.
Result<VolumeParams> ParseVolumeParameters(
    const google::protobuf::Map<std::string, std::string>& p);

// The size of a new volume for `range` (null: none given): required_bytes rounded up to the block
// size; 0: kDefaultVolumeBytes, or the largest multiple of the block size within
// limit_bytes when that is smaller. INVALID_ARGUMENT for a negative value or limit < required,
// OUT_OF_RANGE when no size in the range is a multiple of the block size.
Result<uint64_t> VolumeBytes(const ::csi::v1::CapacityRange* range, uint32_t block_size);
// An existing volume of `bytes` satisfies `range` (null: any size does).
bool CapacityFits(uint64_t bytes, const ::csi::v1::CapacityRange* range);
// `bytes` rounded up to a multiple of `block_size`; nullopt on overflow.
std::optional<uint64_t> RoundUp(uint64_t bytes, uint32_t block_size);

// Empty when every capability is supported: mount or block access with a single-node access mode
// (a LUN with a local file system is usable by one node at a time); else why not, naming the
// capability.
std::string UnsupportedCapability(
    const google::protobuf::RepeatedPtrField<::csi::v1::VolumeCapability>& caps);
std::string UnsupportedCapability(const ::csi::v1::VolumeCapability& cap);

// CHAP credentials from CSI secrets. Unset user: no CHAP. INVALID_ARGUMENT (naming keys, never
// values) for a user without a password or the reverse, or a mutual pair without the one-way one.
struct ChapSecrets {
  std::string user, secret, user_in, secret_in;
  bool enabled() const { return !user.empty(); }
};
Result<ChapSecrets> ParseChapSecrets(const google::protobuf::Map<std::string, std::string>& s);
// The CHAP credentials of volume `volume_id` when its secrets are its own (docs/security.md,
// "CSI volumes"): the users as they are; each secret 32 hex digits of HMAC-SHA256 keyed with
// the Secret's one, over a label naming the secret's role and the volume_id. The controller sets
// these on the volume's target and the node derives the same ones from its node-stage secret, so
// a secret read from one node's open-iscsi record or command line opens that volume only.
// INTERNAL when the digest cannot be computed (an OpenSSL that refuses the key).
Result<ChapSecrets> ChapForVolume(const ChapSecrets& base, std::string_view volume_id);

// What a node_id says: the initiator name and, when the node plugin was given them, the node's
// addresses (numeric, canonical: inet_ntop's form, sorted, each once), written
// "NAME@ADDR[,ADDR]".
struct NodeIdentity {
  std::string initiator;
  std::vector<std::string> addresses;
  std::string ToString() const;
};
// The canonical form of a numeric IPv4 or IPv6 address (no brackets, no prefix length).
std::optional<std::string> CanonicalAddress(std::string_view address);
// INVALID_ARGUMENT for an empty name, an empty or non-numeric address.
Result<NodeIdentity> ParseNodeId(std::string_view node_id);
// The canonical address of a session connection's peer, "IP:PORT" or "[IPv6]:PORT".
std::optional<std::string> PeerAddress(std::string_view peer);

// Page tokens of ListVolumes / ListSnapshots: "after:" + the last id of the previous page.
std::string PageTokenAfter(std::string_view id);
// The id a token names; nullopt for a token this plugin never issued (CSI: ABORTED).
std::optional<std::string> ParsePageToken(std::string_view token);

}  // namespace iscsigw::csi
