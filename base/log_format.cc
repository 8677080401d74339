#include "base/log_format.h"

#include <spdlog/details/log_msg.h>

#include <cctype>
#include <chrono>
#include <ctime>

namespace iscsigw::log {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not one.
size_t Utf8Length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0 && c >= 0xc2)
    n = 2;
  else if ((c & 0xf0) == 0xe0)
    n = 3;
  else if ((c & 0xf8) == 0xf0 && c <= 0xf4)
    n = 4;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  }
  return n;
}

// Parses "<letter><digits-or-hex>" tokens of a leading "[C12 S3 I0x1f] " prefix.
struct Context {
  std::optional<std::string_view> conn, tsih, itt, initiator, target;
  std::string_view rest;
};

Context ParseContext(std::string_view msg) {
  Context ctx;
  ctx.rest = msg;
  if (msg.size() < 4 || msg[0] != '[' || msg[1] != 'C') return ctx;
  const size_t close = msg.find(']');
  if (close == std::string_view::npos) return ctx;
  std::string_view inner = msg.substr(1, close - 1);
  Context parsed;
  while (!inner.empty()) {
    const size_t sp = inner.find(' ');
    std::string_view tok = inner.substr(0, sp);
    inner = sp == std::string_view::npos ? std::string_view() : inner.substr(sp + 1);
    if (tok.size() < 2) return ctx;
    // Names (log.h ConnContext): "ini=<name>", "tgt=<name>", anything but space and ']'.
    if (tok.substr(0, 4) == "ini=" || tok.substr(0, 4) == "tgt=") {
      auto& field = tok[0] == 'i' ? parsed.initiator : parsed.target;
      if (field || tok.size() == 4) return ctx;
      field = tok.substr(4);
      continue;
    }
    std::string_view v = tok.substr(1);
    for (char ch : v) {
      if (!std::isxdigit(static_cast<unsigned char>(ch)) && ch != 'x') return ctx;
    }
    std::optional<std::string_view>* field = nullptr;
    switch (tok[0]) {
      case 'C':
        field = &parsed.conn;
        break;
      case 'S':
        field = &parsed.tsih;
        break;
      case 'I':
        field = &parsed.itt;
        break;
      default:
        return ctx;
    }
    if (field->has_value()) return ctx;  // a field given twice is not a context
    *field = v;
  }
  // Numbers only where they are decimal.
  auto decimal = [](std::string_view v) {
    for (char ch : v) {
      if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
    }
    return true;
  };
  if (!parsed.conn || !decimal(*parsed.conn) || (parsed.tsih && !decimal(*parsed.tsih))) return ctx;
  parsed.rest = msg.substr(close + 1);
  if (!parsed.rest.empty() && parsed.rest[0] == ' ') parsed.rest.remove_prefix(1);
  return parsed;
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto t = msg.time;
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()) %
                    std::chrono::seconds(1);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[40];
    const size_t n = std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(ts + n, sizeof(ts) - n, ".%06ldZ", static_cast<long>(us.count()));
    const auto level = spdlog::level::to_string_view(msg.level);
    const std::string line =
        FormatJsonLine(ts, std::string_view(level.data(), level.size()),
                       std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                       std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

void AppendJsonString(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        *out += "\\\"";
        ++i;
        continue;
      case '\\':
        *out += "\\\\";
        ++i;
        continue;
      case '\n':
        *out += "\\n";
        ++i;
        continue;
      case '\r':
        *out += "\\r";
        ++i;
        continue;
      case '\t':
        *out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7f) {
      *out += "\\u00";
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 0xf]);
      ++i;
      continue;
    }
    const size_t len = Utf8Length(s, i);
    if (len == 0) {
      *out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
      continue;
    }
    out->append(s.data() + i, len);
    i += len;
  }
  out->push_back('"');
}

std::string FormatJsonLine(std::string_view timestamp, std::string_view level,
                           std::string_view logger, std::string_view message) {
  const Context ctx = ParseContext(message);
  std::string out;
  out.reserve(96 + message.size());
  out += "{\"ts\":";
  AppendJsonString(timestamp, &out);
  out += ",\"level\":";
  AppendJsonString(level, &out);
  out += ",\"logger\":";
  AppendJsonString(logger, &out);
  if (ctx.conn) out.append(",\"conn\":").append(*ctx.conn);
  if (ctx.tsih) out.append(",\"tsih\":").append(*ctx.tsih);
  if (ctx.itt) {
    out += ",\"itt\":";
    AppendJsonString(*ctx.itt, &out);
  }
  if (ctx.initiator) {
    out += ",\"initiator\":";
    AppendJsonString(*ctx.initiator, &out);
  }
  if (ctx.target) {
    out += ",\"target\":";
    AppendJsonString(*ctx.target, &out);
  }
  out += ",\"msg\":";
  AppendJsonString(ctx.rest, &out);
  out += "}\n";
  return out;
}

std::unique_ptr<spdlog::formatter> MakeJsonFormatter() { return std::make_unique<JsonFormatter>(); }

namespace {
constexpr std::string_view kLevelNames[] = {"trace", "debug",    "info", "warn",
                                            "error", "critical", "off"};
}  // namespace

std::optional<spdlog::level::level_enum> ParseLevel(std::string_view name) {
  for (size_t i = 0; i < std::size(kLevelNames); ++i) {
    if (name == kLevelNames[i]) return static_cast<spdlog::level::level_enum>(i);
  }
  return std::nullopt;
}

std::string_view LevelName(spdlog::level::level_enum level) {
  const auto i = static_cast<size_t>(level);
  return i < std::size(kLevelNames) ? kLevelNames[i] : "off";
}

std::string_view LevelNames() { return "trace, debug, info, warn, error, critical, off"; }

}  // namespace iscsigw::log
