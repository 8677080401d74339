// HostExec: the direct implementation against real commands (/bin/sh, cat, sleep), and the
// nsenter one through a fake inner HostExec that records the argv it was given.
#include "csi/host_exec.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

namespace iscsigw::csi {
namespace host_exec_test {

using std::chrono::milliseconds;

ExecOptions WithTimeout(milliseconds timeout) {
  ExecOptions o;
  o.timeout = timeout;
  return o;
}
ExecOptions WithStdin(std::string data) {
  ExecOptions o;
  o.stdin_data = std::move(data);
  return o;
}
ExecOptions WithMaxOutput(size_t bytes) {
  ExecOptions o;
  o.max_output_bytes = bytes;
  return o;
}

ExecResult RunOk(HostExec& exec, const std::vector<std::string>& argv,
                 const ExecOptions& opts = {}) {
  auto r = exec.Run(argv, opts);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : ExecResult{};
}

TEST(DirectHostExec, ReportsExitCodes) {
  auto exec = MakeDirectHostExec();
  EXPECT_EQ(RunOk(*exec, {"true"}).exit_code, 0);
  EXPECT_TRUE(RunOk(*exec, {"true"}).ok());
  const ExecResult r = RunOk(*exec, {"sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_EQ(RunOk(*exec, {"sh", "-c", "exit 255"}).exit_code, 255);
}

TEST(DirectHostExec, ReportsTheSignalThatEndedIt) {
  auto exec = MakeDirectHostExec();
  const ExecResult r = RunOk(*exec, {"sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_EQ(r.term_signal, SIGTERM);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.Describe(), "killed by signal 15");
}

TEST(DirectHostExec, CapturesStdoutAndStderrApart) {
  auto exec = MakeDirectHostExec();
  const ExecResult r = RunOk(*exec, {"sh", "-c", "echo out; echo err >&2; printf 'a b'"});
  EXPECT_EQ(r.stdout_data, "out\na b");
  EXPECT_EQ(r.stderr_data, "err\n");
}

TEST(DirectHostExec, PassesArgumentsUnsplit) {
  auto exec = MakeDirectHostExec();
  const ExecResult r = RunOk(*exec, {"printf", "%s|", "two words", "", "$HOME"});
  EXPECT_EQ(r.stdout_data, "two words||$HOME|");
}

TEST(DirectHostExec, CapturesMoreThanAPipeHolds) {
  auto exec = MakeDirectHostExec();
  // 1 MiB on each stream at once: a reader that drained only one of them would deadlock.
  const ExecResult r =
      RunOk(*exec, {"sh", "-c", "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2"},
            WithMaxOutput(2 << 20));
  EXPECT_EQ(r.stdout_data.size(), 1u << 20);
  EXPECT_EQ(r.stderr_data.size(), 1u << 20);
  EXPECT_FALSE(r.output_truncated);
}

TEST(DirectHostExec, KeepsAtMostMaxOutputBytes) {
  auto exec = MakeDirectHostExec();
  const ExecResult r = RunOk(*exec, {"head", "-c", "100000", "/dev/zero"}, WithMaxOutput(1000));
  EXPECT_EQ(r.exit_code, 0);  // the rest was read and dropped, not left to block the writer
  EXPECT_EQ(r.stdout_data.size(), 1000u);
  EXPECT_TRUE(r.output_truncated);
}

TEST(DirectHostExec, FeedsStdin) {
  auto exec = MakeDirectHostExec();
  EXPECT_EQ(RunOk(*exec, {"cat"}, WithStdin("node.session.auth.password = x\n")).stdout_data,
            "node.session.auth.password = x\n");
  std::string big(1 << 20, 'z');  // larger than a pipe: written as the command reads
  EXPECT_EQ(RunOk(*exec, {"wc", "-c"}, WithStdin(big)).stdout_data, "1048576\n");
  EXPECT_EQ(RunOk(*exec, {"wc", "-c"}, WithStdin("")).stdout_data, "0\n");
}

TEST(DirectHostExec, StdinIsDevNullUnlessGiven) {
  auto exec = MakeDirectHostExec();
  const ExecResult r = RunOk(*exec, {"cat"}, WithTimeout(milliseconds(5000)));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, "");
}

TEST(DirectHostExec, SurvivesACommandThatIgnoresItsStdin) {
  auto exec = MakeDirectHostExec();
  // The reader is gone before the input is written: EPIPE, not a SIGPIPE that ends the test.
  std::string big(4 << 20, 'z');
  const ExecResult r = RunOk(*exec, {"true"}, WithStdin(big));
  EXPECT_EQ(r.exit_code, 0);
}

TEST(DirectHostExec, KillsACommandAtItsTimeout) {
  auto exec = MakeDirectHostExec();
  const auto start = std::chrono::steady_clock::now();
  const ExecResult r =
      RunOk(*exec, {"sh", "-c", "echo started; sleep 30"}, WithTimeout(milliseconds(2000)));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.term_signal, SIGKILL);
  // What it printed before is kept (2 s for sh to start and print, on a loaded machine).
  EXPECT_EQ(r.stdout_data, "started\n");
  EXPECT_EQ(r.Describe(), "timed out");
  EXPECT_GE(took, milliseconds(2000));
  EXPECT_LT(took, milliseconds(10000));  // killed at the timeout, not at the end of the sleep
}

TEST(DirectHostExec, TimeoutKillsTheChildrenItStartedToo) {
  auto exec = MakeDirectHostExec();
  // The grandchild holds stdout open; only a kill of the whole process group ends the read.
  const auto start = std::chrono::steady_clock::now();
  const ExecResult r =
      RunOk(*exec, {"sh", "-c", "sleep 30 & sleep 30; wait"}, WithTimeout(milliseconds(300)));
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

TEST(DirectHostExec, TimeoutAppliesWithItsOutputClosed) {
  auto exec = MakeDirectHostExec();
  const auto start = std::chrono::steady_clock::now();
  const ExecResult r =
      RunOk(*exec, {"sh", "-c", "exec >&- 2>&-; sleep 30"}, WithTimeout(milliseconds(300)));
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

TEST(DirectHostExec, DoesNotWaitForABackgroundChildAfterTheCommandExits) {
  auto exec = MakeDirectHostExec();
  const auto start = std::chrono::steady_clock::now();
  const ExecResult r =
      RunOk(*exec, {"sh", "-c", "sleep 30 & echo done"}, WithTimeout(milliseconds(10000)));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, "done\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

TEST(DirectHostExec, AMissingProgramIsAnError) {
  auto exec = MakeDirectHostExec();
  auto r = exec->Run({"iscsigw-no-such-program"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("iscsigw-no-such-program"), std::string::npos);
  EXPECT_FALSE(exec->Run({}, {}).ok());
}

TEST(ExecResult, DescribeNamesTheExitStatusAndTheFirstStderrLine) {
  ExecResult r;
  r.exit_code = 21;
  r.stderr_data = "\niscsiadm: No records found\nmore\n";
  EXPECT_EQ(r.Describe(), "exit status 21: iscsiadm: No records found");
}

class RecordingHostExec final : public HostExec {
 public:
  explicit RecordingHostExec(std::vector<std::string>* argv) : argv_(argv) {}
  Result<ExecResult> Run(const std::vector<std::string>& argv, const ExecOptions&) override {
    *argv_ = argv;
    ExecResult r;
    r.exit_code = 0;
    return r;
  }

 private:
  std::vector<std::string>* argv_;
};

TEST(NsenterHostExec, RunsTheCommandInTheNamespacesOfPid1) {
  std::vector<std::string> seen;
  auto exec = MakeNsenterHostExec(std::make_unique<RecordingHostExec>(&seen));
  ASSERT_TRUE(exec->Run({"iscsiadm", "-m", "session"}, {}).ok());
  const std::vector<std::string> want = {"nsenter", "--target", "1",     "--mount",
                                         "--uts",   "--ipc",    "--net", "--pid",
                                         "--",      "iscsiadm", "-m",    "session"};
  EXPECT_EQ(seen, want);
  EXPECT_FALSE(exec->Run({}, {}).ok());
}

TEST(HostExecMode, ParsesTheFlagValues) {
  EXPECT_EQ(ParseHostExecMode("direct"), HostExecMode::kDirect);
  EXPECT_EQ(ParseHostExecMode("nsenter"), HostExecMode::kNsenter);
  EXPECT_EQ(ParseHostExecMode("chroot"), std::nullopt);
}

}  // namespace host_exec_test
}  // namespace iscsigw::csi
