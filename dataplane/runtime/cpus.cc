#include "dataplane/runtime/cpus.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace iscsigw::runtime {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

long long ParseNumber(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() ? v : -1;
}

// The cgroup path and its ancestors, innermost first: "/a/b" gives "/a/b", "/a", "".
std::vector<std::string> Ancestry(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path != "/") {
    out.push_back(path);
    path = path.substr(0, path.rfind('/'));
  }
  out.push_back("");
  return out;
}

// The smallest quota (0: none) over the cgroup `path` in the hierarchy mounted at `mount` and its
// ancestors; `quota_of(dir)` reads one directory's. A container's own cgroup is usually the mount's
// root, its path in /proc/self/cgroup the host's: the root is read too.
template <typename QuotaOf>
unsigned SmallestQuota(const std::string& mount, const std::string& path, QuotaOf quota_of) {
  unsigned best = 0;
  for (const std::string& dir : Ancestry(path)) {
    const unsigned q = quota_of(mount + dir);
    if (q != 0 && (best == 0 || q < best)) best = q;
  }
  return best;
}

}  // namespace

unsigned CpusFromCpuMax(std::string_view cpu_max) {
  const auto space = cpu_max.find(' ');
  if (space == std::string_view::npos) return 0;
  const std::string_view quota = cpu_max.substr(0, space);
  if (quota == "max") return 0;
  return CpusFromCfs(ParseNumber(quota), ParseNumber(cpu_max.substr(space + 1)));
}

unsigned CpusFromCfs(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  return static_cast<unsigned>((quota_us + period_us - 1) / period_us);
}

unsigned UsableCpus(const std::string& root) {
  unsigned cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = static_cast<unsigned>(CPU_COUNT(&set));
  if (cpus == 0) cpus = std::max(1u, std::thread::hardware_concurrency());

  const std::string cgroups = root + "sys/fs/cgroup";
  unsigned quota = 0;
  std::istringstream lines(ReadFile(root + "proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    // "<id>:<controllers>:<path>"; cgroup v2 is "0::<path>".
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    unsigned q = 0;
    if (controllers.empty()) {
      q = SmallestQuota(cgroups, path, [](const std::string& dir) {
        return CpusFromCpuMax(ReadFile(dir + "/cpu.max"));
      });
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
      for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
        q = SmallestQuota(cgroups + mount, path, [](const std::string& dir) {
          return CpusFromCfs(ParseNumber(ReadFile(dir + "/cpu.cfs_quota_us")),
                             ParseNumber(ReadFile(dir + "/cpu.cfs_period_us")));
        });
        if (q != 0) break;
      }
    }
    if (q != 0 && (quota == 0 || q < quota)) quota = q;
  }
  return quota != 0 ? std::min(cpus, quota) : cpus;
}

}  // namespace iscsigw::runtime
