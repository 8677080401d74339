#include "dataplane/runtime/cpus.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace iscsigw::runtime {
namespace cpus_test {

namespace fs = std::filesystem;

unsigned AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return static_cast<unsigned>(CPU_COUNT(&set));
}

// A root with proc/self/cgroup and sys/fs/cgroup files, as a container or a host shows them.
class FakeRoot {
 public:
  FakeRoot() : dir_(fs::temp_directory_path() / ("cpus_test." + std::to_string(getpid()))) {
    fs::remove_all(dir_);
  }
  ~FakeRoot() { fs::remove_all(dir_); }
  void Write(const std::string& path, const std::string& text) {
    const fs::path p = dir_ / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return dir_.string() + "/"; }

 private:
  fs::path dir_;
};

TEST(CpusTest, QuotasRoundUpToWholeCpus) {
  EXPECT_EQ(CpusFromCpuMax("max 100000\n"), 0u);
  EXPECT_EQ(CpusFromCpuMax("200000 100000\n"), 2u);
  EXPECT_EQ(CpusFromCpuMax("150000 100000"), 2u);
  EXPECT_EQ(CpusFromCpuMax("50000 100000"), 1u);
  EXPECT_EQ(CpusFromCpuMax("garbage"), 0u);
  EXPECT_EQ(CpusFromCfs(-1, 100000), 0u);
  EXPECT_EQ(CpusFromCfs(300000, 100000), 3u);
  EXPECT_EQ(CpusFromCfs(100000, 0), 0u);
}

TEST(CpusTest, WithoutAQuotaTheAffinityCounts) {
  FakeRoot r;
  r.Write("proc/self/cgroup", "0::/\n");
  r.Write("sys/fs/cgroup/cpu.max", "max 100000\n");
  EXPECT_EQ(UsableCpus(r.root()), AffinityCpus());
  FakeRoot none;  // nothing readable: the affinity too
  EXPECT_EQ(UsableCpus(none.root()), AffinityCpus());
}

// Kubernetes gives a 1-CPU container a quota on its own cgroup (cgroup v2), which is the root of
// its cgroup namespace; a quota on an ancestor counts too, the smallest wins.
TEST(CpusTest, ACgroupV2QuotaCapsTheAffinity) {
  FakeRoot r;
  r.Write("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  r.Write("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  r.Write("sys/fs/cgroup/kubepods/pod1/cpu.max", "100000 100000\n");
  r.Write("sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
  EXPECT_EQ(UsableCpus(r.root()), 1u);
  FakeRoot in_namespace;
  in_namespace.Write("proc/self/cgroup", "0::/\n");
  in_namespace.Write("sys/fs/cgroup/cpu.max", "50000 100000\n");
  EXPECT_EQ(UsableCpus(in_namespace.root()), 1u);
}

TEST(CpusTest, ACgroupV1QuotaCapsTheAffinity) {
  FakeRoot r;
  r.Write("proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
  r.Write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "100000\n");
  r.Write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(UsableCpus(r.root()), 1u);
}

TEST(CpusTest, AQuotaAboveTheAffinityChangesNothing) {
  FakeRoot r;
  r.Write("proc/self/cgroup", "0::/\n");
  r.Write("sys/fs/cgroup/cpu.max", "100000000 100000\n");  // 1000 CPUs
  EXPECT_EQ(UsableCpus(r.root()), AffinityCpus());
}

}  // namespace cpus_test
}  // namespace iscsigw::runtime
