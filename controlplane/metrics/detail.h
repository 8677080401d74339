// How much of the per-LUN detail /metrics keeps (--metrics-detail, docs/reference/metrics.md):
//   kLun      every family as collected: per-LUN families carry {target, lun} (the default);
//   kTarget   per-LUN families summed over the LUNs of each target: {target}, no {lun};
//   kGateway  every family summed over targets and LUNs: neither {target} nor {lun}.
// Counters and gauges are summed; histograms add bucket by bucket, with their counts and sums, so
// a coarser histogram is exactly the one a single series would have recorded. The families that
// alerts need per LUN (kPerLunAtEveryLevel) keep their labels at every level.
// Pure functions of the collected families; any thread.
#pragma once

#include <prometheus/metric_family.h>

#include <array>
#include <optional>
#include <string_view>
#include <vector>

namespace iscsigw::metrics {

enum class Detail { kLun, kTarget, kGateway };

// "lun", "target", "gateway"; nullopt for anything else.
std::optional<Detail> ParseDetail(std::string_view name);

// One series per LUN at every level: what a LUN offline or on the other path alert needs.
inline constexpr std::array<std::string_view, 2> kPerLunAtEveryLevel = {"iscsigw_lun_online",
                                                                        "iscsigw_lun_alua_state"};

// `families` with the labels `detail` drops removed from every metric, and metrics whose remaining
// labels are equal merged into one (in the order their first member was collected). At kLun it
// returns `families` unchanged.
std::vector<prometheus::MetricFamily> Aggregate(std::vector<prometheus::MetricFamily> families,
                                                Detail detail);

}  // namespace iscsigw::metrics
