// csi/volume_model.h: the names, sizes, parameters and capabilities the controller maps CSI
// requests with. The node service relies on the volume_id rule, so it is pinned here.
#include "csi/volume_model.h"

#include <gtest/gtest.h>

#include <string>

namespace iscsigw::csi {
namespace volume_model_test {

using ::csi::v1::CapacityRange;
using ::csi::v1::VolumeCapability;
using Mode = ::csi::v1::VolumeCapability::AccessMode;

TEST(VolumeId, IsTheNameWhenItIsAPlainIqnSuffix) {
  EXPECT_EQ(VolumeIdForName("pvc-0b6c2e9e-4f5d-4c1a-9d7e-3f1e2a4b5c6d"),
            "pvc-0b6c2e9e-4f5d-4c1a-9d7e-3f1e2a4b5c6d");
  EXPECT_EQ(VolumeIdForName("a.b-c9"), "a.b-c9");
  EXPECT_EQ(VolumeIdForName(std::string(64, 'x')), std::string(64, 'x'));
}

TEST(VolumeId, HashesEverythingElse) {
  const std::string id = VolumeIdForName("Upper");
  EXPECT_EQ(id.size(), 4u + 32u);
  EXPECT_EQ(id.substr(0, 4), "vol-");
  EXPECT_EQ(id, VolumeIdForName("Upper"));  // stable
  EXPECT_NE(id, VolumeIdForName("upper2"));
  EXPECT_TRUE(IsPlainVolumeName(id));
  for (const std::string& name :
       {std::string(65, 'x'), std::string("a_b"), std::string("a b"), std::string("a:b"),
        std::string("iqn.2020-01.x"), std::string("eui.0123456789abcdef"), std::string("naa.1"),
        std::string("")}) {
    EXPECT_FALSE(IsPlainVolumeName(name)) << name;
    EXPECT_TRUE(VolumeIdForName(name).starts_with("vol-")) << name;
  }
  EXPECT_EQ(VolumeIdForName("abc"), "abc");
  // Known answer (sha256 of "ABC"): a volume_id never changes once a PV records it.
  EXPECT_EQ(VolumeIdForName("ABC"), "vol-b5d4045c3f466fa91fe2cc6abe79232a");
}

TEST(VolumeId, RoundTripsThroughTheTargetName) {
  EXPECT_EQ(VolumeIdOfTarget("iqn.2026-11.io.iscsigw:pvc-1"), "pvc-1");
  EXPECT_EQ(VolumeIdOfTarget("iqn.2026-11.io.iscsigw:"), std::nullopt);
  EXPECT_EQ(VolumeIdOfTarget("iqn.2020-01.com.example:pvc-1"), std::nullopt);
  EXPECT_EQ(VolumeIdOfTarget("iqn.2026-11.io.iscsigw:a:b"), std::nullopt);
  EXPECT_EQ(BackingPathFor("pvc-1"), "pvc-1.img");
}

TEST(SnapshotId, IsTheNameUnderTheDriversPrefixWhenTheGatewayTakesIt) {
  EXPECT_EQ(SnapshotIdForName("snapshot-1b2c_X.y"), "csi-snapshot-1b2c_X.y");
  EXPECT_EQ(SnapshotIdForName(std::string(124, 's')), "csi-" + std::string(124, 's'));
  EXPECT_EQ(SnapshotIdForName(".dot"), "csi-.dot");
  for (const std::string& name :
       {std::string(125, 's'), std::string("a/b"), std::string("a b"), std::string("")}) {
    const std::string id = SnapshotIdForName(name);
    EXPECT_EQ(id.size(), 4u + 5u + 64u) << name;
    EXPECT_TRUE(id.starts_with("csi-snap-")) << name;
    EXPECT_TRUE(IsGatewaySnapshotName(id)) << name;
    EXPECT_TRUE(IsCsiSnapshotId(id)) << name;
  }
  // Known answer (sha256 of "a b"): a snapshot_id never changes once a CO records it.
  EXPECT_EQ(SnapshotIdForName("a b"),
            "csi-snap-c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65");
}

TEST(SnapshotId, OnlyTheDriversPrefixMarksItsSnapshots) {
  EXPECT_TRUE(IsCsiSnapshotId("csi-snapshot-1"));
  for (const char* id : {"snapshot-1", "nightly", "csi-", "csi", "xcsi-1", "csi-a/b", ""}) {
    EXPECT_FALSE(IsCsiSnapshotId(id)) << id;
  }
}

TEST(VolumeAlias, NamesTheVolumeAndWhereItsDataCameFrom) {
  ::csi::v1::VolumeContentSource none;
  EXPECT_EQ(VolumeAlias("pvc-1", none), "csi:pvc-1");
  ::csi::v1::VolumeContentSource snap;
  snap.mutable_snapshot()->set_snapshot_id("csi-snapshot-9");
  EXPECT_EQ(VolumeAlias("pvc-1", snap), "csi:pvc-1 <from snapshot csi-snapshot-9>");
  ::csi::v1::VolumeContentSource vol;
  vol.mutable_volume()->set_volume_id("pvc-0");
  EXPECT_EQ(VolumeAlias("pvc-1", vol), "csi:pvc-1 <from volume pvc-0>");
  EXPECT_NE(VolumeAlias("pvc-1", snap), VolumeAlias("pvc-1", vol));

  // The longest name and snapshot id still fit the 255 bytes of a TargetAlias.
  const std::string name(kMaxNameBytes, 'n');
  snap.mutable_snapshot()->set_snapshot_id(std::string(128, 's'));
  const std::string alias = VolumeAlias(name, snap);
  EXPECT_LE(alias.size(), kMaxAliasBytes);
  EXPECT_TRUE(alias.starts_with("csi:" + name + " <from snapshot sha256:")) << alias;
  snap.mutable_snapshot()->set_snapshot_id(std::string(127, 's') + "t");
  EXPECT_NE(VolumeAlias(name, snap), alias);
}

TEST(VolumeAlias, RecordsCHAPOfTheVolumesOwn) {
  ::csi::v1::VolumeContentSource none;
  EXPECT_EQ(VolumeAlias("pvc-1", none, true), "csi:pvc-1 <own chap>");
  ::csi::v1::VolumeContentSource snap;
  snap.mutable_snapshot()->set_snapshot_id("csi-snapshot-9");
  EXPECT_EQ(VolumeAlias("pvc-1", snap, true),
            "csi:pvc-1 <from snapshot csi-snapshot-9> <own chap>");
  EXPECT_TRUE(VolumeAlias("pvc-1", snap, true).ends_with(kOwnChapAliasTag));
  EXPECT_FALSE(VolumeAlias("pvc-1", snap, false).ends_with(kOwnChapAliasTag));
  // The tag still fits beside the longest name and source.
  snap.mutable_snapshot()->set_snapshot_id(std::string(128, 's'));
  const std::string alias = VolumeAlias(std::string(kMaxNameBytes, 'n'), snap, true);
  EXPECT_LE(alias.size(), kMaxAliasBytes);
  EXPECT_TRUE(alias.ends_with(kOwnChapAliasTag)) << alias;
}

TEST(Portal, UnspecifiedHostsAreTheWildcards) {
  for (const char* p : {"0.0.0.0:3260", "[::]:3260", "[0:0:0:0:0:0:0:0]:3260",
                        "[::ffff:0.0.0.0]:3260", ":3260", "[]:3260", "0.0.0.0"}) {
    EXPECT_TRUE(IsUnspecifiedPortal(p)) << p;
  }
  for (const char* p : {"127.0.0.1:3260", "192.0.2.10:3260", "[::1]:3260", "[fd00::5]:3260",
                        "gw.example.com:3260", "iscsigw-iscsi.storage.svc:3260", "10.0.0.0:1"}) {
    EXPECT_FALSE(IsUnspecifiedPortal(p)) << p;
  }
}

TEST(GatewayRequestId, IsTheSameForTheSameRequestOnly) {
  ::csi::v1::CapacityRange a;
  a.set_required_bytes(1 << 20);
  ::csi::v1::CapacityRange b = a;
  const std::string id = GatewayRequestId("lun", a);
  EXPECT_EQ(id, GatewayRequestId("lun", b));  // across calls and restarts
  EXPECT_EQ(id.size(), 8u + 32u);
  EXPECT_TRUE(id.starts_with("csi-lun-")) << id;
  b.set_limit_bytes(2 << 20);
  EXPECT_NE(id, GatewayRequestId("lun", b));
  EXPECT_NE(id, GatewayRequestId("target", a));
}

CapacityRange Range(int64_t required, int64_t limit) {
  CapacityRange r;
  r.set_required_bytes(required);
  r.set_limit_bytes(limit);
  return r;
}

TEST(VolumeBytes, RoundsRequiredUpToTheBlockSize) {
  auto r = Range(1000, 0);
  EXPECT_EQ(VolumeBytes(&r, 512).value(), 1024u);
  EXPECT_EQ(VolumeBytes(&r, 4096).value(), 4096u);
  r = Range(8192, 8192);
  EXPECT_EQ(VolumeBytes(&r, 4096).value(), 8192u);
}

TEST(VolumeBytes, DefaultsToOneGibibyteWithinTheLimit) {
  EXPECT_EQ(VolumeBytes(nullptr, 512).value(), kDefaultVolumeBytes);
  auto r = Range(0, 0);
  EXPECT_EQ(VolumeBytes(&r, 512).value(), kDefaultVolumeBytes);
  r = Range(0, 10'000'000);
  EXPECT_EQ(VolumeBytes(&r, 4096).value(), 10'000'000u / 4096 * 4096);
  r = Range(0, 100);
  EXPECT_EQ(VolumeBytes(&r, 512).status().code(), StatusCode::kOutOfRange);
}

TEST(VolumeBytes, RefusesWhatTheRangeCannotHold) {
  auto r = Range(1000, 1000);  // 1024 after rounding
  EXPECT_EQ(VolumeBytes(&r, 512).status().code(), StatusCode::kOutOfRange);
  r = Range(2000, 1000);
  EXPECT_EQ(VolumeBytes(&r, 512).status().code(), StatusCode::kInvalidArgument);
  r = Range(-1, 0);
  EXPECT_EQ(VolumeBytes(&r, 512).status().code(), StatusCode::kInvalidArgument);
  r = Range(INT64_MAX, 0);
  EXPECT_EQ(VolumeBytes(&r, 4096).value(), uint64_t{INT64_MAX} / 4096 * 4096 + 4096);
  EXPECT_EQ(RoundUp(UINT64_MAX, 512), std::nullopt);
}

TEST(CapacityFits, ChecksBothEnds) {
  auto r = Range(1024, 4096);
  EXPECT_TRUE(CapacityFits(1024, &r));
  EXPECT_TRUE(CapacityFits(4096, &r));
  EXPECT_FALSE(CapacityFits(512, &r));
  EXPECT_FALSE(CapacityFits(8192, &r));
  EXPECT_TRUE(CapacityFits(1, nullptr));
  r = Range(0, 0);
  EXPECT_TRUE(CapacityFits(1 << 30, &r));
}

google::protobuf::Map<std::string, std::string> Params(
    std::initializer_list<std::pair<const char*, const char*>> kv) {
  google::protobuf::Map<std::string, std::string> m;
  for (const auto& [k, v] : kv) m[k] = v;
  return m;
}

TEST(VolumeParameters, ParsesEveryKnownKey) {
  auto p = ParseVolumeParameters(Params({}));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value().block_size, 512u);
  EXPECT_FALSE(p.value().thick);
  EXPECT_FALSE(p.value().direct);
  p = ParseVolumeParameters(Params({{"blockSize", "4096"},
                                    {"provisioning", "thick"},
                                    {"direct", "true"},
                                    {"csi.storage.k8s.io/fstype", "xfs"},
                                    {"csi.storage.k8s.io/pvc/name", "data"}}));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p.value().block_size, 4096u);
  EXPECT_TRUE(p.value().thick);
  EXPECT_TRUE(p.value().direct);
  EXPECT_FALSE(p.value().chap_per_volume);
  p = ParseVolumeParameters(Params({{"chapPerVolume", "true"}}));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p.value().chap_per_volume);
}

TEST(VolumeParameters, NamesTheKeyItRefuses) {
  struct Case {
    const char* key;
    const char* value;
  };
  for (const Case c : {Case{"blockSize", "1024"}, Case{"provisioning", "lazy"},
                       Case{"direct", "yes"}, Case{"chapPerVolume", "1"}, Case{"fsType", "ext4"}}) {
    auto p = ParseVolumeParameters(Params({{c.key, c.value}}));
    ASSERT_FALSE(p.ok()) << c.key;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.key), std::string::npos) << p.status().message();
  }
}

VolumeCapability Cap(Mode::Mode mode, bool block) {
  VolumeCapability c;
  if (block) {
    c.mutable_block();
  } else {
    c.mutable_mount()->set_fs_type("ext4");
  }
  c.mutable_access_mode()->set_mode(mode);
  return c;
}

TEST(Capabilities, OnlySingleNodeModesWithAnAccessType) {
  EXPECT_EQ(UnsupportedCapability(Cap(Mode::SINGLE_NODE_WRITER, false)), "");
  EXPECT_EQ(UnsupportedCapability(Cap(Mode::SINGLE_NODE_READER_ONLY, true)), "");
  for (auto mode : {Mode::MULTI_NODE_MULTI_WRITER, Mode::MULTI_NODE_READER_ONLY,
                    Mode::MULTI_NODE_SINGLE_WRITER, Mode::UNKNOWN}) {
    const std::string why = UnsupportedCapability(Cap(mode, false));
    EXPECT_NE(why.find(Mode::Mode_Name(mode)), std::string::npos) << why;
  }
  VolumeCapability none;
  none.mutable_access_mode()->set_mode(Mode::SINGLE_NODE_WRITER);
  EXPECT_NE(UnsupportedCapability(none), "");
  google::protobuf::RepeatedPtrField<VolumeCapability> caps;
  *caps.Add() = Cap(Mode::SINGLE_NODE_WRITER, true);
  EXPECT_EQ(UnsupportedCapability(caps), "");
  *caps.Add() = Cap(Mode::MULTI_NODE_MULTI_WRITER, true);
  EXPECT_NE(UnsupportedCapability(caps), "");
}

TEST(ChapSecrets, OneWayMutualAndNone) {
  auto c = ParseChapSecrets(Params({}));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c.value().enabled());
  c = ParseChapSecrets(Params({{kChapUser, "u"}, {kChapSecret, "secret-0123456789"}}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().user, "u");
  EXPECT_EQ(c.value().secret, "secret-0123456789");
  c = ParseChapSecrets(
      Params({{kChapUser, "u"}, {kChapSecret, "s"}, {kChapUserIn, "t"}, {kChapSecretIn, "m"}}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().user_in, "t");
  EXPECT_EQ(c.value().secret_in, "m");
}

TEST(ChapSecrets, RefusesHalfPairsWithoutEchoingSecrets) {
  for (const auto& m : {Params({{kChapUser, "u"}}), Params({{kChapSecret, "hunter2hunter2"}}),
                        Params({{kChapUserIn, "t"}, {kChapSecretIn, "hunter2hunter2"}}),
                        Params({{kChapUser, "u"}, {kChapSecret, "s"}, {kChapUserIn, "t"}})}) {
    auto c = ParseChapSecrets(m);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.status().message().find("hunter2"), std::string::npos);
    EXPECT_NE(c.status().message().find("node.session.auth."), std::string::npos);
  }
}

TEST(ChapForVolume, IsAnHmacOfTheSecretsPerVolumeAndRole) {
  const ChapSecrets base{"node-user", "master-secret-0123", "gw-user", "mutual-secret-4567"};
  const ChapSecrets v1 = ChapForVolume(base, "pvc-1").value();
  // Known answers: HMAC-SHA256(secret, "iscsigw-csi chap" NUL volume_id), 16 bytes in hex, as
  // any HMAC implementation computes them (the node and the controller must agree).
  EXPECT_EQ(v1.secret, "8813e74007dd6912980c85fbefd1996b");
  EXPECT_EQ(v1.secret_in, "2893ba53c7f8213a75dac4f0cc81f160");
  EXPECT_EQ(v1.user, "node-user");
  EXPECT_EQ(v1.user_in, "gw-user");
  const ChapSecrets v2 = ChapForVolume(base, "pvc-2").value();
  EXPECT_NE(v2.secret, v1.secret);
  EXPECT_NE(v2.secret_in, v1.secret_in);
  EXPECT_EQ(ChapForVolume(base, "pvc-1")->secret, v1.secret);
  // The same secret in both roles still gives two secrets (RFC 7143 9.2.1).
  const ChapSecrets same =
      ChapForVolume({"u", "same-secret-0123", "t", "same-secret-0123"}, "pvc-1").value();
  EXPECT_NE(same.secret, same.secret_in);
  // One-way CHAP stays one-way; no CHAP stays none.
  EXPECT_TRUE(ChapForVolume({"u", "master-secret-0123", "", ""}, "pvc-1")->secret_in.empty());
  EXPECT_FALSE(ChapForVolume({}, "pvc-1")->enabled());
}

TEST(NodeId, IsTheNameThenTheNodesAddresses) {
  auto id = ParseNodeId("iqn.1993-08.org.debian:01:node-a");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->initiator, "iqn.1993-08.org.debian:01:node-a");
  EXPECT_TRUE(id->addresses.empty());
  EXPECT_EQ(id->ToString(), "iqn.1993-08.org.debian:01:node-a");

  id = ParseNodeId("iqn.1993-08.org.debian:01:node-a@10.0.0.5,FD00:0::5");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->initiator, "iqn.1993-08.org.debian:01:node-a");
  EXPECT_EQ(id->addresses, (std::vector<std::string>{"10.0.0.5", "fd00::5"}));
  EXPECT_EQ(id->ToString(), "iqn.1993-08.org.debian:01:node-a@10.0.0.5,fd00::5");

  for (const char* bad : {"", "@10.0.0.5", "iqn.x@", "iqn.x@10.0.0.5,", "iqn.x@node-a.local",
                          "iqn.x@10.0.0.0/8", "iqn.x@[fd00::5]", "iqn.x@10.0.0.5@10.0.0.6"}) {
    auto r = ParseNodeId(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  // One form for one set: sorted, each address once.
  id = ParseNodeId("iqn.x@10.0.0.6,10.0.0.5,10.0.0.6");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->ToString(), "iqn.x@10.0.0.5,10.0.0.6");
  EXPECT_EQ(CanonicalAddress("127.000.0.1"), std::nullopt);
  EXPECT_EQ(PeerAddress("10.0.0.5:51234"), "10.0.0.5");
  EXPECT_EQ(PeerAddress("[FD00::5]:3260"), "fd00::5");
  EXPECT_EQ(PeerAddress("[fd00::5"), std::nullopt);
  EXPECT_EQ(PeerAddress("node-a:3260"), std::nullopt);
  EXPECT_EQ(CanonicalAddress("::ffff:10.0.0.5"), "::ffff:10.0.0.5");
}

TEST(PageToken, RoundTripsAndRefusesForeignTokens) {
  EXPECT_EQ(ParsePageToken(PageTokenAfter("pvc-1")), "pvc-1");
  EXPECT_EQ(ParsePageToken("invalid-token"), std::nullopt);
  EXPECT_EQ(ParsePageToken("after:"), std::nullopt);
  EXPECT_EQ(ParsePageToken("3"), std::nullopt);
}

}  // namespace volume_model_test
}  // namespace iscsigw::csi
