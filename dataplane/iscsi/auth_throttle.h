// AuthThrottle: slows CHAP guessing. Failed authentications are counted per initiator name and
// source address; after `free_failures` in a row, that pair is locked out for a time that doubles
// with each further failure (base, 2*base, ... up to max). While locked out its logins are refused
// (login status 0x0201) without their response being checked, so a guesser learns nothing from
// them. A success clears the pair's record; a record is forgotten `forget_after` its last failure.
// Another source, or another initiator name, is not affected: an attacker cannot lock a real
// initiator out from elsewhere.
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
    Clock::duration base = std::chrono::seconds(1);
    Clock::duration max = std::chrono::seconds(60);
    Clock::duration forget_after = std::chrono::minutes(15);
    size_t max_entries = 4096;
  };

  AuthThrottle() : AuthThrottle(Options{}) {}
  explicit AuthThrottle(Options options) : options_(options) {}

  // How much longer logins of (initiator, source) are refused at `now`; zero when allowed.
  Clock::duration LockedFor(std::string_view initiator, std::string_view source,
                            Clock::time_point now);

  struct Failure {
    uint32_t in_a_row = 0;      // failures of this pair so far, this one included
    Clock::duration lockout{};  // refused for this long from now (zero: not yet)
  };
  Failure RecordFailure(std::string_view initiator, std::string_view source, Clock::time_point now);
  void RecordSuccess(std::string_view initiator, std::string_view source);

  size_t size() const;
  const Options& options() const { return options_; }

 private:
  struct Entry {
    uint32_t failures = 0;
    Clock::time_point last_failure;
    Clock::time_point locked_until;
  };
  static std::string Key(std::string_view initiator, std::string_view source);
  void MakeRoom(Clock::time_point now);  // mu_ held

  const Options options_;
  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_;  // guarded by mu_
};

}  // namespace iscsigw::iscsi
