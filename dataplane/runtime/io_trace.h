// IoTrace: where a command's time goes between the socket and the device, for a tracing build
// (cmake -DISCSIGW_IO_TRACE=ON; docs/performance.md "Where a command's time goes").
//
// A command is stamped at five points on its reactor: received (the socket read that brought its
// command PDU returned), submitted (the ring's io_uring_enter that handed its I/O to the kernel
// returned), reaped (the reactor took its completion from the ring), queued (its response was
// queued for the writer) and sent (the sendmsg that carried its status returned). The four legs
// between them go into log-linear histograms, one set per reactor thread (allocated once, when the
// thread records its first command; no lock after that), and the process prints count, mean and
// quantiles of each when its reactors stop (to the file named by ISCSIGW_IO_TRACE_FILE, or
// stderr), in the benchmark client's histogram (base/latency_histogram.h: within 1%).
// What the stamps are for commands that are not one 4 KiB read:
//   - commands that never touched a ring (RAM, null, rbd) record received -> queued -> sent only;
//   - a command whose I/O took several ring operations (a short read resubmitted, a FUA write's
//     write then sync, a group fdatasync shared by several commands) carries the last one's
//     submitted and reaped stamps: earlier ring time counts in received -> submitted;
//   - a write's received is its command PDU's arrival: received -> submitted includes its R2Ts
//     and Data-Out.
//
// The hooks are `if constexpr (io_trace::kEnabled)` blocks: compiled (so kept building) in every
// build and discarded unless ISCSIGW_IO_TRACE is set. The fields they fill stay in every build:
// 32 bytes a task and 8 a ring operation. The legs' arithmetic and the report are unit tested in
// every build.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "base/latency_histogram.h"

#ifndef ISCSIGW_IO_TRACE
#define ISCSIGW_IO_TRACE 0
#endif

namespace iscsigw::runtime::io_trace {

inline constexpr bool kEnabled = ISCSIGW_IO_TRACE != 0;

// The stamps of one command (0: that point was not reached or not traced).
struct Stamps {
  uint64_t received = 0;
  uint64_t submitted = 0;
  uint64_t reaped = 0;
  uint64_t queued = 0;
};

enum Leg : unsigned {
  kReceivedToSubmitted,
  kSubmittedToReaped,
  kReapedToQueued,
  kQueuedToSent,
  kReceivedToQueued,  // commands without a ring I/O, and the whole stay of those with one
  kReceivedToSent,
  kLegs
};
const char* LegName(unsigned leg);

// One reactor's legs.
struct Legs {
  std::array<LatencyHistogram, kLegs> legs;
  void Record(const Stamps& s, uint64_t sent_ns);
  void Merge(const Legs& other) {
    for (unsigned i = 0; i < kLegs; ++i) legs[i].Merge(other.legs[i]);
  }
  // One line per leg: count, mean, p50, p90, p99, p99.9 (µs).
  std::string Report() const;
};

// The calling thread's legs (made on its first call, kept to the end of the process). A reactor
// records into its own; ReportAtExit merges them once the reactors have stopped.
Legs& ForThisThread();
// Prints the merged legs of every thread so far (a tracing build, as its reactors stop).
void ReportAtExit();

// The ring's stamps for the completion the reactor is handing on right now (set around each
// Op's complete call, read by the command's completion on the same thread).
struct RingStamps {
  uint64_t submitted = 0;
  uint64_t reaped = 0;
};
inline thread_local RingStamps current_ring{};

}  // namespace iscsigw::runtime::io_trace
