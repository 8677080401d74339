#include "controlplane/metrics/detail.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "controlplane/metrics/collectors.h"
#include "dataplane/runtime/stats.h"

namespace iscsigw::metrics {
namespace detail_test {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

const std::string kA = "iqn.2026-11.io.iscsigw:a";
const std::string kB = "iqn.2026-11.io.iscsigw:b";

// The family `name` of `fs`; a failure and an empty family when there is none.
const MetricFamily* FindFamily(const std::vector<MetricFamily>& fs, const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return &f;
  }
  ADD_FAILURE() << "no family " << name;
  static const MetricFamily empty;
  return &empty;
}

// The metric's labels as a map, for comparisons that ignore label order.
std::map<std::string, std::string> Labels(const ClientMetric& m) {
  std::map<std::string, std::string> out;
  for (const auto& l : m.label) out[l.name] = l.value;
  return out;
}

// The one metric of `f` whose labels are exactly `labels`; a failure and an empty metric (every
// value 0) when there is none.
const ClientMetric* Exactly(const MetricFamily& f, std::map<std::string, std::string> labels) {
  const ClientMetric* found = nullptr;
  for (const auto& m : f.metric) {
    if (Labels(m) != labels) continue;
    EXPECT_EQ(found, nullptr) << f.name << ": two metrics with the same labels";
    found = &m;
  }
  if (found != nullptr) return found;
  ADD_FAILURE() << f.name << ": no metric with exactly the labels asked for";
  static const ClientMetric empty = [] {
    ClientMetric m;
    m.histogram.bucket.resize(runtime::kLatencyBuckets);
    return m;
  }();
  return &empty;
}

std::set<std::string> LabelNames(const std::vector<MetricFamily>& fs, const std::string& family) {
  std::set<std::string> out;
  for (const auto& f : fs) {
    if (f.name != family) continue;
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) out.insert(l.name);
    }
  }
  return out;
}

// Two targets, LUNs 0 and 1 on a and LUN 0 on b, counted on two reactors; sessions on both
// targets; three stores, one of them offline and one non-optimized.
class DetailTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stats_.Configure(2);
    runtime::LunStats* a0 = stats_.ForLun(kA, 0);
    runtime::LunStats* a1 = stats_.ForLun(kA, 1);
    runtime::LunStats* b0 = stats_.ForLun(kB, 0);
    a0->shard(0)->Record(runtime::CmdClass::kRead, 4096, 8'000);         // le 10 us
    a0->shard(1)->Record(runtime::CmdClass::kRead, 8192, 40'000);        // le 50 us
    a1->shard(0)->Record(runtime::CmdClass::kRead, 512, 3'000'000);      // le 5 ms
    a1->shard(1)->Record(runtime::CmdClass::kWrite, 1024, 20'000);       // le 25 us
    b0->shard(0)->Record(runtime::CmdClass::kRead, 1 << 20, 9'000'000);  // le 10 ms
    a0->shard(0)->RecordStoreIo(runtime::StoreOp::kRead, 7'000, 0);
    a1->shard(1)->RecordStoreIo(runtime::StoreOp::kRead, 70'000, EIO);
    b0->shard(1)->RecordStoreIo(runtime::StoreOp::kFlush, 700'000, 0);
    runtime::Add(a0->shard(0)->check_conditions[2], 1);  // not_ready
    runtime::Add(a1->shard(1)->check_conditions[2], 2);
    runtime::Add(b0->shard(0)->check_conditions[5], 4);  // illegal_request
    stats_.ForTarget(kA)->shard(0)->Tmf(1, 0);
    stats_.ForTarget(kB)->shard(1)->Tmf(1, 0);
  }

  std::vector<MetricFamily> Collect(Detail detail) {
    StatsCollector::Options o;
    o.detail = detail;
    return StatsCollector(
               &stats_,
               [] {
                 return std::map<std::string, StatsCollector::TargetGauges>{{kA, {2, 2}},
                                                                            {kB, {1, 1}}};
               },
               [] {
                 return std::vector<StatsCollector::StoreUsage>{{kA, 0, 1 << 20, 4096, true, true},
                                                                {kA, 1, 2 << 20, 8192, false, true},
                                                                {kB, 0, 4 << 20, 0, true, false}};
               },
               o)
        .Collect();
  }

  runtime::Stats stats_;
};

TEST_F(DetailTest, LunLevelIsWhatWasCollected) {
  const auto lun = Collect(Detail::kLun);
  const auto& cmds = *FindFamily(lun, "iscsigw_scsi_commands_total");
  EXPECT_EQ(Exactly(cmds, {{"class", "read"}, {"target", kA}, {"lun", "0"}})->counter.value, 2);
  EXPECT_EQ(Exactly(cmds, {{"class", "read"}, {"target", kA}, {"lun", "1"}})->counter.value, 1);
  // Aggregate at kLun hands the families back as they are.
  const auto again = Aggregate(lun, Detail::kLun);
  ASSERT_EQ(again.size(), lun.size());
  for (size_t i = 0; i < lun.size(); ++i) EXPECT_EQ(again[i].metric.size(), lun[i].metric.size());
}

TEST_F(DetailTest, TargetLevelSumsEachTargetsLunsExactly) {
  const auto fs = Collect(Detail::kTarget);
  const auto& cmds = *FindFamily(fs, "iscsigw_scsi_commands_total");
  EXPECT_EQ(Exactly(cmds, {{"class", "read"}, {"target", kA}})->counter.value, 3);
  EXPECT_EQ(Exactly(cmds, {{"class", "write"}, {"target", kA}})->counter.value, 1);
  EXPECT_EQ(Exactly(cmds, {{"class", "read"}, {"target", kB}})->counter.value, 1);
  EXPECT_EQ(cmds.metric.size(), 6u);  // 2 targets x 3 classes
  EXPECT_EQ(
      Exactly(*FindFamily(fs, "iscsigw_scsi_read_bytes_total"), {{"target", kA}})->counter.value,
      4096 + 8192 + 512);
  EXPECT_EQ(Exactly(*FindFamily(fs, "iscsigw_scsi_check_conditions_total"),
                    {{"sense_key", "not_ready"}, {"target", kA}})
                ->counter.value,
            3);
  EXPECT_EQ(Exactly(*FindFamily(fs, "iscsigw_store_capacity_bytes"), {{"target", kA}})->gauge.value,
            3 << 20);
  EXPECT_EQ(
      Exactly(*FindFamily(fs, "iscsigw_store_io_errors_total"), {{"target", kA}})->counter.value,
      1);

  // The read histogram of target a: the buckets of LUNs 0 and 1 added.
  const ClientMetric::Histogram& h =
      Exactly(*FindFamily(fs, "iscsigw_scsi_command_duration_seconds"),
              {{"class", "read"}, {"target", kA}})
          ->histogram;
  ASSERT_EQ(h.bucket.size(), runtime::kLatencyBuckets);
  EXPECT_EQ(h.sample_count, 3u);
  EXPECT_DOUBLE_EQ(h.sample_sum, (8'000 + 40'000 + 3'000'000) * 1e-9);
  EXPECT_EQ(h.bucket[0].cumulative_count, 1u);   // le 10 us
  EXPECT_EQ(h.bucket[1].cumulative_count, 1u);   // le 25 us
  EXPECT_EQ(h.bucket[2].cumulative_count, 2u);   // le 50 us
  EXPECT_EQ(h.bucket[7].cumulative_count, 2u);   // le 2.5 ms
  EXPECT_EQ(h.bucket[8].cumulative_count, 3u);   // le 5 ms
  EXPECT_EQ(h.bucket[19].cumulative_count, 3u);  // +Inf

  // Store histograms: one per target and op that was called.
  const auto& slat = *FindFamily(fs, "iscsigw_store_io_duration_seconds");
  EXPECT_EQ(slat.metric.size(), 2u);
  EXPECT_EQ(Exactly(slat, {{"op", "read"}, {"target", kA}})->histogram.sample_count, 2u);
  EXPECT_EQ(Exactly(slat, {{"op", "flush"}, {"target", kB}})->histogram.sample_count, 1u);

  // No lun label left but on the two families kept per LUN; target-only families as they were.
  for (const auto& f : fs) {
    const bool per_lun = f.name == "iscsigw_lun_online" || f.name == "iscsigw_lun_alua_state";
    EXPECT_EQ(LabelNames(fs, f.name).count("lun"), per_lun ? 1u : 0u) << f.name;
  }
  EXPECT_EQ(Exactly(*FindFamily(fs, "iscsigw_iscsi_sessions"), {{"target", kA}})->gauge.value, 2);
}

TEST_F(DetailTest, GatewayLevelSumsEveryTargetAndLun) {
  const auto fs = Collect(Detail::kGateway);
  const auto& cmds = *FindFamily(fs, "iscsigw_scsi_commands_total");
  EXPECT_EQ(cmds.metric.size(), 3u);
  EXPECT_EQ(Exactly(cmds, {{"class", "read"}})->counter.value, 4);
  EXPECT_EQ(Exactly(cmds, {{"class", "write"}})->counter.value, 1);
  EXPECT_EQ(Exactly(cmds, {{"class", "other"}})->counter.value, 0);
  EXPECT_EQ(Exactly(*FindFamily(fs, "iscsigw_scsi_written_bytes_total"), {})->counter.value, 1024);
  EXPECT_EQ(Exactly(*FindFamily(fs, "iscsigw_store_allocated_bytes"), {})->gauge.value, 12288);
  const auto& cc = *FindFamily(fs, "iscsigw_scsi_check_conditions_total");
  EXPECT_EQ(Exactly(cc, {{"sense_key", "not_ready"}})->counter.value, 3);
  EXPECT_EQ(Exactly(cc, {{"sense_key", "illegal_request"}})->counter.value, 4);
  EXPECT_EQ(Exactly(*FindFamily(fs, "iscsigw_iscsi_sessions"), {})->gauge.value, 3);
  EXPECT_EQ(Exactly(*FindFamily(fs, "iscsigw_iscsi_task_management_requests_total"),
                    {{"function", "abort_task"}, {"response", "function_complete"}})
                ->counter.value,
            2);

  const ClientMetric::Histogram& h =
      Exactly(*FindFamily(fs, "iscsigw_scsi_command_duration_seconds"), {{"class", "read"}})
          ->histogram;
  EXPECT_EQ(h.sample_count, 4u);
  EXPECT_DOUBLE_EQ(h.sample_sum, (8'000 + 40'000 + 3'000'000 + 9'000'000) * 1e-9);
  EXPECT_EQ(h.bucket[8].cumulative_count, 3u);  // le 5 ms
  EXPECT_EQ(h.bucket[9].cumulative_count, 4u);  // le 10 ms

  for (const auto& f : fs) {
    const bool per_lun = f.name == "iscsigw_lun_online" || f.name == "iscsigw_lun_alua_state";
    const auto names = LabelNames(fs, f.name);
    EXPECT_EQ(names.count("lun"), per_lun ? 1u : 0u) << f.name;
    EXPECT_EQ(names.count("target"), per_lun ? 1u : 0u) << f.name;
  }
}

TEST_F(DetailTest, OnlineAndAluaStayPerLunAtEveryLevel) {
  for (Detail d : {Detail::kLun, Detail::kTarget, Detail::kGateway}) {
    const auto fs = Collect(d);
    const auto& online = *FindFamily(fs, "iscsigw_lun_online");
    ASSERT_EQ(online.metric.size(), 3u);
    EXPECT_EQ(Exactly(online, {{"target", kA}, {"lun", "0"}})->gauge.value, 1);
    EXPECT_EQ(Exactly(online, {{"target", kA}, {"lun", "1"}})->gauge.value, 0);
    EXPECT_EQ(Exactly(online, {{"target", kB}, {"lun", "0"}})->gauge.value, 1);
    const auto& alua = *FindFamily(fs, "iscsigw_lun_alua_state");
    ASSERT_EQ(alua.metric.size(), 3u);
    EXPECT_EQ(Exactly(alua, {{"target", kA}, {"lun", "1"}})->gauge.value, 0);  // active/optimized
    EXPECT_EQ(Exactly(alua, {{"target", kB}, {"lun", "0"}})->gauge.value, 1);  // non-optimized
  }
}

// The pure function on families built by hand: labels compared as sets, other labels kept,
// first-seen order, and families without lun or target untouched.
TEST(Aggregate, MergesMetricsWhoseRemainingLabelsAreEqual) {
  MetricFamily g;
  g.name = "x_bytes";
  g.type = MetricType::Gauge;
  auto add = [&](std::vector<ClientMetric::Label> labels, double v) {
    g.metric.emplace_back();
    g.metric.back().label = std::move(labels);
    g.metric.back().gauge.value = v;
  };
  add({{"lun", "0"}, {"op", "w"}, {"target", "t"}}, 1);
  add({{"op", "r"}, {"target", "t"}, {"lun", "1"}}, 10);  // labels in another order
  add({{"lun", "1"}, {"op", "w"}, {"target", "t"}}, 100);
  add({{"lun", "0"}, {"op", "w"}, {"target", "u"}}, 1000);
  MetricFamily plain;
  plain.name = "y_total";
  plain.type = MetricType::Counter;
  plain.metric.emplace_back();
  plain.metric.back().counter.value = 7;

  const auto t = Aggregate({g, plain}, Detail::kTarget);
  ASSERT_EQ(t[0].metric.size(), 3u);
  EXPECT_EQ(Labels(t[0].metric[0]),
            (std::map<std::string, std::string>{{"op", "w"}, {"target", "t"}}));
  EXPECT_EQ(t[0].metric[0].gauge.value, 101);
  EXPECT_EQ(t[0].metric[1].gauge.value, 10);
  EXPECT_EQ(t[0].metric[2].gauge.value, 1000);
  EXPECT_EQ(t[1].metric.size(), 1u);
  EXPECT_EQ(t[1].metric[0].counter.value, 7);

  const auto gw = Aggregate({g, plain}, Detail::kGateway);
  ASSERT_EQ(gw[0].metric.size(), 2u);
  EXPECT_EQ(Labels(gw[0].metric[0]), (std::map<std::string, std::string>{{"op", "w"}}));
  EXPECT_EQ(gw[0].metric[0].gauge.value, 1101);
  EXPECT_EQ(gw[0].metric[1].gauge.value, 10);
}

TEST(ParseDetail, NamesTheThreeLevelsOnly) {
  EXPECT_EQ(ParseDetail("lun"), Detail::kLun);
  EXPECT_EQ(ParseDetail("target"), Detail::kTarget);
  EXPECT_EQ(ParseDetail("gateway"), Detail::kGateway);
  EXPECT_EQ(ParseDetail("LUN"), std::nullopt);
  EXPECT_EQ(ParseDetail(""), std::nullopt);
}

}  // namespace detail_test
}  // namespace iscsigw::metrics
