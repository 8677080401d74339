// LatencyHistogram: nanosecond latencies in log-linear buckets, as HdrHistogram: 2^kSubBits
// linear buckets per power of two, so any value is known within 1/2^kSubBits (under 1%) in a fixed
// 58 KiB, whatever the run length. Quantiles are the middle of their bucket (capped by the largest
// value recorded). Shared by the benchmark client (tests/bench/iscsi_load.cc) and the data plane's
// tracing build (dataplane/runtime/io_trace.h), so that their figures compare. Not thread-safe:
// one writer, merged afterwards.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace iscsigw {

class LatencyHistogram {
 public:
  void Record(uint64_t ns) {
    ++counts_[Index(ns)];
    ++count_;
    sum_ns_ += ns;
    if (ns > max_ns_) max_ns_ = ns;
  }
  void Merge(const LatencyHistogram& o) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ns_ += o.sum_ns_;
    if (o.max_ns_ > max_ns_) max_ns_ = o.max_ns_;
  }
  uint64_t count() const { return count_; }
  double MeanUs() const { return count_ ? static_cast<double>(sum_ns_) / count_ / 1e3 : 0; }
  // The value at quantile q (0 < q <= 1): the middle of the bucket holding the ceil(q*n)-th value.
  double PercentileUs(double q) const {
    if (count_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(count_) + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > count_) rank = count_;
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        uint64_t lo = LowerBound(i);
        uint64_t mid = lo + (LowerBound(i + 1) - 1 - lo) / 2;
        return static_cast<double>(mid < max_ns_ ? mid : max_ns_) / 1e3;
      }
    }
    return static_cast<double>(max_ns_) / 1e3;
  }

 private:
  static constexpr int kSubBits = 7;
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;
  static constexpr size_t kBuckets = (64 - kSubBits + 1) * kSub;

  // Values below 2*kSub map to themselves; above, the top kSubBits+1 bits pick the bucket.
  static size_t Index(uint64_t v) {
    if (v < kSub) return v;
    int shift = 63 - std::countl_zero(v) - kSubBits;
    return static_cast<size_t>(shift) * kSub + (v >> shift);
  }
  static uint64_t LowerBound(size_t i) {
    if (i < 2 * kSub) return i;
    uint64_t shift = i / kSub - 1;
    return (i - shift * kSub) << shift;
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ns_ = 0;
  uint64_t max_ns_ = 0;
};

}  // namespace iscsigw
