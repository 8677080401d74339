// StateCollector: the state directory gauge always; the shared configuration's only with
// --shared-config, its version and timestamp only once it loaded.
#include "controlplane/metrics/state_collector.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace iscsigw::metrics {
namespace {

std::map<std::string, double> Scrape(const StateCollector::Values& v) {
  StateCollector c([v] { return v; });
  std::map<std::string, double> out;
  for (const auto& f : c.Collect()) {
    EXPECT_EQ(f.type, prometheus::MetricType::Gauge) << f.name;
    EXPECT_EQ(f.metric.size(), 1u) << f.name;
    out[f.name] = f.metric.at(0).gauge.value;
  }
  return out;
}

TEST(StateCollector, StateDirectoryOnlyWithoutASharedConfiguration) {
  StateCollector::Values v;
  v.state_dir_writable = false;
  EXPECT_EQ(Scrape(v), (std::map<std::string, double>{{"iscsigw_state_dir_writable", 0}}));
  v.state_dir_writable = true;
  EXPECT_EQ(Scrape(v), (std::map<std::string, double>{{"iscsigw_state_dir_writable", 1}}));
}

TEST(StateCollector, SharedConfigurationVersionAndTimeOnceLoaded) {
  StateCollector::Values v;
  v.shared_enabled = true;
  EXPECT_EQ(Scrape(v), (std::map<std::string, double>{{"iscsigw_state_dir_writable", 1},
                                                      {"iscsigw_shared_config_loaded", 0}}));
  v.shared_loaded = true;
  v.shared_version = 42;
  v.shared_last_load_seconds = 1.8e9;
  EXPECT_EQ(Scrape(v), (std::map<std::string, double>{
                           {"iscsigw_state_dir_writable", 1},
                           {"iscsigw_shared_config_loaded", 1},
                           {"iscsigw_shared_config_version", 42},
                           {"iscsigw_shared_config_last_load_timestamp_seconds", 1.8e9}}));
}

}  // namespace
}  // namespace iscsigw::metrics
