// The deciding half of Dataplane::Apply (dataplane/api/apply_plan.h): each validation rule refuses
// with a message that names what is wrong, and the plan of a change says, LUN by LUN, what is
// kept, opened, closed and changed live (docs/live-lun-changes.md). Plain data in and out: no
// reactor, no store, no socket.
#include "dataplane/api/apply_plan.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "dataplane/backing/allowed_paths.h"

namespace iscsigw::api {
// How gtest prints an action that is not the one expected.
inline void PrintTo(LunPlan::Action a, std::ostream* os) {
  *os << (a == LunPlan::Action::kKeep     ? "kKeep"
          : a == LunPlan::Action::kReopen ? "kReopen"
                                          : "kOpen");
}
}  // namespace iscsigw::api

// Its own namespace: the api tests compile in one unity batch.
namespace iscsigw::api::apply_plan_test {
namespace {

constexpr char kTarget[] = "iqn.2026-12.io.iscsigw:plan";
constexpr char kOther[] = "iqn.2026-12.io.iscsigw:other";
constexpr uint64_t kMiB = 1u << 20;

LunSpec Ram(uint32_t id, uint64_t size = kMiB) {
  LunSpec l;
  l.id = id;
  l.backing = BackingKind::kRam;
  l.size_bytes = size;
  return l;
}

LunSpec File(uint32_t id, const std::string& path) {
  LunSpec l;
  l.id = id;
  l.backing = BackingKind::kFile;
  l.path = path;
  l.size_bytes = kMiB;
  return l;
}

TargetSpec Target(const std::string& name, std::vector<LunSpec> luns) {
  TargetSpec t;
  t.name = name;
  t.allow_any_initiator = true;
  t.luns = std::move(luns);
  return t;
}

Config Of(std::vector<TargetSpec> targets) {
  Config c;
  c.targets = std::move(targets);
  return c;
}

// ---------------------------------------------------------------------------------------------
// ValidateConfig

struct Refusal {
  const char* rule;
  Config config;
  StatusCode code;
  const char* message;  // a part of the message that names the object and the field
};

std::vector<Refusal> Refusals() {
  std::vector<Refusal> r;
  r.push_back({"target name not an iSCSI name", Of({Target("iqn.bad", {Ram(0)})}),
               StatusCode::kInvalidArgument, "target iqn.bad: name iqn.bad: an iqn. name is"});
  r.push_back({"target listed twice", Of({Target(kTarget, {}), Target(kTarget, {})}),
               StatusCode::kAlreadyExists, "target iqn.2026-12.io.iscsigw:plan is listed twice"});
  {
    LunSpec l = Ram(3);
    l.block_size = 1024;
    r.push_back({"lun refused by ValidateLun", Of({Target(kTarget, {l})}),
                 StatusCode::kInvalidArgument,
                 "lun 3 of iqn.2026-12.io.iscsigw:plan: block_size 1024 is not 512 or 4096"});
  }
  r.push_back({"file lun outside the allowed paths",
               Of({Target(kTarget, {File(1, "/etc/iscsigw-plan-test.img")})}),
               StatusCode::kPermissionDenied, "lun 1 of iqn.2026-12.io.iscsigw:plan: file.path"});
  r.push_back({"lun listed twice", Of({Target(kTarget, {Ram(2), Ram(2)})}),
               StatusCode::kAlreadyExists, "lun 2 of iqn.2026-12.io.iscsigw:plan is listed twice"});
  {
    TargetSpec t = Target(kTarget, {Ram(0)});
    t.acl.push_back(AclEntrySpec{"Not-A-Name", {}});
    r.push_back({"acl initiator not an iSCSI name", Of({t}), StatusCode::kInvalidArgument,
                 "acl of iqn.2026-12.io.iscsigw:plan: initiator name Not-A-Name"});
  }
  {
    TargetSpec t = Target(kTarget, {Ram(0)});
    t.acl.push_back(AclEntrySpec{"iqn.2026-12.io.iscsigw:host", {"10.0.0.1/8"}});
    r.push_back({"acl source with host bits", Of({t}), StatusCode::kInvalidArgument,
                 "acl entry iqn.2026-12.io.iscsigw:host of iqn.2026-12.io.iscsigw:plan: source "
                 "'10.0.0.1/8'"});
  }
  {
    TargetSpec t = Target(kTarget, {Ram(0)});
    t.chap.user = "user";
    t.chap.secret = "short";
    r.push_back({"target chap secret too short", Of({t}), StatusCode::kInvalidArgument,
                 "target iqn.2026-12.io.iscsigw:plan: chap.secret is 5"});
  }
  {
    Config c = Of({Target(kTarget, {Ram(0)})});
    c.discovery_chap.user = "user";
    c.discovery_chap.secret = "short";
    r.push_back({"discovery chap secret too short", c, StatusCode::kInvalidArgument,
                 "discovery: chap.secret is 5"});
  }
  {
    TargetSpec a = Target(kTarget, {Ram(0)});
    a.chap = {"ua", "secret-of-a-12", "ma", "secret-of-b-12"};
    TargetSpec b = Target(kOther, {Ram(0)});
    b.chap = {"ub", "secret-of-b-12", "", ""};
    r.push_back({"mutual secret of one target the initiator secret of another", Of({a, b}),
                 StatusCode::kInvalidArgument,
                 "target iqn.2026-12.io.iscsigw:plan: chap.mutual_secret is the initiator secret "
                 "of target iqn.2026-12.io.iscsigw:other"});
  }
  return r;
}

TEST(ValidateConfig, EachRuleRefusesWithAMessageNamingTheObjectAndField) {
  for (const auto& r : Refusals()) {
    SCOPED_TRACE(r.rule);
    const Status s = ValidateConfig(r.config, BackingPolicy{}, Dataplane::ApplyMode::kStrict);
    EXPECT_EQ(s.code(), r.code) << s.message();
    EXPECT_NE(s.message().find(r.message), std::string::npos) << s.message();
  }
}

TEST(ValidateConfig, AcceptsAValidConfiguration) {
  TargetSpec a = Target(kTarget, {Ram(0), Ram(1)});
  a.acl.push_back(AclEntrySpec{"iqn.2026-12.io.iscsigw:host", {"10.0.0.0/8"}});
  a.chap = {"ua", "secret-of-a-12", "", ""};
  const Config c = Of({a, Target(kOther, {Ram(0)})});
  const Status s = ValidateConfig(c, BackingPolicy{}, Dataplane::ApplyMode::kStrict);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(ValidateConfig, AFileLunBeneathTheAllowedPathsPasses) {
  auto paths = backing::AllowedPaths::Make({"/var/tmp"});
  ASSERT_TRUE(paths.ok()) << paths.status().message();
  BackingPolicy policy;
  policy.paths = paths.value();
  const Config c = Of({Target(kTarget, {File(0, "/var/tmp/iscsigw-plan-test.img")})});
  EXPECT_TRUE(ValidateConfig(c, policy, Dataplane::ApplyMode::kStrict).ok());
  EXPECT_EQ(ValidateConfig(c, BackingPolicy{}, Dataplane::ApplyMode::kStrict).code(),
            StatusCode::kPermissionDenied);
}

// A startup configuration accepted before the check existed still starts; a change is refused.
TEST(ValidateConfig, SharedMutualSecretsRefuseAChangeButNotAStartup) {
  TargetSpec a = Target(kTarget, {Ram(0)});
  a.chap = {"ua", "secret-of-a-12", "", ""};
  Config c = Of({a});
  c.discovery_chap = {"ud", "secret-of-d-12", "md", "secret-of-a-12"};
  EXPECT_FALSE(ValidateConfig(c, BackingPolicy{}, Dataplane::ApplyMode::kStrict).ok());
  EXPECT_TRUE(ValidateConfig(c, BackingPolicy{}, Dataplane::ApplyMode::kStartup).ok());
}

// ---------------------------------------------------------------------------------------------
// PlanApply

std::map<LunKey, LiveLun> Live(const std::string& target, std::vector<LunSpec> luns) {
  std::map<LunKey, LiveLun> live;
  for (auto& l : luns) live[{target, l.id}] = LiveLun{l, false};
  return live;
}

using Action = LunPlan::Action;

TEST(PlanApply, ANewConfigurationOpensEveryLunInIdOrder) {
  const ApplyPlan plan = PlanApply({}, Of({Target(kTarget, {Ram(2), Ram(0), Ram(1)})}));
  ASSERT_EQ(plan.targets.size(), 1u);
  const TargetPlan& tp = plan.targets[0];
  EXPECT_EQ(tp.name, kTarget);
  ASSERT_EQ(tp.luns.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(tp.luns[i].spec.id, i);
    EXPECT_EQ(tp.luns[i].action, Action::kOpen);
    EXPECT_FALSE(tp.luns[i].replaces);
  }
  EXPECT_TRUE(tp.inventory_changed);
  EXPECT_EQ(tp.added, (std::set<uint32_t>{0, 1, 2}));
  EXPECT_TRUE(plan.removed.empty());
}

TEST(PlanApply, AnUnchangedLunIsKeptAndNothingIsReported) {
  const ApplyPlan plan = PlanApply(Live(kTarget, {Ram(0)}), Of({Target(kTarget, {Ram(0)})}));
  ASSERT_EQ(plan.targets.at(0).luns.size(), 1u);
  const LunPlan& lp = plan.targets[0].luns[0];
  EXPECT_EQ(lp.action, Action::kKeep);
  EXPECT_FALSE(lp.grow);
  EXPECT_FALSE(plan.targets[0].inventory_changed);
  EXPECT_TRUE(plan.removed.empty());
}

TEST(PlanApply, AddingALunChangesTheInventoryAndKeepsTheOthers) {
  const ApplyPlan plan =
      PlanApply(Live(kTarget, {Ram(0)}), Of({Target(kTarget, {Ram(0), Ram(5)})}));
  const TargetPlan& tp = plan.targets.at(0);
  ASSERT_EQ(tp.luns.size(), 2u);
  EXPECT_EQ(tp.luns[0].action, Action::kKeep);
  EXPECT_EQ(tp.luns[1].action, Action::kOpen);
  EXPECT_TRUE(tp.inventory_changed);
  EXPECT_EQ(tp.added, (std::set<uint32_t>{5}));  // LUN 0 hears of it, LUN 5 does not
}

TEST(PlanApply, RemovingALunClosesItAndChangesTheInventory) {
  const ApplyPlan plan =
      PlanApply(Live(kTarget, {Ram(0), Ram(1)}), Of({Target(kTarget, {Ram(0)})}));
  const TargetPlan& tp = plan.targets.at(0);
  EXPECT_TRUE(tp.inventory_changed);
  EXPECT_TRUE(tp.added.empty());
  EXPECT_EQ(plan.removed, (std::vector<LunKey>{{kTarget, 1}}));
}

TEST(PlanApply, RemovingATargetClosesItsLunsAndLeavesTheOthersAlone) {
  auto live = Live(kTarget, {Ram(0)});
  live[{kOther, 0}] = LiveLun{Ram(0), false};
  live[{kOther, 1}] = LiveLun{Ram(1), false};
  const ApplyPlan plan = PlanApply(live, Of({Target(kTarget, {Ram(0)})}));
  ASSERT_EQ(plan.targets.size(), 1u);
  EXPECT_FALSE(plan.targets[0].inventory_changed);
  EXPECT_EQ(plan.removed, (std::vector<LunKey>{{kOther, 0}, {kOther, 1}}));
}

TEST(PlanApply, ALargerSizeGrowsTheSameLunWithoutReopeningIt) {
  const ApplyPlan plan =
      PlanApply(Live(kTarget, {Ram(0)}), Of({Target(kTarget, {Ram(0, 2 * kMiB)})}));
  const LunPlan& lp = plan.targets.at(0).luns.at(0);
  EXPECT_EQ(lp.action, Action::kKeep);
  EXPECT_TRUE(lp.grow);
  EXPECT_EQ(lp.spec.size_bytes, 2 * kMiB);
  EXPECT_FALSE(plan.targets[0].inventory_changed);
}

// docs/live-lun-changes.md: read_only, direct and fault reopen the store of the same LUN.
TEST(PlanApply, StoreSettingsReopenTheSameLunInPlace) {
  LunSpec ro = File(0, "/var/tmp/a.img");
  ro.read_only = true;
  LunSpec direct = File(0, "/var/tmp/a.img");
  direct.direct = true;
  LunSpec fault = Ram(0);
  fault.fault.error = 5;
  fault.fault.after_ops = 1;
  ASSERT_TRUE(fault.fault.active());
  const std::vector<std::pair<LunSpec, LunSpec>> changes = {
      {File(0, "/var/tmp/a.img"), ro},
      {File(0, "/var/tmp/a.img"), direct},
      {Ram(0), fault},
      {fault, Ram(0)},
  };
  for (const auto& [was, now] : changes) {
    const ApplyPlan plan = PlanApply(Live(kTarget, {was}), Of({Target(kTarget, {now})}));
    const LunPlan& lp = plan.targets.at(0).luns.at(0);
    EXPECT_EQ(lp.action, Action::kReopen);
    EXPECT_FALSE(lp.grow);
    EXPECT_EQ(lp.reopen_to.read_only, now.read_only);
    EXPECT_EQ(lp.reopen_to.direct, now.direct);
    EXPECT_EQ(lp.reopen_to.fault.active(), now.fault.active());
    EXPECT_FALSE(plan.targets[0].inventory_changed);
    EXPECT_TRUE(plan.removed.empty());
  }
}

// docs/live-lun-changes.md: "A size and a reopen together: the reopen first, then the growth."
TEST(PlanApply, AReopenWithALargerSizeReopensAtTheOldSizeThenGrows) {
  LunSpec now = File(0, "/var/tmp/a.img");
  now.read_only = true;
  now.size_bytes = 4 * kMiB;
  const ApplyPlan plan =
      PlanApply(Live(kTarget, {File(0, "/var/tmp/a.img")}), Of({Target(kTarget, {now})}));
  const LunPlan& lp = plan.targets.at(0).luns.at(0);
  EXPECT_EQ(lp.action, Action::kReopen);
  EXPECT_EQ(lp.reopen_to.size_bytes, kMiB);
  EXPECT_TRUE(lp.reopen_to.read_only);
  EXPECT_TRUE(lp.grow);
  EXPECT_EQ(lp.spec.size_bytes, 4 * kMiB);
}

// docs/live-lun-changes.md: the next change of any kind to a LUN left closed tries again.
TEST(PlanApply, ALunLeftClosedIsReopenedEvenWithTheSameSettings) {
  auto live = Live(kTarget, {File(0, "/var/tmp/a.img")});
  live.begin()->second.left_closed = true;
  const ApplyPlan plan = PlanApply(live, Of({Target(kTarget, {File(0, "/var/tmp/a.img")})}));
  const LunPlan& lp = plan.targets.at(0).luns.at(0);
  EXPECT_EQ(lp.action, Action::kReopen);
  EXPECT_EQ(lp.reopen_to.path, "/var/tmp/a.img");
}

// docs/live-lun-changes.md: another backing, block size, serial or device id is another logical
// unit; the old goes with its state, the new opens.
TEST(PlanApply, AnotherBackingOrIdentityReplacesTheLun) {
  LunSpec block = Ram(0);
  block.block_size = 4096;
  LunSpec serial = Ram(0);
  serial.serial = "other";
  LunSpec device = Ram(0);
  device.device_id = 0x6000000000000001ull;
  LunSpec smaller = Ram(0, kMiB / 2);
  const std::vector<std::pair<const char*, LunSpec>> changes = {
      {"backing", File(0, "/var/tmp/a.img")},
      {"block size", block},
      {"serial", serial},
      {"device id", device},
      {"a smaller size", smaller},
  };
  for (const auto& [what, now] : changes) {
    SCOPED_TRACE(what);
    const ApplyPlan plan = PlanApply(Live(kTarget, {Ram(0)}), Of({Target(kTarget, {now})}));
    const LunPlan& lp = plan.targets.at(0).luns.at(0);
    EXPECT_EQ(lp.action, Action::kOpen);
    EXPECT_TRUE(lp.replaces);
    // The id stays in the inventory: REPORTED LUNS DATA HAS CHANGED is not raised for it, and
    // the LUN is not among those removed (its durable state stays under its id).
    EXPECT_FALSE(plan.targets[0].inventory_changed);
    EXPECT_TRUE(plan.targets[0].added.empty());
    EXPECT_TRUE(plan.removed.empty());
  }
  {
    LunSpec other_file = File(0, "/var/tmp/b.img");
    const ApplyPlan plan =
        PlanApply(Live(kTarget, {File(0, "/var/tmp/a.img")}), Of({Target(kTarget, {other_file})}));
    EXPECT_EQ(plan.targets.at(0).luns.at(0).action, Action::kOpen);
    EXPECT_TRUE(plan.targets[0].luns[0].replaces);
  }
}

TEST(PlanApply, TargetsKeepTheConfigurationsOrder) {
  const ApplyPlan plan = PlanApply({}, Of({Target(kTarget, {Ram(0)}), Target(kOther, {Ram(0)})}));
  ASSERT_EQ(plan.targets.size(), 2u);
  EXPECT_EQ(plan.targets[0].name, kTarget);
  EXPECT_EQ(plan.targets[1].name, kOther);
}

}  // namespace
}  // namespace iscsigw::api::apply_plan_test
