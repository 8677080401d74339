// Named loggers (pdu, iscsi, scsi, backing, ctl) over spdlog with one async sink, and the
// connection-scoped prefix `[C<id> S<tsih> I<itt>]`. Levels are checked before formatting, so a
// disabled debug line costs one compare. Any thread.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

namespace iscsigw::log {

enum class Format { kText, kJson };

// Sets up the async sink and the named loggers. Call once at start, before any logger is used.
// Without it the loggers write synchronously to stderr (tests).
void Init(spdlog::level::level_enum level, Format format);
void SetLevel(spdlog::level::level_enum level);
// Flushes and stops the async sink.
void Shutdown();

spdlog::logger& Pdu();
spdlog::logger& Iscsi();
spdlog::logger& Scsi();
spdlog::logger& Backing();
spdlog::logger& Ctl();

}  // namespace iscsigw::log

// Connection-scoped logging: LOG_CONN(logger, level, conn_id, tsih, fmt, args...)
#define ISCSIGW_LOG_CONN(logger, lvl, cid, tsih, fmtstr, ...)                             \
  do {                                                                                    \
    auto& lg_ = (logger);                                                                 \
    if (lg_.should_log(lvl)) lg_.log(lvl, "[C{} S{}] " fmtstr, cid, tsih, ##__VA_ARGS__); \
  } while (0)
