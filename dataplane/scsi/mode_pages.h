// Mode parameters of one logical unit (SPC-4 7.5, SBC-3 6.4): the current, default and saved
// values of the pages MODE SENSE reports and MODE SELECT changes. The caching page's WCE and the
// control page's SWP are changeable; every other field is fixed by what the gateway does.
//
// Threading: shared by every reactor. The READ/WRITE path reads write_cache_enabled() and
// software_write_protect() (relaxed atomic loads); everything else takes mu_, on the rare MODE
// SELECT / MODE SENSE path.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace iscsigw::scsi {

class ModePages {
 public:
  // The values MODE SELECT may change.
  struct Values {
    bool wce = true;   // caching page (SBC-3 6.4.5): write cache enabled
    bool swp = false;  // control page (SPC-4 7.5.8): software write protect
    friend bool operator==(const Values&, const Values&) = default;
  };

  explicit ModePages(Values defaults) : defaults_(defaults), saved_(defaults) {
    wce_.store(defaults.wce, std::memory_order_relaxed);
    swp_.store(defaults.swp, std::memory_order_relaxed);
  }

  // Any thread, no lock: with WCE=0 every write must reach stable media before it completes.
  bool write_cache_enabled() const { return wce_.load(std::memory_order_relaxed); }
  // Any thread, no lock: SWP=1 write-protects the medium (SPC-4 7.5.8, SBC-3 4.13).
  bool software_write_protect() const { return swp_.load(std::memory_order_relaxed); }

  Values defaults() const { return defaults_; }
  Values current() const {
    std::lock_guard lock(mu_);
    return Values{wce_.load(std::memory_order_relaxed), swp_.load(std::memory_order_relaxed)};
  }
  Values saved() const {
    std::lock_guard lock(mu_);
    return saved_;
  }
  // Returns true when a value changed.
  bool SetCurrent(Values v) {
    std::lock_guard lock(mu_);
    const bool changed = wce_.load(std::memory_order_relaxed) != v.wce ||
                         swp_.load(std::memory_order_relaxed) != v.swp;
    wce_.store(v.wce, std::memory_order_relaxed);
    swp_.store(v.swp, std::memory_order_relaxed);
    return changed;
  }
  void SetSaved(Values v) {
    std::lock_guard lock(mu_);
    saved_ = v;
  }

  // "mode wce=<0|1>\n" and "mode swp=<0|1>\n" for the saved values that differ from the defaults.
  std::string Serialize() const;
  // Restores saved (and current) values from Serialize()'s output; ignores unknown lines.
  void Restore(const std::string& blob);

 private:
  const Values defaults_;
  mutable std::mutex mu_;
  std::atomic<bool> wce_{true};   // current WCE; written under mu_
  std::atomic<bool> swp_{false};  // current SWP; written under mu_
  Values saved_;                  // guarded by mu_
};

}  // namespace iscsigw::scsi
