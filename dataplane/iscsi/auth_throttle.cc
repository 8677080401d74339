#include "dataplane/iscsi/auth_throttle.h"

#include <algorithm>

namespace iscsigw::iscsi {

std::string AuthThrottle::Key(std::string_view initiator, std::string_view source) {
  // NUL cannot occur in either: text values with NUL are rejected when parsed (pdu/text.h).
  std::string k;
  k.reserve(initiator.size() + 1 + source.size());
  k.append(initiator).push_back('\0');
  k.append(source);
  return k;
}

AuthThrottle::Clock::duration AuthThrottle::LockedFor(std::string_view initiator,
                                                      std::string_view source,
                                                      Clock::time_point now) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(Key(initiator, source));
  if (it == entries_.end() || it->second.locked_until <= now) return Clock::duration::zero();
  return it->second.locked_until - now;
}

AuthThrottle::Failure AuthThrottle::RecordFailure(std::string_view initiator,
                                                  std::string_view source, Clock::time_point now) {
  std::lock_guard lock(mu_);
  std::string key = Key(initiator, source);
  auto it = entries_.find(key);
  if (it != entries_.end() && now - it->second.last_failure > options_.forget_after) {
    it->second = Entry{};
  }
  if (it == entries_.end()) {
    if (entries_.size() >= options_.max_entries) MakeRoom(now);
    it = entries_.emplace(std::move(key), Entry{}).first;
  }
  Entry& e = it->second;
  e.failures = e.failures == UINT32_MAX ? e.failures : e.failures + 1;
  e.last_failure = now;
  Failure f{e.failures, Clock::duration::zero()};
  if (e.failures >= options_.free_failures) {
    // base * 2^(failures beyond the free ones), saturating at max.
    const uint32_t doublings = std::min<uint32_t>(e.failures - options_.free_failures, 30);
    auto lockout = options_.base;
    for (uint32_t i = 0; i < doublings && lockout < options_.max; ++i) lockout *= 2;
    f.lockout = std::min(lockout, options_.max);
    e.locked_until = now + f.lockout;
  }
  return f;
}

void AuthThrottle::RecordSuccess(std::string_view initiator, std::string_view source) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(Key(initiator, source));
  if (it != entries_.end()) entries_.erase(it);
}

size_t AuthThrottle::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

void AuthThrottle::MakeRoom(Clock::time_point now) {
  std::erase_if(entries_, [&](const auto& kv) {
    return kv.second.locked_until <= now && now - kv.second.last_failure > options_.forget_after;
  });
  if (entries_.size() < options_.max_entries) return;
  auto oldest = std::min_element(
      entries_.begin(), entries_.end(),
      [](const auto& a, const auto& b) { return a.second.last_failure < b.second.last_failure; });
  entries_.erase(oldest);
}

}  // namespace iscsigw::iscsi
