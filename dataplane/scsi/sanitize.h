// The sanitize state of one logical unit (SBC-4 4.11): idle, a sanitize operation in progress, or
// sanitize failure mode after one failed. While it is not idle the device server refuses most
// commands (engine.cc asks SanitizeRefuses, sbc_sanitize.cc), and REQUEST SENSE reports it.
//
// Threading: shared by every reactor. The command path reads mode() once per command (one acquire
// load); the transitions happen on the reactor that runs the SANITIZE command and its operation.
#pragma once

#include <atomic>
#include <cstdint>

#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi {

// SPC-4 4.5.6, table 55.
inline constexpr Asc kAscSanitizeInProgress{0x04,
                                            0x1B};  // LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS
inline constexpr Asc kAscSanitizeCommandFailed{0x31, 0x03};  // SANITIZE COMMAND FAILED

class SanitizeState {
 public:
  enum class Mode : uint8_t { kIdle, kInProgress, kFailed };

  Mode mode() const { return mode_.load(std::memory_order_acquire); }
  // PROGRESS INDICATION (SPC-4 4.5.2.4.4): the fraction done, in 65536ths.
  uint16_t progress() const { return progress_.load(std::memory_order_relaxed); }

  // Starts a sanitize operation from idle or failure mode; false when one is already in progress.
  bool TryBegin(bool ause) {
    Mode m = mode_.load(std::memory_order_acquire);
    do {
      if (m == Mode::kInProgress) return false;
    } while (!mode_.compare_exchange_weak(m, Mode::kInProgress, std::memory_order_acq_rel));
    progress_.store(0, std::memory_order_relaxed);
    ause_.store(ause, std::memory_order_relaxed);
    return true;
  }
  void SetProgress(uint16_t p) { progress_.store(p, std::memory_order_relaxed); }
  // The operation ended: idle when it succeeded, sanitize failure mode otherwise (SBC-4 4.11.5).
  void End(bool ok) { mode_.store(ok ? Mode::kIdle : Mode::kFailed, std::memory_order_release); }
  // Whether the SANITIZE that failed allowed EXIT FAILURE MODE (its AUSE bit).
  bool failed_with_ause() const { return ause_.load(std::memory_order_relaxed); }
  // EXIT FAILURE MODE: back to idle without a successful sanitize.
  void ExitFailureMode() {
    Mode m = Mode::kFailed;
    mode_.compare_exchange_strong(m, Mode::kIdle, std::memory_order_acq_rel);
  }

 private:
  std::atomic<Mode> mode_{Mode::kIdle};
  std::atomic<uint16_t> progress_{0};
  std::atomic<bool> ause_{false};
};

}  // namespace iscsigw::scsi
