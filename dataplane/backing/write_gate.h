// WriteGate: makes a store's rare exclusive operations (read-modify-write for COMPARE AND WRITE and
// ORWRITE, Unmap) atomic with respect to its ordinary writes from every reactor, without a lock or
// a shared read-modify-write on the ordinary write path.
//
// Protocol (a Dekker handshake, both sides sequentially consistent):
//   ordinary write: increment its slot's in-flight counter, then read `exclusive_`. Zero: proceed
//     unlocked and call ExitShared(slot) once the data has landed. Non-zero: undo the increment and
//     run the write while holding mutex() (the slow path; only while an exclusive op is active).
//   exclusive op: increment `exclusive_`, take the mutex, then wait until every in-flight counter
//     is zero. From then on no unlocked write is in flight and new ones take the slow path, so the
//     holder sees and changes the blocks alone.
// The in-flight counters are per slot (reactor) on their own cache lines, so the ordinary write
// touches only its own line plus a read of `exclusive_`, which stays shared in every cache while no
// exclusive op runs.
//
// Threading: TryEnterShared/ExitShared from the slot's thread (any thread is still correct: the
// counters are atomic). LockExclusive blocks until in-flight writes drain: call it on a thread that
// no in-flight write needs in order to complete (a blocking pool thread for asynchronous stores;
// any thread for stores whose writes complete inline).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

namespace iscsigw::backing {

class WriteGate {
 public:
  static constexpr unsigned kSlots = 64;

  bool TryEnterShared(unsigned slot) {
    std::atomic<uint32_t>& n = counters_[slot % kSlots].n;
    n.fetch_add(1, std::memory_order_seq_cst);
    if (exclusive_.load(std::memory_order_seq_cst) == 0) return true;
    n.fetch_sub(1, std::memory_order_release);
    return false;
  }
  void ExitShared(unsigned slot) {
    counters_[slot % kSlots].n.fetch_sub(1, std::memory_order_release);
  }
  // The slow path of an ordinary write and the lock of every exclusive op.
  std::mutex& mutex() { return mu_; }

  void LockExclusive() {
    exclusive_.fetch_add(1, std::memory_order_seq_cst);
    mu_.lock();
    for (Counter& c : counters_) {
      // In-flight unlocked writes finish without this thread's help (see the contract above).
      for (unsigned spins = 0; c.n.load(std::memory_order_seq_cst) != 0; ++spins) {
        if (spins > 64) std::this_thread::yield();
      }
    }
  }
  void UnlockExclusive() {
    mu_.unlock();
    exclusive_.fetch_sub(1, std::memory_order_seq_cst);
  }

  // True while an exclusive op is active or waiting (tests).
  bool exclusive_active() const { return exclusive_.load(std::memory_order_acquire) != 0; }

 private:
  struct alignas(64) Counter {
    std::atomic<uint32_t> n{0};
  };
  alignas(64) std::atomic<uint32_t> exclusive_{0};
  std::mutex mu_;
  Counter counters_[kSlots];
};

}  // namespace iscsigw::backing
