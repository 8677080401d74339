// HostExec: runs a command on the host the CSI node plugin serves (iscsiadm, mount, mkfs, blkid)
// and collects what it printed. The node service reaches the host only through this interface,
// so tests substitute a fake that records argv and scripts the answers.
//
// Two implementations:
//   direct   fork/exec in our own namespaces (the plugin runs on the host, or its container
//            shares the host's mount and network namespaces and carries the tools).
//   nsenter  the same command prefixed by `nsenter --target 1 --mount --uts --ipc --net --pid --`,
//            so it runs in the namespaces of the host's init: the tools, /etc/iscsi and the
//            iscsid socket are the host's (a privileged pod with hostPID).
//
// Run blocks its calling thread until the command exits or its timeout passes; it never throws.
// Implementations are thread-safe: any number of threads may call Run at once.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace iscsigw::csi {

struct ExecOptions {
  // Written to the command's standard input, which is then closed; unset: /dev/null.
  std::optional<std::string> stdin_data;
  // From the start of the command; when it passes, the command's process group gets SIGKILL.
  std::chrono::milliseconds timeout{30'000};
  // Bytes kept of each of stdout and stderr; more is read and dropped (a runaway tool cannot
  // exhaust our memory), and the result says so.
  size_t max_output_bytes = 1 << 20;
};

struct ExecResult {
  int exit_code = -1;      // 0..255 when the command exited; -1 when a signal ended it
  int term_signal = 0;     // the signal that ended it, else 0
  bool timed_out = false;  // we killed it at its timeout (then term_signal is SIGKILL)
  bool output_truncated = false;
  std::string stdout_data;
  std::string stderr_data;

  bool ok() const { return exit_code == 0 && !timed_out; }
  // "exit status 3: <first line of stderr>", "timed out", "killed by signal 9":
  // for error messages that name what failed.
  std::string Describe() const;
};

class HostExec {
 public:
  virtual ~HostExec() = default;
  // Runs argv[0] (looked up in PATH) with argv. An error Status only when the command could not
  // be started at all (no such program, no pipes or processes left); everything the command
  // itself did, a timeout included, is in the ExecResult.
  virtual Result<ExecResult> Run(const std::vector<std::string>& argv,
                                 const ExecOptions& options) = 0;
};

enum class HostExecMode { kDirect, kNsenter };

// "direct" / "nsenter"; nullopt for anything else.
std::optional<HostExecMode> ParseHostExecMode(std::string_view name);

// fork/exec with pipes (posix_spawn), a poll loop bounded by the timeout, and SIGKILL to the
// command's own process group when it runs over, so children it started die with it.
std::unique_ptr<HostExec> MakeDirectHostExec();

// What nsenter mode puts before every argv.
inline constexpr std::string_view kNsenterPrefix[] = {
    "nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--"};

// Prefixes argv with kNsenterPrefix and hands it to `inner` (a direct HostExec in production).
std::unique_ptr<HostExec> MakeNsenterHostExec(std::unique_ptr<HostExec> inner);

// The production HostExec for a mode.
std::unique_ptr<HostExec> MakeHostExec(HostExecMode mode);

}  // namespace iscsigw::csi
