// How many CPUs this process may use: what sizes the reactor pool (--reactors 0) and the rbd
// store's librados threads. A container usually sees every CPU of its node (std::thread::
// hardware_concurrency) while its CPU affinity or its cgroup's CPU quota lets it use a few: a
// 2-CPU pod on a 64-core node must not start 64 reactors.
#pragma once

#include <string>
#include <string_view>

namespace iscsigw::runtime {

// The number of CPUs in the affinity mask, capped by the smallest CPU quota of the process's
// cgroup and its ancestors (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us over cpu.cfs_period_us),
// rounded up; at least 1. `root` is where /proc and /sys are found ("/" but in tests).
unsigned UsableCpus(const std::string& root = "/");

// A quota in whole CPUs, rounded up (0: no quota). From cgroup v2's cpu.max ("max 100000" or
// "150000 100000"), or from v1's quota and period in microseconds (a quota of -1: none).
unsigned CpusFromCpuMax(std::string_view cpu_max);
unsigned CpusFromCfs(long long quota_us, long long period_us);

}  // namespace iscsigw::runtime
