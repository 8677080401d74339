#include "controlplane/metrics/collectors.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <pthread.h>
#include <sys/statvfs.h>
#include <time.h>

#include <cerrno>
#include <cmath>
#include <map>
#include <string>

#include "dataplane/runtime/stats.h"

namespace iscsigw::metrics {
namespace collectors_test {

using prometheus::ClientMetric;
using prometheus::MetricFamily;

const MetricFamily& FindFamily(const std::vector<MetricFamily>& fs, const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return f;
  }
  ADD_FAILURE() << "no family " << name;
  static MetricFamily empty;
  return empty;
}

bool HasFamily(const std::vector<MetricFamily>& fs, const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return true;
  }
  return false;
}

std::string Label(const ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label) {
    if (l.name == name) return l.value;
  }
  return "";
}

const ClientMetric* Find(const MetricFamily& f, const std::string& target, const std::string& lun,
                         const std::string& cls) {
  for (const auto& m : f.metric) {
    if (Label(m, "target") == target && Label(m, "lun") == lun &&
        (cls.empty() || Label(m, "class") == cls)) {
      return &m;
    }
  }
  return nullptr;
}

TEST(LatencyBucket, BoundsAreInclusiveUpperLimits) {
  EXPECT_EQ(runtime::LatencyBucket(0), 0u);
  EXPECT_EQ(runtime::LatencyBucket(10'000), 0u);  // le="1e-05"
  EXPECT_EQ(runtime::LatencyBucket(10'001), 1u);
  EXPECT_EQ(runtime::LatencyBucket(1'000'000), 6u);        // 1 ms
  EXPECT_EQ(runtime::LatencyBucket(10'000'000'000), 18u);  // 10 s
  EXPECT_EQ(runtime::LatencyBucket(10'000'000'001), 19u);  // +Inf
}

TEST(ClassifyCdb, ReadWriteOther) {
  EXPECT_EQ(runtime::ClassifyCdb(0x28), runtime::CmdClass::kRead);
  EXPECT_EQ(runtime::ClassifyCdb(0x88), runtime::CmdClass::kRead);
  EXPECT_EQ(runtime::ClassifyCdb(0x2a), runtime::CmdClass::kWrite);
  EXPECT_EQ(runtime::ClassifyCdb(0x8a), runtime::CmdClass::kWrite);
  EXPECT_EQ(runtime::ClassifyCdb(0x12), runtime::CmdClass::kOther);  // INQUIRY
  EXPECT_EQ(runtime::ClassifyCdb(0x00), runtime::CmdClass::kOther);  // TEST UNIT READY
}

TEST(StatsCollector, SumsLunShardsOfEveryReactor) {
  runtime::Stats stats;
  stats.Configure(3);
  runtime::LunStats* ls = stats.ForLun("iqn.2026-11.io.iscsigw:a", 2);
  ASSERT_EQ(ls->shards(), 3u);
  EXPECT_EQ(stats.ForLun("iqn.2026-11.io.iscsigw:a", 2), ls);       // one block per (target, lun)
  ls->shard(0)->Record(runtime::CmdClass::kRead, 4096, 5'000);      // bucket le=1e-05
  ls->shard(2)->Record(runtime::CmdClass::kRead, 8192, 30'000);     // bucket le=5e-05
  ls->shard(1)->Record(runtime::CmdClass::kWrite, 512, 2'000'000);  // bucket le=0.0025
  ls->shard(1)->Record(runtime::CmdClass::kOther, 0, 20'000'000'000);  // +Inf
  EXPECT_EQ(ls->shard(3), nullptr);

  StatsCollector c(&stats);
  const auto fs = c.Collect();
  const auto& cmds = FindFamily(fs, "iscsigw_scsi_commands_total");
  ASSERT_EQ(cmds.metric.size(), 3u);
  EXPECT_EQ(Find(cmds, "iqn.2026-11.io.iscsigw:a", "2", "read")->counter.value, 2);
  EXPECT_EQ(Find(cmds, "iqn.2026-11.io.iscsigw:a", "2", "write")->counter.value, 1);
  EXPECT_EQ(Find(cmds, "iqn.2026-11.io.iscsigw:a", "2", "other")->counter.value, 1);
  EXPECT_EQ(
      Find(FindFamily(fs, "iscsigw_scsi_read_bytes_total"), "iqn.2026-11.io.iscsigw:a", "2", "")
          ->counter.value,
      12288);
  EXPECT_EQ(
      Find(FindFamily(fs, "iscsigw_scsi_written_bytes_total"), "iqn.2026-11.io.iscsigw:a", "2", "")
          ->counter.value,
      512);

  const auto& lat = FindFamily(fs, "iscsigw_scsi_command_duration_seconds");
  const auto& rh = Find(lat, "iqn.2026-11.io.iscsigw:a", "2", "read")->histogram;
  ASSERT_EQ(rh.bucket.size(), runtime::kLatencyBuckets);
  EXPECT_EQ(rh.sample_count, 2u);
  EXPECT_DOUBLE_EQ(rh.sample_sum, 35e-6);
  EXPECT_DOUBLE_EQ(rh.bucket[0].upper_bound, 1e-5);
  EXPECT_EQ(rh.bucket[0].cumulative_count, 1u);  // 5 us
  EXPECT_EQ(rh.bucket[1].cumulative_count, 1u);  // le 25 us
  EXPECT_EQ(rh.bucket[2].cumulative_count, 2u);  // le 50 us: the 30 us one
  EXPECT_EQ(rh.bucket.back().cumulative_count, 2u);
  EXPECT_TRUE(std::isinf(rh.bucket.back().upper_bound));
  const auto& oh = Find(lat, "iqn.2026-11.io.iscsigw:a", "2", "other")->histogram;
  EXPECT_EQ(oh.bucket[18].cumulative_count, 0u);  // le 10 s
  EXPECT_EQ(oh.bucket[19].cumulative_count, 1u);  // +Inf
}

TEST(StatsCollector, SumsReactorShards) {
  runtime::Stats stats;
  stats.Configure(2);
  stats.reactor(0)->Pdu(0, 0x01);
  stats.reactor(1)->Pdu(0, 0x01);
  stats.reactor(1)->Pdu(0, 0x41);  // immediate bit is not part of the opcode
  stats.reactor(0)->Pdu(1, 0x31);
  runtime::Add(stats.reactor(1)->logins[static_cast<size_t>(runtime::LoginResultFor(0x0201))], 1);
  runtime::Add(stats.reactor(0)->logins[0], 2);
  std::atomic<int> conns{5};
  stats.SetConnectionGauge(1, &conns);
  StatsCollector c(&stats, [] {
    return std::map<std::string, StatsCollector::TargetGauges>{{"t", {3, 2}}};
  });
  const auto fs = c.Collect();
  double scsi_rx = -1, r2t_tx = -1;
  for (const auto& m : FindFamily(fs, "iscsigw_iscsi_pdus_total").metric) {
    if (Label(m, "opcode") == "scsi_command" && Label(m, "direction") == "rx")
      scsi_rx = m.counter.value;
    if (Label(m, "opcode") == "r2t" && Label(m, "direction") == "tx") r2t_tx = m.counter.value;
  }
  EXPECT_EQ(scsi_rx, 3);
  EXPECT_EQ(r2t_tx, 1);
  EXPECT_EQ(FindFamily(fs, "iscsigw_iscsi_r2ts_total").metric[0].counter.value, 1);
  std::map<std::string, double> logins;
  for (const auto& m : FindFamily(fs, "iscsigw_iscsi_logins_total").metric) {
    logins[Label(m, "result")] = m.counter.value;
  }
  EXPECT_EQ(logins["success"], 2);
  EXPECT_EQ(logins["authentication_failure"], 1);
  EXPECT_EQ(logins["target_not_found"], 0);
  const auto& conn = FindFamily(fs, "iscsigw_reactor_connections");
  ASSERT_EQ(conn.metric.size(), 2u);
  EXPECT_EQ(conn.metric[1].gauge.value, 5);
  EXPECT_EQ(Label(conn.metric[1], "reactor"), "1");
  EXPECT_EQ(FindFamily(fs, "iscsigw_iscsi_sessions").metric[0].gauge.value, 3);
  const auto& tconn = FindFamily(fs, "iscsigw_iscsi_connections");
  ASSERT_EQ(tconn.metric.size(), 1u);
  EXPECT_EQ(Label(tconn.metric[0], "target"), "t");
  EXPECT_EQ(tconn.metric[0].gauge.value, 2);
}

TEST(StatsCollector, SumsTaskManagementByFunctionAndResponse) {
  runtime::Stats stats;
  stats.Configure(2);
  runtime::TargetStats* ts = stats.ForTarget("iqn.2026-11.io.iscsigw:a");
  EXPECT_EQ(stats.ForTarget("iqn.2026-11.io.iscsigw:a"), ts);
  ts->shard(0)->Tmf(5, 0);  // LOGICAL UNIT RESET, Function complete
  ts->shard(1)->Tmf(5, 0);
  ts->shard(1)->Tmf(1, 1);       // ABORT TASK, Task does not exist
  ts->shard(0)->Tmf(0x7f, 255);  // undefined function, Function rejected
  EXPECT_EQ(ts->shard(2), nullptr);
  const auto fs = StatsCollector(&stats).Collect();
  const auto& f = FindFamily(fs, "iscsigw_iscsi_task_management_requests_total");
  std::map<std::string, double> got;
  for (const auto& m : f.metric) {
    EXPECT_EQ(Label(m, "target"), "iqn.2026-11.io.iscsigw:a");
    got[Label(m, "function") + "/" + Label(m, "response")] = m.counter.value;
  }
  // Only combinations that happened have a series.
  EXPECT_EQ(got, (std::map<std::string, double>{{"logical_unit_reset/function_complete", 2},
                                                {"abort_task/task_does_not_exist", 1},
                                                {"other/function_rejected", 1}}));
}

TEST(TmfLabels, FollowRfc7143Codes) {
  EXPECT_STREQ(runtime::kTmfFunctionNames[runtime::TmfFunctionIndex(1)], "abort_task");
  EXPECT_STREQ(runtime::kTmfFunctionNames[runtime::TmfFunctionIndex(7)], "target_cold_reset");
  EXPECT_STREQ(runtime::kTmfFunctionNames[runtime::TmfFunctionIndex(8)], "task_reassign");
  EXPECT_STREQ(runtime::kTmfFunctionNames[runtime::TmfFunctionIndex(9)], "other");
  EXPECT_STREQ(runtime::kTmfFunctionNames[runtime::TmfFunctionIndex(0)], "other");
  EXPECT_STREQ(runtime::kTmfResponseNames[runtime::TmfResponseIndex(5)], "not_supported");
  EXPECT_STREQ(runtime::kTmfResponseNames[runtime::TmfResponseIndex(6)], "authorization_failed");
  EXPECT_STREQ(runtime::kTmfResponseNames[runtime::TmfResponseIndex(255)], "function_rejected");
  EXPECT_STREQ(runtime::kTmfResponseNames[runtime::TmfResponseIndex(7)], "function_rejected");
}

TEST(StatsCollector, UnitAttentionsAndStoreIoPerLun) {
  runtime::Stats stats;
  stats.Configure(2);
  runtime::LunStats* ls = stats.ForLun("iqn.2026-11.io.iscsigw:b", 0);
  runtime::Add(ls->shard(0)->unit_attentions, 1);
  runtime::Add(ls->shard(1)->unit_attentions, 2);
  ls->shard(0)->RecordStoreIo(runtime::StoreOp::kWrite, 8'000, 0);           // le=1e-05
  ls->shard(1)->RecordStoreIo(runtime::StoreOp::kWrite, 3'000'000, EIO);     // le=0.005
  ls->shard(1)->RecordStoreIo(runtime::StoreOp::kFlush, 20'000'000'000, 0);  // +Inf
  const auto fs = StatsCollector(&stats).Collect();
  const std::string t = "iqn.2026-11.io.iscsigw:b";
  EXPECT_EQ(Find(FindFamily(fs, "iscsigw_scsi_unit_attentions_total"), t, "0", "")->counter.value,
            3);
  EXPECT_EQ(Find(FindFamily(fs, "iscsigw_store_io_errors_total"), t, "0", "")->counter.value, 1);
  const auto& lat = FindFamily(fs, "iscsigw_store_io_duration_seconds");
  std::map<std::string, const ClientMetric::Histogram*> by_op;
  for (const auto& m : lat.metric) by_op[Label(m, "op")] = &m.histogram;
  // Series appear with their operation's first call: no read, unmap or read_modify_write.
  ASSERT_EQ(by_op.size(), 2u);
  ASSERT_TRUE(by_op.count("write") && by_op.count("flush"));
  const auto& w = *by_op["write"];
  ASSERT_EQ(w.bucket.size(), runtime::kLatencyBuckets);
  EXPECT_EQ(w.sample_count, 2u);
  EXPECT_DOUBLE_EQ(w.sample_sum, 3'008'000e-9);
  EXPECT_EQ(w.bucket[0].cumulative_count, 1u);  // le 10 us
  EXPECT_EQ(w.bucket[7].cumulative_count, 1u);  // le 2.5 ms
  EXPECT_EQ(w.bucket[8].cumulative_count, 2u);  // le 5 ms
  EXPECT_EQ(by_op["flush"]->bucket[18].cumulative_count, 0u);
  EXPECT_EQ(by_op["flush"]->bucket[19].cumulative_count, 1u);
}

TEST(StatsCollector, StoreGaugesFromTheCallback) {
  runtime::Stats stats;
  StatsCollector c(&stats, {}, [] {
    return std::vector<StatsCollector::StoreUsage>{{"iqn.2026-11.io.iscsigw:c", 1, 1 << 30, 4096}};
  });
  const auto fs = c.Collect();
  EXPECT_EQ(
      Find(FindFamily(fs, "iscsigw_store_capacity_bytes"), "iqn.2026-11.io.iscsigw:c", "1", "")
          ->gauge.value,
      1 << 30);
  EXPECT_EQ(
      Find(FindFamily(fs, "iscsigw_store_allocated_bytes"), "iqn.2026-11.io.iscsigw:c", "1", "")
          ->gauge.value,
      4096);
}

TEST(StatsCollector, LunDirSizeAndFreeFromStatvfsAtScrape) {
  runtime::Stats stats;
  EXPECT_FALSE(HasFamily(StatsCollector(&stats).Collect(), "iscsigw_lun_dir_size_bytes"));
  StatsCollector::Options o;
  o.lun_dir = ::testing::TempDir();
  const auto fs = StatsCollector(&stats, {}, {}, o).Collect();
  struct statvfs st {};
  ASSERT_EQ(::statvfs(o.lun_dir.c_str(), &st), 0);
  EXPECT_EQ(FindFamily(fs, "iscsigw_lun_dir_size_bytes").metric.at(0).gauge.value,
            static_cast<double>(st.f_blocks) * static_cast<double>(st.f_frsize));
  // Free space moves with every other writer on the file system: within 64 MiB.
  EXPECT_NEAR(FindFamily(fs, "iscsigw_lun_dir_free_bytes").metric.at(0).gauge.value,
              static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize), 64 << 20);
  // A directory that is gone: no sample rather than a wrong one.
  o.lun_dir = "/nonexistent/iscsigw-lun-dir";
  EXPECT_FALSE(
      HasFamily(StatsCollector(&stats, {}, {}, o).Collect(), "iscsigw_lun_dir_free_bytes"));
}

TEST(StatsCollector, IoUringEnabledAndFallbacks) {
  runtime::Stats stats;
  StatsCollector::Options o;
  int enabled = -1;
  o.io_uring_enabled = [&] { return enabled; };
  o.io_uring_fallbacks = [] { return uint64_t{3}; };
  StatsCollector c(&stats, {}, {}, o);
  EXPECT_FALSE(HasFamily(c.Collect(), "iscsigw_io_uring_enabled"));  // not probed yet
  enabled = 0;
  auto fs = c.Collect();
  EXPECT_EQ(FindFamily(fs, "iscsigw_io_uring_enabled").metric.at(0).gauge.value, 0);
  EXPECT_EQ(FindFamily(fs, "iscsigw_io_uring_fallbacks_total").metric.at(0).counter.value, 3);
  enabled = 1;
  fs = c.Collect();
  EXPECT_EQ(FindFamily(fs, "iscsigw_io_uring_enabled").metric.at(0).gauge.value, 1);
}

TEST(StatsCollector, ReactorBusySecondsFromTheThreadCpuClock) {
  runtime::Stats stats;
  stats.Configure(2);
  clockid_t clock{};
  ASSERT_EQ(pthread_getcpuclockid(pthread_self(), &clock), 0);
  stats.SetReactorClock(1, clock);
  // Burn a little CPU on this thread so its clock is visibly above zero.
  volatile uint64_t x = 0;
  for (int i = 0; i < 2'000'000; ++i) x = x + i;
  auto fs = StatsCollector(&stats).Collect();
  const auto& busy = FindFamily(fs, "iscsigw_reactor_busy_seconds_total");
  ASSERT_EQ(busy.metric.size(), 1u);  // reactor 0 has no running thread
  EXPECT_EQ(Label(busy.metric[0], "reactor"), "1");
  EXPECT_GT(busy.metric[0].counter.value, 0);
  timespec own{};
  ASSERT_EQ(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own), 0);
  EXPECT_LE(busy.metric[0].counter.value, own.tv_sec + own.tv_nsec / 1e9);
  stats.ClearReactorClock(1);
  fs = StatsCollector(&stats).Collect();
  EXPECT_TRUE(FindFamily(fs, "iscsigw_reactor_busy_seconds_total").metric.empty());
}

TEST(LoginResultFor, MapsRfc7143StatusDetails) {
  EXPECT_EQ(runtime::LoginResultFor(0x0000), runtime::LoginResult::kSuccess);
  EXPECT_EQ(runtime::LoginResultFor(0x0202), runtime::LoginResult::kAuthorizationFailure);
  EXPECT_EQ(runtime::LoginResultFor(0x0203), runtime::LoginResult::kTargetNotFound);
  EXPECT_EQ(runtime::LoginResultFor(0x0207), runtime::LoginResult::kInitiatorError);
  EXPECT_EQ(runtime::LoginResultFor(0x0302), runtime::LoginResult::kTargetError);
}

TEST(BuildInfoCollector, OneGaugeWithVersionAndCommit) {
  BuildInfoCollector b("1.2.3", "abc");
  const auto fs = b.Collect();
  ASSERT_EQ(fs.size(), 1u);
  const std::string text = prometheus::TextSerializer().Serialize(fs);
  EXPECT_NE(text.find("iscsigw_build_info{commit=\"abc\",version=\"1.2.3\"} 1"), std::string::npos)
      << text;
}

TEST(ProcessCollector, ReadsProcSelf) {
  ProcessCollector p;
  const auto fs = p.Collect();
  EXPECT_GT(FindFamily(fs, "process_resident_memory_bytes").metric[0].gauge.value, 0);
  EXPECT_GE(FindFamily(fs, "process_open_fds").metric[0].gauge.value, 3);
  EXPECT_GT(FindFamily(fs, "process_start_time_seconds").metric[0].gauge.value, 1.7e9);
}

}  // namespace collectors_test
}  // namespace iscsigw::metrics
