// Named loggers (pdu, iscsi, scsi, backing, ctl) over spdlog, the connection-scoped prefix
// `[C<id> S<tsih> ini=<initiator> tgt=<target>]` (ConnContext), and a rate limiter for errors an
// initiator can cause at will.
//
// After Init every logger hands its lines to one async sink: a bounded queue drained by one
// background thread. A full queue drops its oldest line (overrun_oldest), so a reactor that logs
// never waits for the terminal or the log pipeline. Levels are checked before formatting, so a
// disabled debug line costs one relaxed atomic load.
//
// Threading: Init and Shutdown run while no other thread logs (at start and at the very end).
// Everything else, including the level setters, may be called from any thread at any time.
#pragma once

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace iscsigw::log {

enum class Format { kText, kJson };

// The logger names, in a stable order (the order GetLevels reports them in).
inline constexpr std::array<std::string_view, 5> kLoggerNames = {"pdu", "iscsi", "scsi", "backing",
                                                                 "ctl"};

// Queue slots of the async sink. Each slot holds one line (short lines without a heap buffer).
inline constexpr size_t kAsyncQueueSlots = 8192;

// Sets up the async sink and the named loggers. Call once at start, before any logger is used.
// Lines go to `sink`, stderr when it is null. Without Init the loggers write synchronously to
// stderr at level warn (unit tests).
void Init(spdlog::level::level_enum level, Format format,
          std::shared_ptr<spdlog::sinks::sink> sink = nullptr);

// Every logger to `level`.
void SetLevel(spdlog::level::level_enum level);
// One logger by name; false (nothing changed) when no logger has that name.
[[nodiscard]] bool SetLevel(std::string_view logger, spdlog::level::level_enum level);
// The level of one logger; nullopt when no logger has that name.
std::optional<spdlog::level::level_enum> GetLevel(std::string_view logger);

// Drains the async queue, flushes the sink and goes back to synchronous stderr output at the
// same levels, so a line logged after it is still written. Reports lines the queue dropped.
void Shutdown();

spdlog::logger& Pdu();
spdlog::logger& Iscsi();
spdlog::logger& Scsi();
spdlog::logger& Backing();
spdlog::logger& Ctl();

// A token bucket for messages an initiator controls (protocol errors, digest errors, rejects):
// at most `burst` lines at once, then one per `interval_ns`. Lines refused while the bucket is
// empty are counted, and the next line that is allowed reports the count, so a misbehaving
// initiator cannot flood the log nor hide how often it misbehaved.
//
// Plain state, no locks, no allocation: each connection owns one and only its reactor touches
// it. Time comes from the caller (a steady clock in nanoseconds) so tests drive it by hand.
class RateLimiter {
 public:
  static constexpr uint32_t kDefaultBurst = 10;
  static constexpr int64_t kDefaultIntervalNs = 1'000'000'000;  // one line a second

  explicit RateLimiter(uint32_t burst = kDefaultBurst, int64_t interval_ns = kDefaultIntervalNs)
      : burst_(burst), interval_ns_(interval_ns), tokens_(burst) {}

  // True when a line may be written now; then suppressed() is how many were refused since the
  // last allowed line (to append to it) and is reset by the next call.
  bool Allow(int64_t now_ns);
  uint64_t suppressed() const { return reported_; }

  // Monotonic nanoseconds for Allow.
  static int64_t NowNs();

 private:
  const uint32_t burst_;
  const int64_t interval_ns_;
  uint32_t tokens_;
  int64_t last_refill_ns_ = INT64_MIN;
  uint64_t suppressed_ = 0;  // refused since the last allowed line
  uint64_t reported_ = 0;    // what the last allowed line reports
};

// What a line about a connection says about it, written as the prefix
// "[C<conn> S<tsih> ini=<initiator> tgt=<target>] " with the parts known so far (S once a session
// exists, names once the login gave them). The JSON format turns the prefix into fields. Names
// come from the wire: bytes that could end the prefix or break the line (space, ']', controls)
// are written as '?'. Views: build one per line, from members that outlive the call.
struct ConnContext {
  uint64_t conn = 0;
  uint16_t tsih = 0;
  std::string_view initiator;
  std::string_view target;
};

}  // namespace iscsigw::log

template <>
struct fmt::formatter<iscsigw::log::ConnContext> {
  constexpr auto parse(fmt::format_parse_context& ctx) { return ctx.begin(); }
  template <typename FormatContext>
  auto format(const iscsigw::log::ConnContext& c, FormatContext& ctx) const {
    auto out = fmt::format_to(ctx.out(), "[C{}", c.conn);
    if (c.tsih != 0) out = fmt::format_to(out, " S{}", c.tsih);
    auto name = [&out](std::string_view key, std::string_view v) {
      if (v.empty()) return;
      for (char k : key) *out++ = k;
      for (char ch : v) {
        const auto u = static_cast<unsigned char>(ch);
        *out++ = (u <= 0x20 || u == 0x7f || ch == ']') ? '?' : ch;
      }
    };
    name(" ini=", c.initiator);
    name(" tgt=", c.target);
    *out++ = ']';
    *out++ = ' ';
    return out;
  }
};

// Connection-scoped logging with the level checked before anything is formatted:
// ISCSIGW_LOG_CONN(logger, level, conn_context, fmt, args...) writes the ConnContext prefix.
#define ISCSIGW_LOG_CONN(logger, lvl, conn_ctx, fmtstr, ...)                     \
  do {                                                                           \
    auto& lg_ = (logger);                                                        \
    if (lg_.should_log(lvl)) lg_.log(lvl, "{}" fmtstr, conn_ctx, ##__VA_ARGS__); \
  } while (0)

// Rate-limited logging of an initiator-caused error through `limiter` (a log::RateLimiter the
// caller owns on its reactor). A line that follows refused ones ends with
// " (N similar messages suppressed)".
#define ISCSIGW_LOG_LIMITED(limiter, logger, lvl, fmtstr, ...)                                     \
  do {                                                                                             \
    auto& lg_ = (logger);                                                                          \
    auto& rl_ = (limiter);                                                                         \
    if (lg_.should_log(lvl) && rl_.Allow(::iscsigw::log::RateLimiter::NowNs())) {                  \
      if (rl_.suppressed() == 0) {                                                                 \
        lg_.log(lvl, fmtstr, ##__VA_ARGS__);                                                       \
      } else {                                                                                     \
        lg_.log(lvl, fmtstr " ({} similar messages suppressed)", ##__VA_ARGS__, rl_.suppressed()); \
      }                                                                                            \
    }                                                                                              \
  } while (0)
