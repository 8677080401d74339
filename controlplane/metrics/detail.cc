#include "controlplane/metrics/detail.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace iscsigw::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

bool Dropped(const std::string& label, Detail detail) {
  if (label == "lun") return true;
  return detail == Detail::kGateway && label == "target";
}

// Adds `from` into `into`; both are metrics of one family, so of one type and, for histograms,
// with the same bucket bounds (runtime::kLatencyBoundsNs).
void Merge(ClientMetric& into, const ClientMetric& from, MetricType type) {
  switch (type) {
    case MetricType::Counter:
      into.counter.value += from.counter.value;
      break;
    case MetricType::Gauge:
      into.gauge.value += from.gauge.value;
      break;
    case MetricType::Histogram: {
      ClientMetric::Histogram& h = into.histogram;
      h.sample_count += from.histogram.sample_count;
      h.sample_sum += from.histogram.sample_sum;
      const size_t n = std::min(h.bucket.size(), from.histogram.bucket.size());
      for (size_t b = 0; b < n; ++b) {
        h.bucket[b].cumulative_count += from.histogram.bucket[b].cumulative_count;
      }
      break;
    }
    default:  // untyped, summary, info: not produced with per-LUN labels
      into.untyped.value += from.untyped.value;
      break;
  }
}

}  // namespace

std::optional<Detail> ParseDetail(std::string_view name) {
  if (name == "lun") return Detail::kLun;
  if (name == "target") return Detail::kTarget;
  if (name == "gateway") return Detail::kGateway;
  return std::nullopt;
}

std::vector<MetricFamily> Aggregate(std::vector<MetricFamily> families, Detail detail) {
  if (detail == Detail::kLun) return families;
  for (MetricFamily& f : families) {
    if (std::find(kPerLunAtEveryLevel.begin(), kPerLunAtEveryLevel.end(), f.name) !=
        kPerLunAtEveryLevel.end()) {
      continue;
    }
    const bool labelled = std::any_of(f.metric.begin(), f.metric.end(), [&](const auto& m) {
      return std::any_of(m.label.begin(), m.label.end(),
                         [&](const auto& l) { return Dropped(l.name, detail); });
    });
    if (!labelled) continue;
    std::vector<ClientMetric> merged;
    std::map<std::vector<std::pair<std::string, std::string>>, size_t> index;
    for (ClientMetric& m : f.metric) {
      std::erase_if(m.label, [&](const ClientMetric::Label& l) { return Dropped(l.name, detail); });
      std::vector<std::pair<std::string, std::string>> key;
      key.reserve(m.label.size());
      for (const auto& l : m.label) key.emplace_back(l.name, l.value);
      std::sort(key.begin(), key.end());
      auto [it, fresh] = index.try_emplace(std::move(key), merged.size());
      if (fresh) {
        merged.push_back(std::move(m));
      } else {
        Merge(merged[it->second], m, f.type);
      }
    }
    f.metric = std::move(merged);
  }
  return families;
}

}  // namespace iscsigw::metrics
