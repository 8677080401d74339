// iscsi_load: an iSCSI load generator on libiscsi's asynchronous API, for the benchmarks that
// compare iscsigwd with tgtd. libiscsi's iscsi-perf only reads; this one also writes, mixes, keeps
// latency percentiles and checks every status.
//
// Usage:
//   iscsi_load URL [--rw randread|randwrite|randrw|read|write] [--mix PERCENT_READS] [--bs BYTES]
//              [--qd N] [--seconds S] [--fua] [--initiator IQN] [--json] [--verify] [--once]
//   URL: iscsi://[user[%password]@]HOST[:PORT]/TARGET-IQN/LUN, e.g.
//        iscsi://127.0.0.1:3260/iqn.2026-11.io.iscsigw:demo/0
//
// One session, one connection, one thread. Exactly --qd commands (READ16 or WRITE16 of --bs bytes)
// are in flight for --seconds; then no new ones are sent and those in flight drain. Sequential
// modes walk the LUN from LBA 0 and wrap; random modes pick bs-aligned offsets uniformly over the
// LUN; --once ends a sequential run at the end of the LUN (a fill or a full read) even before
// --seconds. randrw reads with probability --mix percent (default 50). --fua sets FUA on writes
// only. Writes send a fixed pattern. --verify (with --rw write only) stamps each logical block it
// writes with its LBA and a per-run nonce, then reads back every block written and compares.
//
// Figures: IOPS and MB/s (1 MB = 1e6 bytes; MiB/s as well) over the time from the first submit to
// the last completion; latency from submit to completion (CLOCK_MONOTONIC) into a log-linear
// histogram, p50/p99/p99.9 within 1%. Any command that does not end GOOD (CHECK CONDITION, other
// SCSI status, a residual, a timeout or a transport error) counts as an error, the first one is
// printed with its sense data, and the exit status is 1. --json prints one object on stdout with
// iops, mbps, mibps, read_iops, write_iops, lat_us {p50, p99, p999, mean}, errors, seconds, qd,
// bs, rw (and reads, writes, verify_* when asked); diagnostics go to stderr.
// Exit status: 0 all good, 1 command errors or a verify mismatch, 2 usage, login or setup failure.

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <array>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/latency_histogram.h"

namespace iscsigw::bench {
namespace {

// Commands that get no answer in this long fail with SCSI_STATUS_TIMEOUT instead of hanging the
// benchmark; libiscsi checks timeouts when iscsi_service() is called with no events.
constexpr int kCommandTimeoutS = 30;
constexpr int kPollMs = 100;

volatile std::sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// xorshift64* (Vigna): a few instructions per number, so the generator costs nothing next to
// the I/O it picks offsets for.
class Xorshift64Star {
 public:
  explicit Xorshift64Star(uint64_t seed) : s_(seed ? seed : 0x9e3779b97f4a7c15u) {}
  uint64_t Next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545f4914f6cdd1du;
  }
  // Uniform in [0, n) by multiply-shift (Lemire), no modulo bias worth the name for n << 2^64.
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t s_;
};

enum class Mode { kRandRead, kRandWrite, kRandRw, kRead, kWrite };

struct Options {
  std::string url;
  std::string rw = "randread";
  unsigned mix = 50;
  uint32_t bs = 4096;
  unsigned qd = 32;
  double seconds = 10;
  bool fua = false;
  std::string initiator = "iqn.2026-11.io.iscsigw:iscsi-load";
  bool json = false;
  bool verify = false;
  bool once = false;
};

Mode ParseMode(const std::string& rw) {
  if (rw == "randwrite") return Mode::kRandWrite;
  if (rw == "randrw") return Mode::kRandRw;
  if (rw == "read") return Mode::kRead;
  if (rw == "write") return Mode::kWrite;
  return Mode::kRandRead;
}

struct Counters {
  uint64_t ops = 0;
  uint64_t bytes = 0;
  LatencyHistogram lat;
};

// What one phase (the timed load, or the verify pass) measured.
struct PhaseResult {
  Counters read;
  Counters write;
  uint64_t errors = 0;
  uint64_t mismatches = 0;
  uint64_t first_mismatch_lba = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;

  double Seconds() const { return end_ns > start_ns ? (end_ns - start_ns) / 1e9 : 0; }
};

const char* StatusName(int status) {
  switch (status) {
    case SCSI_STATUS_GOOD:
      return "GOOD";
    case SCSI_STATUS_CHECK_CONDITION:
      return "CHECK CONDITION";
    case SCSI_STATUS_CONDITION_MET:
      return "CONDITION MET";
    case SCSI_STATUS_BUSY:
      return "BUSY";
    case SCSI_STATUS_RESERVATION_CONFLICT:
      return "RESERVATION CONFLICT";
    case SCSI_STATUS_TASK_SET_FULL:
      return "TASK SET FULL";
    case SCSI_STATUS_ACA_ACTIVE:
      return "ACA ACTIVE";
    case SCSI_STATUS_TASK_ABORTED:
      return "TASK ABORTED";
    case SCSI_STATUS_CANCELLED:
      return "CANCELLED";
    case SCSI_STATUS_ERROR:
      return "ERROR (transport)";
    case SCSI_STATUS_TIMEOUT:
      return "TIMEOUT";
    default:
      return "unknown";
  }
}

// Drives one logged-in session. Everything runs on the calling thread: libiscsi invokes the
// completion callback from inside iscsi_service(), and the callback submits the next command.
class LoadRunner {
 public:
  LoadRunner(iscsi_context* iscsi, int lun, uint32_t block_size, uint64_t num_blocks,
             const Options& opt)
      : iscsi_(iscsi),
        lun_(lun),
        block_size_(block_size),
        opt_(opt),
        mode_(ParseMode(opt.rw)),
        blocks_per_io_(opt.bs / block_size),
        slots_(num_blocks / blocks_per_io_),
        pattern_(opt.bs),
        ios_(opt.qd) {
    std::random_device rd;
    rng_ = Xorshift64Star((uint64_t{rd()} << 32) | rd());
    nonce_ = (uint64_t{rd()} << 32) | rd();
    // Not all zeros and not block-periodic in an obvious way, so a read of the wrong offset or of
    // an unwritten RAM block does not compare equal by accident.
    for (size_t i = 0; i < pattern_.size(); ++i) {
      pattern_[i] = static_cast<uint8_t>((i * 131 + 17) ^ (i >> 8));
    }
    for (auto& io : ios_) {
      io.runner = this;
      if (opt_.verify) io.buf = pattern_;
    }
  }

  // The timed phase: opt_.qd commands in flight until opt_.seconds have passed (or SIGINT),
  // then drained. False when the session failed (no verify or logout then).
  bool RunLoad() {
    verifying_ = false;
    deadline_ns_ = NowNs() + static_cast<uint64_t>(opt_.seconds * 1e9);
    return Run(&load_);
  }

  // Reads back [0, end of what RunLoad wrote) at the same depth and compares with the stamped
  // pattern. False when the connection failed.
  bool RunVerify() {
    verifying_ = true;
    verify_end_lba_ = wrapped_ ? slots_ * blocks_per_io_ : seq_next_lba_;
    seq_next_lba_ = 0;
    return Run(&verify_);
  }

  const PhaseResult& load() const { return load_; }
  const PhaseResult& verify() const { return verify_; }
  uint64_t verify_blocks() const { return verify_end_lba_; }
  const std::string& first_error() const { return first_error_; }

  // From here on callbacks (libiscsi cancels what is left when the context is destroyed) only
  // free their task.
  void Detach() { detached_ = true; }

 private:
  struct Io {
    LoadRunner* runner = nullptr;
    uint64_t lba = 0;
    uint64_t start_ns = 0;
    bool is_read = false;
    std::vector<uint8_t> buf;  // --verify only: this command's stamped write data
  };

  bool Run(PhaseResult* r) {
    phase_ = r;
    r->start_ns = r->end_ns = NowNs();
    for (auto& io : ios_) {
      if (!WantMore(NowNs()) || !Submit(&io)) break;
    }
    while (in_flight_ > 0) {
      pollfd pfd{iscsi_get_fd(iscsi_), static_cast<short>(iscsi_which_events(iscsi_)), 0};
      int n = poll(&pfd, 1, kPollMs);
      if (n < 0) {
        if (errno == EINTR) continue;
        NoteError("poll: " + std::string(strerror(errno)));
        return Broken();
      }
      if (iscsi_service(iscsi_, n > 0 ? pfd.revents : 0) < 0) {
        NoteError(std::string("connection failed: ") + iscsi_get_error(iscsi_));
        return Broken();
      }
    }
    return !session_failed_;
  }

  // The commands still in flight on a dead connection count as failed.
  bool Broken() {
    phase_->errors += in_flight_;
    in_flight_ = 0;
    phase_->end_ns = NowNs();
    detached_ = true;
    return false;
  }

  bool WantMore(uint64_t now) const {
    if (session_failed_) return false;
    if (verifying_) return seq_next_lba_ < verify_end_lba_;
    if (opt_.once && (mode_ == Mode::kRead || mode_ == Mode::kWrite) &&
        seq_next_lba_ + blocks_per_io_ > slots_ * blocks_per_io_) {
      return false;
    }
    return !g_stop && now < deadline_ns_;
  }

  uint64_t NextLba() {
    if (mode_ == Mode::kRead || mode_ == Mode::kWrite || verifying_) {
      if (seq_next_lba_ + blocks_per_io_ > slots_ * blocks_per_io_) {
        seq_next_lba_ = 0;
        wrapped_ = true;
      }
      uint64_t lba = seq_next_lba_;
      seq_next_lba_ += blocks_per_io_;
      return lba;
    }
    return rng_.Below(slots_) * blocks_per_io_;
  }

  bool NextIsRead() {
    switch (mode_) {
      case Mode::kRandRead:
      case Mode::kRead:
        return true;
      case Mode::kRandWrite:
      case Mode::kWrite:
        return verifying_;
      case Mode::kRandRw:
        return rng_.Below(100) < opt_.mix;
    }
    return true;
  }

  // Each logical block starts with its LBA and the run's nonce, then the pattern: a block written
  // at the wrong LBA, or left from an earlier run, fails the compare.
  void Stamp(Io* io) {
    for (uint32_t b = 0; b < blocks_per_io_; ++b) {
      uint8_t* blk = io->buf.data() + static_cast<size_t>(b) * block_size_;
      uint64_t lba = io->lba + b;
      std::memcpy(blk, &lba, sizeof lba);
      std::memcpy(blk + 8, &nonce_, sizeof nonce_);
    }
  }

  bool Matches(const Io& io, const scsi_task* task) const {
    if (task->datain.data == nullptr || static_cast<uint32_t>(task->datain.size) != opt_.bs) {
      return false;
    }
    for (uint32_t b = 0; b < blocks_per_io_; ++b) {
      size_t off = static_cast<size_t>(b) * block_size_;
      const uint8_t* blk = task->datain.data + off;
      uint64_t lba, nonce;
      std::memcpy(&lba, blk, sizeof lba);
      std::memcpy(&nonce, blk + 8, sizeof nonce);
      if (lba != io.lba + b || nonce != nonce_ ||
          std::memcmp(blk + 16, pattern_.data() + off + 16, block_size_ - 16) != 0) {
        return false;
      }
    }
    return true;
  }

  bool Submit(Io* io) {
    io->is_read = NextIsRead();
    io->lba = NextLba();
    scsi_task* task;
    if (io->is_read) {
      io->start_ns = NowNs();
      task = iscsi_read16_task(iscsi_, lun_, io->lba, opt_.bs, block_size_, 0, 0, 0, 0, 0,
                               &LoadRunner::OnComplete, io);
    } else {
      uint8_t* data = pattern_.data();
      if (opt_.verify) {
        Stamp(io);
        data = io->buf.data();
      }
      io->start_ns = NowNs();
      // The data is referenced, not copied, until the command completes: pattern_ and io->buf
      // outlive it.
      task = iscsi_write16_task(iscsi_, lun_, io->lba, data, opt_.bs, block_size_, 0, 0,
                                opt_.fua ? 1 : 0, 0, 0, &LoadRunner::OnComplete, io);
    }
    if (task == nullptr) {
      ++phase_->errors;
      NoteError(std::string("could not queue the command: ") + iscsi_get_error(iscsi_));
      return false;
    }
    ++in_flight_;
    return true;
  }

  static void OnComplete(iscsi_context*, int status, void* command_data, void* private_data) {
    auto* io = static_cast<Io*>(private_data);
    io->runner->Complete(io, status, static_cast<scsi_task*>(command_data));
  }

  void Complete(Io* io, int status, scsi_task* task) {
    uint64_t now = NowNs();
    if (detached_) {
      if (task) scsi_free_scsi_task(task);
      return;
    }
    --in_flight_;
    PhaseResult& r = *phase_;
    r.end_ns = now;
    bool good = status == SCSI_STATUS_GOOD && task != nullptr &&
                task->residual_status == SCSI_RESIDUAL_NO_RESIDUAL;
    if (good) {
      Counters& c = io->is_read ? r.read : r.write;
      ++c.ops;
      c.bytes += opt_.bs;
      c.lat.Record(now - io->start_ns);
      if (verifying_ && !Matches(*io, task)) {
        if (r.mismatches++ == 0) r.first_mismatch_lba = io->lba;
      }
    } else {
      ++r.errors;
      NoteFailure(*io, status, task);
      // Not a status from the target: the session is gone (libiscsi cancels every command when
      // the connection drops and reconnecting is off) or a command timed out. Resubmitting would
      // only spin on cancellations.
      if (status == SCSI_STATUS_CANCELLED || status == SCSI_STATUS_ERROR ||
          status == SCSI_STATUS_TIMEOUT) {
        session_failed_ = true;
      }
    }
    if (task) scsi_free_scsi_task(task);
    if (WantMore(now)) Submit(io);
  }

  void NoteFailure(const Io& io, int status, const scsi_task* task) {
    if (!first_error_.empty()) return;
    char buf[512];
    const char* op = io.is_read ? "READ16" : "WRITE16";
    if (status == SCSI_STATUS_CHECK_CONDITION && task != nullptr) {
      std::snprintf(buf, sizeof buf,
                    "%s lba %llu: CHECK CONDITION, sense key %s (0x%x), asc/ascq 0x%04x %s", op,
                    static_cast<unsigned long long>(io.lba), scsi_sense_key_str(task->sense.key),
                    static_cast<unsigned>(task->sense.key), static_cast<unsigned>(task->sense.ascq),
                    scsi_sense_ascq_str(task->sense.ascq));
    } else if (status == SCSI_STATUS_GOOD && task != nullptr) {
      std::snprintf(buf, sizeof buf, "%s lba %llu: GOOD with a residual of %zu bytes", op,
                    static_cast<unsigned long long>(io.lba), task->residual);
    } else if (status == SCSI_STATUS_CANCELLED) {
      // iscsi_get_error() may still hold an older, unrelated message here.
      std::snprintf(buf, sizeof buf, "%s lba %llu: cancelled, the connection was lost", op,
                    static_cast<unsigned long long>(io.lba));
    } else if (status == SCSI_STATUS_ERROR || status == SCSI_STATUS_TIMEOUT) {
      std::snprintf(buf, sizeof buf, "%s lba %llu: %s: %s", op,
                    static_cast<unsigned long long>(io.lba), StatusName(status),
                    iscsi_get_error(iscsi_));
    } else {
      std::snprintf(buf, sizeof buf, "%s lba %llu: SCSI status %s (0x%x)", op,
                    static_cast<unsigned long long>(io.lba), StatusName(status),
                    static_cast<unsigned>(status));
    }
    first_error_ = buf;
  }

  void NoteError(const std::string& what) {
    if (first_error_.empty()) first_error_ = what;
  }

  iscsi_context* const iscsi_;
  const int lun_;
  const uint32_t block_size_;
  const Options& opt_;
  const Mode mode_;
  const uint32_t blocks_per_io_;
  const uint64_t slots_;  // bs-sized, bs-aligned extents in the LUN
  std::vector<uint8_t> pattern_;
  std::vector<Io> ios_;  // one per queue slot; its address is the command's private_data
  Xorshift64Star rng_{1};
  uint64_t nonce_ = 0;

  PhaseResult load_;
  PhaseResult verify_;
  PhaseResult* phase_ = &load_;
  bool verifying_ = false;
  bool detached_ = false;
  bool session_failed_ = false;
  uint64_t deadline_ns_ = 0;
  uint64_t seq_next_lba_ = 0;
  bool wrapped_ = false;
  uint64_t verify_end_lba_ = 0;
  unsigned in_flight_ = 0;
  std::string first_error_;
};

void PrintHuman(const Options& o, const PhaseResult& r, uint32_t block_size, uint64_t num_blocks) {
  double s = r.Seconds();
  double div = s > 0 ? s : 1;
  uint64_t ops = r.read.ops + r.write.ops;
  uint64_t bytes = r.read.bytes + r.write.bytes;
  LatencyHistogram all = r.read.lat;
  all.Merge(r.write.lat);
  std::printf("%s bs=%u qd=%u%s over %.3f s, LUN of %llu blocks of %u bytes\n", o.rw.c_str(), o.bs,
              o.qd, o.fua ? " fua" : "", s, static_cast<unsigned long long>(num_blocks),
              block_size);
  std::printf("  total: %.0f IOPS, %.1f MB/s (%.1f MiB/s), %llu commands\n", ops / div,
              bytes / div / 1e6, bytes / div / 1048576.0, static_cast<unsigned long long>(ops));
  auto direction = [&](const char* name, const Counters& c) {
    if (c.ops == 0) return;
    std::printf("  %-5s: %.0f IOPS, %.1f MB/s, lat us p50 %.1f p99 %.1f p99.9 %.1f mean %.1f\n",
                name, c.ops / div, c.bytes / div / 1e6, c.lat.PercentileUs(0.5),
                c.lat.PercentileUs(0.99), c.lat.PercentileUs(0.999), c.lat.MeanUs());
  };
  direction("read", r.read);
  direction("write", r.write);
  std::printf("  latency us: p50 %.1f p99 %.1f p99.9 %.1f mean %.1f\n", all.PercentileUs(0.5),
              all.PercentileUs(0.99), all.PercentileUs(0.999), all.MeanUs());
  std::printf("  errors: %llu\n", static_cast<unsigned long long>(r.errors));
}

void PrintLatJson(const LatencyHistogram& h) {
  std::printf("{\"p50\": %.1f, \"p99\": %.1f, \"p999\": %.1f, \"mean\": %.1f}", h.PercentileUs(0.5),
              h.PercentileUs(0.99), h.PercentileUs(0.999), h.MeanUs());
}

void PrintJson(const Options& o, const PhaseResult& r, const PhaseResult* v,
               uint64_t verify_blocks) {
  double s = r.Seconds();
  double div = s > 0 ? s : 1;
  uint64_t bytes = r.read.bytes + r.write.bytes;
  LatencyHistogram all = r.read.lat;
  all.Merge(r.write.lat);
  std::printf("{\"rw\": \"%s\", \"bs\": %u, \"qd\": %u, \"fua\": %s, \"seconds\": %.3f, ",
              o.rw.c_str(), o.bs, o.qd, o.fua ? "true" : "false", s);
  std::printf("\"iops\": %.1f, \"mbps\": %.2f, \"mibps\": %.2f, ", (r.read.ops + r.write.ops) / div,
              bytes / div / 1e6, bytes / div / 1048576.0);
  std::printf("\"read_iops\": %.1f, \"write_iops\": %.1f, \"reads\": %llu, \"writes\": %llu, ",
              r.read.ops / div, r.write.ops / div, static_cast<unsigned long long>(r.read.ops),
              static_cast<unsigned long long>(r.write.ops));
  std::printf("\"lat_us\": ");
  PrintLatJson(all);
  std::printf(", \"read_lat_us\": ");
  PrintLatJson(r.read.lat);
  std::printf(", \"write_lat_us\": ");
  PrintLatJson(r.write.lat);
  std::printf(", \"errors\": %llu", static_cast<unsigned long long>(r.errors));
  if (v != nullptr) {
    std::printf(", \"verify_blocks\": %llu, \"verify_errors\": %llu, \"verify_mismatches\": %llu",
                static_cast<unsigned long long>(verify_blocks),
                static_cast<unsigned long long>(v->errors),
                static_cast<unsigned long long>(v->mismatches));
  }
  std::printf("}\n");
}

struct ContextDeleter {
  void operator()(iscsi_context* c) const { iscsi_destroy_context(c); }
};
struct UrlDeleter {
  void operator()(iscsi_url* u) const { iscsi_destroy_url(u); }
};

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"iscsi_load: iSCSI read/write load generator (libiscsi, one session)"};
  app.option_defaults()->always_capture_default();
  app.add_option("url", o.url, "iscsi://HOST[:PORT]/TARGET-IQN/LUN")->required();
  app.add_option("--rw", o.rw, "randread|randwrite|randrw|read|write")
      ->check(CLI::IsMember({"randread", "randwrite", "randrw", "read", "write"}));
  auto* mix = app.add_option("--mix", o.mix, "randrw: percent of commands that read")
                  ->check(CLI::Range(0u, 100u));
  app.add_option("--bs", o.bs, "bytes per command, a multiple of the LUN's block size")
      ->check(CLI::Range(1u, 64u << 20));
  app.add_option("--qd", o.qd, "commands in flight")->check(CLI::Range(1u, 4096u));
  app.add_option("--seconds", o.seconds, "duration of the timed phase")
      ->check(CLI::Range(0.001, 86400.0));
  app.add_flag("--fua", o.fua, "set FUA on writes");
  app.add_option("--initiator", o.initiator, "initiator IQN");
  app.add_flag("--json", o.json, "one JSON object on stdout");
  app.add_flag("--verify", o.verify, "--rw write: read back everything written and compare");
  app.add_flag("--once", o.once, "--rw read|write: stop at the end of the LUN");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (mix->count() > 0 && o.rw != "randrw") {
    std::fprintf(stderr, "iscsi_load: --mix applies to --rw randrw only\n");
    return 2;
  }
  if (o.verify && o.rw != "write") {
    std::fprintf(stderr, "iscsi_load: --verify needs --rw write\n");
    return 2;
  }

  std::unique_ptr<iscsi_context, ContextDeleter> iscsi(iscsi_create_context(o.initiator.c_str()));
  if (!iscsi) {
    std::fprintf(stderr, "iscsi_load: cannot create a libiscsi context\n");
    return 2;
  }
  std::unique_ptr<iscsi_url, UrlDeleter> url(iscsi_parse_full_url(iscsi.get(), o.url.c_str()));
  if (!url) {
    std::fprintf(stderr, "iscsi_load: bad URL %s: %s\n", o.url.c_str(),
                 iscsi_get_error(iscsi.get()));
    return 2;
  }
  iscsi_set_targetname(iscsi.get(), url->target);
  iscsi_set_session_type(iscsi.get(), ISCSI_SESSION_NORMAL);
  iscsi_set_header_digest(iscsi.get(), ISCSI_HEADER_DIGEST_NONE);
  // A reconnect would replay commands and hide the failure this tool exists to report.
  iscsi_set_noautoreconnect(iscsi.get(), 1);
  iscsi_set_timeout(iscsi.get(), kCommandTimeoutS);
  if (url->user[0] != '\0' &&
      iscsi_set_initiator_username_pwd(iscsi.get(), url->user, url->passwd) != 0) {
    std::fprintf(stderr, "iscsi_load: CHAP: %s\n", iscsi_get_error(iscsi.get()));
    return 2;
  }
  if (iscsi_full_connect_sync(iscsi.get(), url->portal, url->lun) != 0) {
    std::fprintf(stderr, "iscsi_load: login to %s at %s failed: %s\n", url->target, url->portal,
                 iscsi_get_error(iscsi.get()));
    return 2;
  }
  int lun = url->lun;

  scsi_task* rc = iscsi_readcapacity16_sync(iscsi.get(), lun);
  auto* rc16 = rc != nullptr && rc->status == SCSI_STATUS_GOOD
                   ? static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(rc))
                   : nullptr;
  if (rc16 == nullptr) {
    std::fprintf(stderr, "iscsi_load: READ CAPACITY(16) failed: %s\n",
                 iscsi_get_error(iscsi.get()));
    if (rc) scsi_free_scsi_task(rc);
    return 2;
  }
  uint32_t block_size = rc16->block_length;
  uint64_t num_blocks = rc16->returned_lba + 1;
  scsi_free_scsi_task(rc);
  if (block_size < 16 || o.bs % block_size != 0 || o.bs / block_size > num_blocks) {
    std::fprintf(stderr,
                 "iscsi_load: --bs %u must be a multiple of the block size %u and at most the "
                 "LUN's %llu blocks\n",
                 o.bs, block_size, static_cast<unsigned long long>(num_blocks));
    return 2;
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  auto runner = std::make_unique<LoadRunner>(iscsi.get(), lun, block_size, num_blocks, o);
  bool connected = runner->RunLoad();
  if (connected && o.verify) connected = runner->RunVerify();
  runner->Detach();
  if (connected) iscsi_logout_sync(iscsi.get());
  iscsi.reset();  // cancels anything left in flight: the runner must still exist

  const PhaseResult& r = runner->load();
  const PhaseResult* v = o.verify ? &runner->verify() : nullptr;
  if (o.json) {
    PrintJson(o, r, v, runner->verify_blocks());
  } else {
    PrintHuman(o, r, block_size, num_blocks);
    if (v != nullptr) {
      std::printf("  verify: %llu blocks read back in %.3f s, %llu errors, %llu mismatches\n",
                  static_cast<unsigned long long>(runner->verify_blocks()), v->Seconds(),
                  static_cast<unsigned long long>(v->errors),
                  static_cast<unsigned long long>(v->mismatches));
    }
  }
  if (!runner->first_error().empty()) {
    std::fprintf(stderr, "iscsi_load: first error: %s\n", runner->first_error().c_str());
  }
  if (v != nullptr && v->mismatches > 0) {
    std::fprintf(stderr,
                 "iscsi_load: verify: %llu commands read back other data, the first at lba %llu\n",
                 static_cast<unsigned long long>(v->mismatches),
                 static_cast<unsigned long long>(v->first_mismatch_lba));
  }
  bool ok = r.errors == 0 && (v == nullptr || (v->errors == 0 && v->mismatches == 0));
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace iscsigw::bench

int main(int argc, char** argv) { return iscsigw::bench::Main(argc, argv); }
