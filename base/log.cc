#include "base/log.h"

#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/log_format.h"

namespace iscsigw::log {
namespace {

constexpr const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v";

struct Loggers {
  std::array<std::shared_ptr<spdlog::logger>, kLoggerNames.size()> l;
  std::shared_ptr<spdlog::details::thread_pool> pool;  // set between Init and Shutdown
  Format format = Format::kText;
  // Loggers replaced by Init or Shutdown. Kept alive, because a reference handed out before the
  // switch may still be in use on a thread that has not noticed yet.
  std::vector<std::shared_ptr<spdlog::logger>> retired;
};

Loggers& Registry() {
  static Loggers loggers = [] {
    Loggers ls;
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    for (size_t i = 0; i < kLoggerNames.size(); ++i) {
      ls.l[i] = std::make_shared<spdlog::logger>(std::string(kLoggerNames[i]), sink);
      ls.l[i]->set_level(spdlog::level::warn);
      ls.l[i]->set_pattern(kTextPattern);
    }
    return ls;
  }();
  return loggers;
}

std::unique_ptr<spdlog::formatter> MakeFormatter(Format format) {
  if (format == Format::kJson) return MakeJsonFormatter();  // escaped, with context fields
  return std::make_unique<spdlog::pattern_formatter>(kTextPattern);
}

std::optional<size_t> IndexOf(std::string_view name) {
  for (size_t i = 0; i < kLoggerNames.size(); ++i) {
    if (kLoggerNames[i] == name) return i;
  }
  return std::nullopt;
}

}  // namespace

void Init(spdlog::level::level_enum level, Format format,
          std::shared_ptr<spdlog::sinks::sink> sink) {
  auto& reg = Registry();
  if (sink == nullptr) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  reg.format = format;
  sink->set_formatter(MakeFormatter(format));
  // One worker thread: lines reach the sink in the order they were queued.
  reg.pool = std::make_shared<spdlog::details::thread_pool>(kAsyncQueueSlots, 1);
  for (size_t i = 0; i < kLoggerNames.size(); ++i) {
    auto lg = std::make_shared<spdlog::async_logger>(std::string(kLoggerNames[i]), sink, reg.pool,
                                                     spdlog::async_overflow_policy::overrun_oldest);
    lg->set_level(level);
    lg->flush_on(spdlog::level::warn);
    reg.retired.push_back(std::move(reg.l[i]));
    reg.l[i] = std::move(lg);
  }
}

void SetLevel(spdlog::level::level_enum level) {
  for (auto& lg : Registry().l) lg->set_level(level);
}

bool SetLevel(std::string_view logger, spdlog::level::level_enum level) {
  const auto i = IndexOf(logger);
  if (!i) return false;
  Registry().l[*i]->set_level(level);
  return true;
}

std::optional<spdlog::level::level_enum> GetLevel(std::string_view logger) {
  const auto i = IndexOf(logger);
  if (!i) return std::nullopt;
  return Registry().l[*i]->level();
}

void Shutdown() {
  auto& reg = Registry();
  if (reg.pool == nullptr) {
    for (auto& lg : reg.l) lg->flush();
    return;
  }
  const size_t dropped = reg.pool->overrun_counter();
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  sink->set_formatter(MakeFormatter(reg.format));  // a JSON log stays JSON to its last line
  for (auto& lg : reg.l) {
    lg->flush();  // queued behind the lines already logged
    auto sync = std::make_shared<spdlog::logger>(lg->name(), sink);
    sync->set_level(lg->level());
    reg.retired.push_back(std::move(lg));
    lg = std::move(sync);
  }
  // The pool's destructor runs the lines still queued (and the flushes above), then joins its
  // thread. Queued lines hold their logger, not the pool, so this is the last reference.
  reg.pool.reset();
  if (dropped > 0) {
    Ctl().warn("{} log line(s) were dropped because the log queue was full", dropped);
  }
}

spdlog::logger& Pdu() { return *Registry().l[0]; }
spdlog::logger& Iscsi() { return *Registry().l[1]; }
spdlog::logger& Scsi() { return *Registry().l[2]; }
spdlog::logger& Backing() { return *Registry().l[3]; }
spdlog::logger& Ctl() { return *Registry().l[4]; }

bool RateLimiter::Allow(int64_t now_ns) {
  if (tokens_ >= burst_ || last_refill_ns_ == INT64_MIN) {
    last_refill_ns_ = now_ns;  // a full bucket starts refilling from its first use
  } else if (now_ns - last_refill_ns_ >= interval_ns_) {
    const int64_t periods = (now_ns - last_refill_ns_) / interval_ns_;
    const int64_t room = burst_ - tokens_;
    if (periods >= room) {
      tokens_ = burst_;
      last_refill_ns_ = now_ns;
    } else {
      tokens_ += static_cast<uint32_t>(periods);
      last_refill_ns_ += periods * interval_ns_;
    }
  }
  if (tokens_ == 0) {
    ++suppressed_;
    return false;
  }
  --tokens_;
  reported_ = suppressed_;
  suppressed_ = 0;
  return true;
}

int64_t RateLimiter::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace iscsigw::log
