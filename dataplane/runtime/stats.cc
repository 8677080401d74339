#include "dataplane/runtime/stats.h"

namespace iscsigw::runtime {

Stats& Stats::Global() {
  static Stats* stats = new Stats();  // never destroyed: reactors may outlive static destructors
  return *stats;
}

Stats::Stats() {
  for (auto& c : reactor_clock_) c.store(kNoClock, std::memory_order_relaxed);
}

Stats::~Stats() {
  for (auto& r : reactor_) delete r.load(std::memory_order_relaxed);
}

void Stats::Configure(unsigned reactors) {
  std::lock_guard lock(mu_);
  if (reactors > kMaxReactors) reactors = kMaxReactors;
  for (unsigned i = 0; i < reactors; ++i) {
    if (reactor_[i].load(std::memory_order_relaxed) == nullptr) {
      reactor_[i].store(new ReactorShard(), std::memory_order_release);
    }
  }
  if (reactors > reactors_.load(std::memory_order_relaxed)) {
    reactors_.store(reactors, std::memory_order_release);
  }
}

LunStats* Stats::ForLun(const std::string& target, uint64_t lun) {
  std::lock_guard lock(mu_);
  auto& slot = luns_[{target, lun}];
  if (!slot) {
    const unsigned n = reactors_.load(std::memory_order_relaxed);
    slot = std::make_unique<LunStats>(target, lun, n ? n : 1);
  }
  return slot.get();
}

std::vector<const LunStats*> Stats::Luns() const {
  std::lock_guard lock(mu_);
  std::vector<const LunStats*> out;
  out.reserve(luns_.size());
  for (const auto& [key, s] : luns_) out.push_back(s.get());
  return out;
}

TargetStats* Stats::ForTarget(const std::string& target) {
  std::lock_guard lock(mu_);
  auto& slot = targets_[target];
  if (!slot) {
    const unsigned n = reactors_.load(std::memory_order_relaxed);
    slot = std::make_unique<TargetStats>(target, n ? n : 1);
  }
  return slot.get();
}

std::vector<const TargetStats*> Stats::Targets() const {
  std::lock_guard lock(mu_);
  std::vector<const TargetStats*> out;
  out.reserve(targets_.size());
  for (const auto& [key, s] : targets_) out.push_back(s.get());
  return out;
}

double Stats::ReactorCpuSeconds(unsigned i) const {
  if (i >= kMaxReactors) return -1;
  const clockid_t clock = reactor_clock_[i].load(std::memory_order_acquire);
  timespec ts{};
  if (clock == kNoClock || ::clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace iscsigw::runtime
