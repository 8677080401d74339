// AuthThrottle: slows CHAP guessing. Failed authentications are counted twice:
//   - per initiator name and source address: after `free_failures` in a row, that pair is locked
//     out for a time that doubles with each further failure (base, 2*base, ... up to max);
//   - per source and target (the address for IPv4, its /64 for IPv6; "discovery" for discovery
//     CHAP): after `source_free_failures`, that source is locked out of that target the same way,
//     whatever initiator names it claims, so a guesser cannot start afresh by changing its name.
// While either is locked out, logins are refused (login status 0x0201) without their response
// being checked, so a guesser learns nothing from them. A success clears its pair's record only:
// the source's record, which a guesser with one valid login could otherwise reset, is forgotten
// `forget_after` its last failure, like every record. Another source is not affected: an attacker
// cannot lock a real initiator out from elsewhere.
//
// Bounded: at most max_entries pairs are remembered; when full, the expired ones are dropped, and
// then the one whose last failure is oldest. Threading: a mutex; used at login only, never per I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace iscsigw::iscsi {

class AuthThrottle {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    uint32_t free_failures = 3;
    uint32_t source_free_failures = 10;
    Clock::duration base = std::chrono::seconds(1);
    Clock::duration max = std::chrono::seconds(60);
    Clock::duration forget_after = std::chrono::minutes(15);
    size_t max_entries = 4096;
  };

  AuthThrottle() : AuthThrottle(Options{}) {}
  explicit AuthThrottle(Options options) : options_(options) {}

  // How much longer logins of `initiator` from `source` (an IP address as text) to `target` are
  // refused at `now`; zero when allowed.
  Clock::duration LockedFor(std::string_view initiator, std::string_view source,
                            std::string_view target, Clock::time_point now);

  struct Failure {
    uint32_t in_a_row = 0;      // failures of this pair so far, this one included
    uint32_t from_source = 0;   // failures of this source against this target
    Clock::duration lockout{};  // refused for this long from now (zero: not yet)
  };
  Failure RecordFailure(std::string_view initiator, std::string_view source,
                        std::string_view target, Clock::time_point now);
  void RecordSuccess(std::string_view initiator, std::string_view source);

  // Records held, pairs and sources together (at most max_entries).
  size_t size() const;

  // The part of a source address that its failures are counted by: an IPv4 address whole (an
  // IPv4-mapped IPv6 one too), the first 64 bits of another IPv6 address; text that is not an
  // address, as it is.
  static std::string SourcePrefix(std::string_view source);
  const Options& options() const { return options_; }

 private:
  struct Entry {
    uint32_t failures = 0;
    Clock::time_point last_failure;
    Clock::time_point locked_until;
  };
  static std::string Key(std::string_view initiator, std::string_view source);
  static std::string SourceKey(std::string_view source, std::string_view target);
  // Counts one more failure in the record of `key` (created if missing); its lockout after `free`.
  Entry& Count(std::string key, uint32_t free, Clock::time_point now);  // mu_ held
  Clock::duration LockoutAfter(uint32_t failures, uint32_t free) const;
  void MakeRoom(Clock::time_point now);  // mu_ held

  const Options options_;
  mutable std::mutex mu_;
  // Pair keys are "initiator\0source"; source keys "\0prefix\0target" (an initiator name is never
  // empty, so the two never meet). Guarded by mu_.
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace iscsigw::iscsi
