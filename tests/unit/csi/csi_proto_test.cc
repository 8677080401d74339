// proto/csi/v1/csi.proto is a wire contract with kubelet and the kubernetes-csi sidecars: these
// tests pin, through the generated descriptors, the names and numbers the CSI specification v1.x
// fixes. A renumbered field, a renamed package or a moved oneof member fails here.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "csi/v1/csi.pb.h"

namespace iscsigw::csi {
namespace csi_proto_test {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;

const Descriptor* Message(const std::string& name) {
  const Descriptor* d = DescriptorPool::generated_pool()->FindMessageTypeByName("csi.v1." + name);
  EXPECT_NE(d, nullptr) << "csi.v1." << name;
  return d;
}

struct Field {
  const char* name;
  int number;
  FieldDescriptor::Type type;
  bool repeated = false;
};

// Every field of `message`, by name, with its number and type; and no other field.
void ExpectFields(const std::string& message, const std::vector<Field>& want) {
  const Descriptor* d = Message(message);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->field_count(), static_cast<int>(want.size())) << message;
  for (const Field& f : want) {
    const FieldDescriptor* fd = d->FindFieldByName(f.name);
    ASSERT_NE(fd, nullptr) << message << "." << f.name;
    EXPECT_EQ(fd->number(), f.number) << message << "." << f.name;
    EXPECT_EQ(fd->type(), f.type) << message << "." << f.name;
    EXPECT_EQ(fd->is_repeated(), f.repeated) << message << "." << f.name;
  }
}

constexpr auto kString = FieldDescriptor::TYPE_STRING;
constexpr auto kMsg = FieldDescriptor::TYPE_MESSAGE;
constexpr auto kBool = FieldDescriptor::TYPE_BOOL;
constexpr auto kInt64 = FieldDescriptor::TYPE_INT64;
constexpr auto kEnum = FieldDescriptor::TYPE_ENUM;
// A map<string, string> is a repeated message of its entries on the wire.
constexpr bool kRep = true;

TEST(CsiProto, ServicesHaveTheSpecsPackageAndMethods) {
  const auto* pool = DescriptorPool::generated_pool();
  const std::vector<std::pair<std::string, std::vector<std::string>>> services = {
      {"csi.v1.Identity", {"GetPluginInfo", "GetPluginCapabilities", "Probe"}},
      {"csi.v1.Controller",
       {"CreateVolume", "DeleteVolume", "ControllerPublishVolume", "ControllerUnpublishVolume",
        "ValidateVolumeCapabilities", "ListVolumes", "GetCapacity", "ControllerGetCapabilities",
        "CreateSnapshot", "DeleteSnapshot", "ListSnapshots", "GetSnapshot",
        "ControllerExpandVolume", "ControllerGetVolume", "ControllerModifyVolume"}},
      {"csi.v1.Node",
       {"NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume",
        "NodeGetVolumeStats", "NodeExpandVolume", "NodeGetCapabilities", "NodeGetInfo"}},
  };
  for (const auto& [name, methods] : services) {
    const auto* s = pool->FindServiceByName(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->method_count(), static_cast<int>(methods.size())) << name;
    for (const auto& m : methods) {
      const auto* md = s->FindMethodByName(m);
      ASSERT_NE(md, nullptr) << name << "/" << m;
      EXPECT_EQ(md->input_type()->full_name(), "csi.v1." + m + "Request");
      EXPECT_FALSE(md->client_streaming() || md->server_streaming()) << m;
    }
  }
  // The response of Probe is a BoolValue wrapper, not a bool: unset means ready.
  EXPECT_EQ(Message("ProbeResponse")->FindFieldByName("ready")->message_type()->full_name(),
            "google.protobuf.BoolValue");
}

TEST(CsiProto, CreateVolumeRequestFields) {
  ExpectFields("CreateVolumeRequest", {{"name", 1, kString},
                                       {"capacity_range", 2, kMsg},
                                       {"volume_capabilities", 3, kMsg, kRep},
                                       {"parameters", 4, kMsg, kRep},
                                       {"secrets", 5, kMsg, kRep},
                                       {"volume_content_source", 6, kMsg},
                                       {"accessibility_requirements", 7, kMsg},
                                       {"mutable_parameters", 8, kMsg, kRep}});
  ExpectFields("CapacityRange", {{"required_bytes", 1, kInt64}, {"limit_bytes", 2, kInt64}});
  ExpectFields("Volume", {{"capacity_bytes", 1, kInt64},
                          {"volume_id", 2, kString},
                          {"volume_context", 3, kMsg, kRep},
                          {"content_source", 4, kMsg},
                          {"accessible_topology", 5, kMsg, kRep}});
}

TEST(CsiProto, VolumeCapabilityOneofAndAccessModes) {
  const Descriptor* d = Message("VolumeCapability");
  ASSERT_NE(d, nullptr);
  const auto* oneof = d->FindOneofByName("access_type");
  ASSERT_NE(oneof, nullptr);
  ASSERT_EQ(oneof->field_count(), 2);
  EXPECT_EQ(oneof->field(0)->name(), "block");
  EXPECT_EQ(oneof->field(0)->number(), 1);
  EXPECT_EQ(oneof->field(1)->name(), "mount");
  EXPECT_EQ(oneof->field(1)->number(), 2);
  EXPECT_EQ(d->FindFieldByName("access_mode")->number(), 3);
  EXPECT_EQ(d->FindFieldByName("access_mode")->containing_oneof(), nullptr);
  ExpectFields("VolumeCapability.MountVolume", {{"fs_type", 1, kString},
                                                {"mount_flags", 2, kString, kRep},
                                                {"volume_mount_group", 3, kString}});

  using Mode = ::csi::v1::VolumeCapability::AccessMode;
  EXPECT_EQ(Mode::UNKNOWN, 0);
  EXPECT_EQ(Mode::SINGLE_NODE_WRITER, 1);
  EXPECT_EQ(Mode::SINGLE_NODE_READER_ONLY, 2);
  EXPECT_EQ(Mode::MULTI_NODE_READER_ONLY, 3);
  EXPECT_EQ(Mode::MULTI_NODE_SINGLE_WRITER, 4);
  EXPECT_EQ(Mode::MULTI_NODE_MULTI_WRITER, 5);
  EXPECT_EQ(Mode::SINGLE_NODE_SINGLE_WRITER, 6);
  EXPECT_EQ(Mode::SINGLE_NODE_MULTI_WRITER, 7);
  EXPECT_EQ(Mode::Mode_descriptor()->value_count(), 8);
  ExpectFields("VolumeCapability.AccessMode", {{"mode", 1, kEnum}});
}

TEST(CsiProto, PublishAndStageFields) {
  ExpectFields("ControllerPublishVolumeRequest", {{"volume_id", 1, kString},
                                                  {"node_id", 2, kString},
                                                  {"volume_capability", 3, kMsg},
                                                  {"readonly", 4, kBool},
                                                  {"secrets", 5, kMsg, kRep},
                                                  {"volume_context", 6, kMsg, kRep}});
  ExpectFields("ControllerPublishVolumeResponse", {{"publish_context", 1, kMsg, kRep}});
  ExpectFields("NodeStageVolumeRequest", {{"volume_id", 1, kString},
                                          {"publish_context", 2, kMsg, kRep},
                                          {"staging_target_path", 3, kString},
                                          {"volume_capability", 4, kMsg},
                                          {"secrets", 5, kMsg, kRep},
                                          {"volume_context", 6, kMsg, kRep}});
  ExpectFields("NodeUnstageVolumeRequest",
               {{"volume_id", 1, kString}, {"staging_target_path", 2, kString}});
  ExpectFields("NodePublishVolumeRequest", {{"volume_id", 1, kString},
                                            {"publish_context", 2, kMsg, kRep},
                                            {"staging_target_path", 3, kString},
                                            {"target_path", 4, kString},
                                            {"volume_capability", 5, kMsg},
                                            {"readonly", 6, kBool},
                                            {"secrets", 7, kMsg, kRep},
                                            {"volume_context", 8, kMsg, kRep}});
  ExpectFields("NodeGetInfoResponse", {{"node_id", 1, kString},
                                       {"max_volumes_per_node", 2, kInt64},
                                       {"accessible_topology", 3, kMsg}});
  ExpectFields("NodeExpandVolumeRequest", {{"volume_id", 1, kString},
                                           {"volume_path", 2, kString},
                                           {"capacity_range", 3, kMsg},
                                           {"staging_target_path", 4, kString},
                                           {"volume_capability", 5, kMsg},
                                           {"secrets", 6, kMsg, kRep}});
}

TEST(CsiProto, CapabilityEnums) {
  using Service = ::csi::v1::PluginCapability::Service;
  EXPECT_EQ(Service::CONTROLLER_SERVICE, 1);
  EXPECT_EQ(Service::VOLUME_ACCESSIBILITY_CONSTRAINTS, 2);
  EXPECT_EQ(Service::GROUP_CONTROLLER_SERVICE, 3);
  using Expansion = ::csi::v1::PluginCapability::VolumeExpansion;
  EXPECT_EQ(Expansion::ONLINE, 1);
  EXPECT_EQ(Expansion::OFFLINE, 2);
  const auto* plugin = Message("PluginCapability");
  EXPECT_EQ(plugin->FindFieldByName("service")->number(), 1);
  EXPECT_EQ(plugin->FindFieldByName("volume_expansion")->number(), 2);
  EXPECT_NE(plugin->FindFieldByName("volume_expansion")->containing_oneof(), nullptr);

  using Ctl = ::csi::v1::ControllerServiceCapability::RPC;
  EXPECT_EQ(Ctl::CREATE_DELETE_VOLUME, 1);
  EXPECT_EQ(Ctl::PUBLISH_UNPUBLISH_VOLUME, 2);
  EXPECT_EQ(Ctl::LIST_VOLUMES, 3);
  EXPECT_EQ(Ctl::GET_CAPACITY, 4);
  EXPECT_EQ(Ctl::CREATE_DELETE_SNAPSHOT, 5);
  EXPECT_EQ(Ctl::LIST_SNAPSHOTS, 6);
  EXPECT_EQ(Ctl::CLONE_VOLUME, 7);
  EXPECT_EQ(Ctl::PUBLISH_READONLY, 8);
  EXPECT_EQ(Ctl::EXPAND_VOLUME, 9);
  EXPECT_EQ(Ctl::LIST_VOLUMES_PUBLISHED_NODES, 10);
  EXPECT_EQ(Ctl::MODIFY_VOLUME, 14);
  EXPECT_EQ(Ctl::GET_SNAPSHOT, 15);

  using Node = ::csi::v1::NodeServiceCapability::RPC;
  EXPECT_EQ(Node::STAGE_UNSTAGE_VOLUME, 1);
  EXPECT_EQ(Node::GET_VOLUME_STATS, 2);
  EXPECT_EQ(Node::EXPAND_VOLUME, 3);
  EXPECT_EQ(Node::VOLUME_CONDITION, 4);
  EXPECT_EQ(Node::SINGLE_NODE_MULTI_WRITER, 5);
  EXPECT_EQ(Node::VOLUME_MOUNT_GROUP, 6);
}

TEST(CsiProto, SecretsCarryTheCsiSecretOption) {
  // Sidecars use the option to strip secrets from their logs; the extension number is the spec's.
  EXPECT_EQ(::csi::v1::csi_secret.number(), 1059);
  EXPECT_EQ(::csi::v1::alpha_field.number(), 1060);
  for (const char* m :
       {"CreateVolumeRequest", "DeleteVolumeRequest", "ControllerPublishVolumeRequest",
        "NodeStageVolumeRequest", "NodePublishVolumeRequest"}) {
    const auto* f = Message(m)->FindFieldByName("secrets");
    ASSERT_NE(f, nullptr) << m;
    EXPECT_TRUE(f->options().GetExtension(::csi::v1::csi_secret)) << m;
  }
}

}  // namespace csi_proto_test
}  // namespace iscsigw::csi
