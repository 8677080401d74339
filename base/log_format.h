// Line formats for the named loggers of log.h.
//
// JSON (--log-format json): one object per line, for Kubernetes log pipelines:
//   {"ts":"2026-11-29T21:53:25.123456Z","level":"info","logger":"iscsi","conn":3,"tsih":1,
//    "initiator":"iqn.1994-05.com.redhat:h1","target":"iqn.2026-11.io.iscsigw:db",
//    "msg":"login: ..."}
// The connection-scoped prefix the data plane writes ("[C<id> S<tsih> I<itt> ini=<initiator>
// tgt=<target>] ", C first, the others when known; see log.h ConnContext) becomes the fields
// conn, tsih, itt (a hex string), initiator and target, and is removed from msg. A prefix that
// does not parse completely (a field twice, an unknown token) is left in msg as it is.
// Strings are escaped per RFC 8259 (quote, backslash, control characters as \uXXXX); bytes that
// are not valid UTF-8 are replaced by U+FFFD so every line parses.
// Pure functions; any thread.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace iscsigw::log {

// Appends `s` as a JSON string literal (with quotes).
void AppendJsonString(std::string_view s, std::string* out);

// One JSON log line (with the trailing newline) for a message.
std::string FormatJsonLine(std::string_view timestamp, std::string_view level,
                           std::string_view logger, std::string_view message);

// An spdlog formatter producing FormatJsonLine output, timestamps in UTC with microseconds.
std::unique_ptr<spdlog::formatter> MakeJsonFormatter();

// "trace".."off" as spdlog levels; nullopt for anything else. For run-time level changes (the
// control plane's SetLogLevel) together with log::SetLevel.
std::optional<spdlog::level::level_enum> ParseLevel(std::string_view name);
// The name ParseLevel takes for a level ("warn", not spdlog's "warning").
std::string_view LevelName(spdlog::level::level_enum level);
// "trace, debug, info, warn, error, critical, off", for error messages.
std::string_view LevelNames();

}  // namespace iscsigw::log
