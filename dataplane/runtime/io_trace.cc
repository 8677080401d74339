#include "dataplane/runtime/io_trace.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace iscsigw::runtime::io_trace {

unsigned Histogram::BucketOf(uint64_t ns) {
  const uint64_t us8 = ns / (1000 / kSubBuckets);  // eighths of a microsecond; no overflow
  if (us8 < kSubBuckets) return 0;
  // The octave is the power of two at or below the value in µs; the sub-bucket the next three
  // bits below its leading one.
  const unsigned octave = static_cast<unsigned>(std::bit_width(us8)) - 4;  // 1 µs: width 4
  if (octave >= kOctaves) return kBuckets - 1;
  const unsigned sub = static_cast<unsigned>((us8 >> octave) & (kSubBuckets - 1));
  return 1 + octave * kSubBuckets + sub;
}

double Histogram::UpperEdgeUs(unsigned bucket) {
  if (bucket == 0) return 1.0;
  const unsigned octave = (bucket - 1) / kSubBuckets;
  const unsigned sub = (bucket - 1) % kSubBuckets;
  return static_cast<double>(uint64_t{1} << octave) * (1.0 + (sub + 1.0) / kSubBuckets);
}

void Histogram::Add(uint64_t ns) {
  ++counts_[BucketOf(ns)];
  ++count_;
  sum_ns_ += ns;
}

void Histogram::Merge(const Histogram& other) {
  for (unsigned i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
}

double Histogram::QuantileUs(double q) const {
  if (count_ == 0) return 0.0;
  const double want = q * static_cast<double>(count_);
  uint64_t seen = 0;
  for (unsigned i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (static_cast<double>(seen) >= want && counts_[i] > 0) return UpperEdgeUs(i);
  }
  return UpperEdgeUs(kBuckets - 1);
}

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
void AddLeg(Histogram& h, uint64_t from, uint64_t to) {
  if (from != 0 && to >= from) h.Add(to - from);
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
    const Histogram& h = legs[i];
    std::snprintf(line, sizeof line, "%-36s %9llu %9.1f %9.1f %9.1f %9.1f %9.1f\n", LegName(i),
                  static_cast<unsigned long long>(h.count()), h.mean_us(), h.QuantileUs(0.5),
                  h.QuantileUs(0.9), h.QuantileUs(0.99), h.QuantileUs(0.999));
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
  Legs all;
  {
    std::lock_guard lock(threads_mu);
    for (const auto& legs : Threads()) all.Merge(*legs);
  }
  const std::string text = all.Report();
  const char* path = std::getenv("ISCSIGW_IO_TRACE_FILE");
  FILE* f = path && *path ? std::fopen(path, "w") : nullptr;
  std::fputs(text.c_str(), f ? f : stderr);
  if (f) std::fclose(f);
}

}  // namespace iscsigw::runtime::io_trace
