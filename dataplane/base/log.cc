#include "dataplane/base/log.h"

#include <spdlog/async.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <array>
#include <mutex>

#include "dataplane/base/log_format.h"

namespace iscsigw::log {
namespace {

constexpr std::array<const char*, 5> kNames = {"pdu", "iscsi", "scsi", "backing", "ctl"};

struct Loggers {
  std::array<std::shared_ptr<spdlog::logger>, 5> l;
};

Loggers& Registry() {
  static Loggers loggers = [] {
    Loggers ls;
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    for (size_t i = 0; i < kNames.size(); ++i) {
      ls.l[i] = std::make_shared<spdlog::logger>(kNames[i], sink);
      ls.l[i]->set_level(spdlog::level::warn);
    }
    return ls;
  }();
  return loggers;
}

}  // namespace

void Init(spdlog::level::level_enum level, Format format) {
  spdlog::init_thread_pool(8192, 1);
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto& reg = Registry();
  for (size_t i = 0; i < kNames.size(); ++i) {
    auto lg = std::make_shared<spdlog::async_logger>(kNames[i], sink, spdlog::thread_pool(),
                                                     spdlog::async_overflow_policy::overrun_oldest);
    lg->set_level(level);
    if (format == Format::kJson) {
      lg->set_formatter(MakeJsonFormatter());  // log_format.h: escaped, with context fields
    } else {
      lg->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
    }
    lg->flush_on(spdlog::level::warn);
    reg.l[i] = lg;
  }
}

void SetLevel(spdlog::level::level_enum level) {
  for (auto& lg : Registry().l) lg->set_level(level);
}

void Shutdown() {
  for (auto& lg : Registry().l) lg->flush();
  spdlog::shutdown();
}

spdlog::logger& Pdu() { return *Registry().l[0]; }
spdlog::logger& Iscsi() { return *Registry().l[1]; }
spdlog::logger& Scsi() { return *Registry().l[2]; }
spdlog::logger& Backing() { return *Registry().l[3]; }
spdlog::logger& Ctl() { return *Registry().l[4]; }

}  // namespace iscsigw::log
