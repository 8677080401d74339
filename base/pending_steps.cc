#include "base/pending_steps.h"

#include <map>
#include <mutex>
#include <utility>

namespace iscsigw {

namespace {
std::mutex mu;
unsigned long long next_id = 0;                   // guarded by mu
std::map<unsigned long long, std::string> steps;  // guarded by mu; by id, so oldest first
}  // namespace

PendingStep::PendingStep(std::string what) {
  std::lock_guard lock(mu);
  id_ = ++next_id;
  steps.emplace(id_, std::move(what));
}

PendingStep::~PendingStep() {
  std::lock_guard lock(mu);
  steps.erase(id_);
}

std::vector<std::string> PendingStep::List() {
  std::lock_guard lock(mu);
  std::vector<std::string> out;
  for (const auto& [id, what] : steps) out.push_back(what);
  return out;
}

}  // namespace iscsigw
