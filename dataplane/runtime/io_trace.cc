#include "dataplane/runtime/io_trace.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace iscsigw::runtime::io_trace {

const char* LegName(unsigned leg) {
  switch (leg) {
    case kReceivedToSubmitted:
      return "received -> submitted to the ring";
    case kSubmittedToReaped:
      return "submitted -> completion reaped";
    case kReapedToQueued:
      return "reaped -> response queued";
    case kQueuedToSent:
      return "response queued -> sent";
    case kReceivedToQueued:
      return "received -> response queued";
    case kReceivedToSent:
      return "received -> sent";
    default:
      return "?";
  }
}

namespace {
// A leg whose two stamps were both taken, in order.
void AddLeg(LatencyHistogram& h, uint64_t from, uint64_t to) {
  if (from != 0 && to >= from) h.Record(to - from);
}
}  // namespace

void Legs::Record(const Stamps& s, uint64_t sent_ns) {
  if (s.received == 0) return;
  if (s.submitted != 0) {
    AddLeg(legs[kReceivedToSubmitted], s.received, s.submitted);
    AddLeg(legs[kSubmittedToReaped], s.submitted, s.reaped);
    AddLeg(legs[kReapedToQueued], s.reaped, s.queued);
  }
  AddLeg(legs[kQueuedToSent], s.queued, sent_ns);
  AddLeg(legs[kReceivedToQueued], s.received, s.queued);
  AddLeg(legs[kReceivedToSent], s.received, sent_ns);
}

std::string Legs::Report() const {
  std::string out =
      "leg                                    count      mean       p50       p90"
      "       p99     p99.9  (µs)\n";
  char line[256];
  for (unsigned i = 0; i < kLegs; ++i) {
    const LatencyHistogram& h = legs[i];
    std::snprintf(line, sizeof line, "%-36s %9llu %9.1f %9.1f %9.1f %9.1f %9.1f\n", LegName(i),
                  static_cast<unsigned long long>(h.count()), h.MeanUs(), h.PercentileUs(0.5),
                  h.PercentileUs(0.9), h.PercentileUs(0.99), h.PercentileUs(0.999));
    out += line;
  }
  return out;
}

namespace {
// Every thread's legs, kept to the end of the process (a thread's own may end before the report).
std::mutex threads_mu;
std::vector<std::unique_ptr<Legs>>& Threads() {
  static auto* all = new std::vector<std::unique_ptr<Legs>>();
  return *all;
}
}  // namespace

Legs& ForThisThread() {
  thread_local Legs* mine = [] {
    std::lock_guard lock(threads_mu);
    Threads().push_back(std::make_unique<Legs>());
    return Threads().back().get();
  }();
  return *mine;
}

void ReportAtExit() {
  auto all = std::make_unique<Legs>();  // 350 KiB: not on the stack
  {
    std::lock_guard lock(threads_mu);
    for (const auto& legs : Threads()) all->Merge(*legs);
  }
  const std::string text = all->Report();
  const char* path = std::getenv("ISCSIGW_IO_TRACE_FILE");
  FILE* f = path && *path ? std::fopen(path, "w") : nullptr;
  std::fputs(text.c_str(), f ? f : stderr);
  if (f) std::fclose(f);
}

}  // namespace iscsigw::runtime::io_trace
