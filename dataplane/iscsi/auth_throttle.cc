#include "dataplane/iscsi/auth_throttle.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstdio>

namespace iscsigw::iscsi {

std::string AuthThrottle::Key(std::string_view initiator, std::string_view source) {
  // NUL cannot occur in either: text values with NUL are rejected when parsed (pdu/text.h).
  std::string k;
  k.reserve(initiator.size() + 1 + source.size());
  k.append(initiator).push_back('\0');
  k.append(source);
  return k;
}

std::string AuthThrottle::SourceKey(std::string_view source, std::string_view target) {
  std::string k(1, '\0');
  k.append(SourcePrefix(source)).push_back('\0');
  k.append(target);
  return k;
}

std::string AuthThrottle::SourcePrefix(std::string_view source) {
  const std::string text(source);
  std::array<uint8_t, 16> v6{};
  if (::inet_pton(AF_INET6, text.c_str(), v6.data()) != 1) return text;  // IPv4, or not an address
  static constexpr std::array<uint8_t, 12> kMapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(kMapped.begin(), kMapped.end(), v6.begin())) {
    char v4[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, v6.data() + 12, v4, sizeof(v4)) != nullptr) return v4;
  }
  // RFC 4291: a host's interface identifier is the low 64 bits; one site hands out a whole /64.
  char prefix[40];
  std::snprintf(prefix, sizeof(prefix), "%02x%02x:%02x%02x:%02x%02x:%02x%02x::/64", v6[0], v6[1],
                v6[2], v6[3], v6[4], v6[5], v6[6], v6[7]);
  return prefix;
}

AuthThrottle::Clock::duration AuthThrottle::LockedFor(std::string_view initiator,
                                                      std::string_view source,
                                                      std::string_view target,
                                                      Clock::time_point now) {
  std::lock_guard lock(mu_);
  Clock::duration left = Clock::duration::zero();
  for (const std::string& key : {Key(initiator, source), SourceKey(source, target)}) {
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.locked_until > now) {
      left = std::max(left, it->second.locked_until - now);
    }
  }
  return left;
}

AuthThrottle::Clock::duration AuthThrottle::LockoutAfter(uint32_t failures, uint32_t free) const {
  if (failures < free) return Clock::duration::zero();
  // base * 2^(failures beyond the free ones), saturating at max.
  const uint32_t doublings = std::min<uint32_t>(failures - free, 30);
  auto lockout = options_.base;
  for (uint32_t i = 0; i < doublings && lockout < options_.max; ++i) lockout *= 2;
  return std::min(lockout, options_.max);
}

AuthThrottle::Entry& AuthThrottle::Count(std::string key, uint32_t free, Clock::time_point now) {
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
  const auto lockout = LockoutAfter(e.failures, free);
  if (lockout > Clock::duration::zero()) e.locked_until = now + lockout;
  return e;
}

AuthThrottle::Failure AuthThrottle::RecordFailure(std::string_view initiator,
                                                  std::string_view source, std::string_view target,
                                                  Clock::time_point now) {
  std::lock_guard lock(mu_);
  // Values, not references: the second Count may make room by dropping the first's record.
  Failure f;
  f.from_source = Count(SourceKey(source, target), options_.source_free_failures, now).failures;
  f.in_a_row = Count(Key(initiator, source), options_.free_failures, now).failures;
  f.lockout = std::max(LockoutAfter(f.in_a_row, options_.free_failures),
                       LockoutAfter(f.from_source, options_.source_free_failures));
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
