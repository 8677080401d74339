#include "csi/host_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

extern char** environ;

namespace iscsigw::csi {
namespace {

using Clock = std::chrono::steady_clock;

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Status Errno(const std::string& what, int err) {
  return Status(StatusCode::kUnavailable, what + ": " + std::strerror(err));
}

Status MakePipe(Pipe* p) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe", errno);
  p->read.Reset(fds[0]);
  p->write.Reset(fds[1]);
  return Status::Ok();
}

void SetNonBlocking(int fd) { (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Writing to a pipe whose reader is gone raises SIGPIPE in the writing thread. While a Run writes
// the command's stdin, that signal is blocked in this thread, and one left pending is taken
// before the old mask comes back: a command that ignores its input cannot kill the plugin.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeBlock() {
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) &&
        !sigismember(&old_, SIGPIPE)) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec zero{};
      (void)sigtimedwait(&pipe, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

class DirectHostExec final : public HostExec {
 public:
  Result<ExecResult> Run(const std::vector<std::string>& argv, const ExecOptions& options) override;
};

Result<ExecResult> DirectHostExec::Run(const std::vector<std::string>& argv,
                                       const ExecOptions& options) {
  if (argv.empty() || argv[0].empty()) return InvalidArgument("host command: empty argv");
  Pipe in, out, err;
  if (options.stdin_data) {
    if (Status s = MakePipe(&in); !s.ok()) return s;
  }
  if (Status s = MakePipe(&out); !s.ok()) return s;
  if (Status s = MakePipe(&err); !s.ok()) return s;

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (options.stdin_data) {
    posix_spawn_file_actions_adddup2(&actions, in.read.get(), STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out.write.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.write.get(), STDERR_FILENO);
  // Its own process group, so that a timeout kills what it started as well (nsenter --pid forks
  // the real command). Signal dispositions and mask back to the defaults: iscsigw-csi blocks
  // SIGTERM and SIGINT for its signal thread, and a child must not inherit that.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const auto start = Clock::now();
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return Status(rc == ENOENT ? StatusCode::kNotFound : StatusCode::kUnavailable,
                  "host command " + argv[0] + ": " + std::strerror(rc));
  }
  in.read.Close();
  out.write.Close();
  err.write.Close();

  ExecResult result;
  SigpipeBlock sigpipe_block;
  const std::string* input = options.stdin_data ? &*options.stdin_data : nullptr;
  size_t written = 0;
  if (input != nullptr) {
    SetNonBlocking(in.write.get());
    if (input->empty()) in.write.Close();
  }
  SetNonBlocking(out.read.get());
  SetNonBlocking(err.read.get());
  const auto deadline = start + options.timeout;
  char buf[16384];
  auto drain = [&](UniqueFd& fd, std::string* sink) {
    for (;;) {
      const ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n > 0) {
        const size_t room =
            options.max_output_bytes - std::min(options.max_output_bytes, sink->size());
        if (static_cast<size_t>(n) > room) result.output_truncated = true;
        sink->append(buf, std::min(room, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      fd.Close();  // EOF or an error: nothing more comes from this end
      return;
    }
  };
  // The command's end is watched through a pidfd where the kernel has them (5.3), else by
  // polling waitpid every few milliseconds once its pipes are quiet.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  int wstatus = 0;
  bool exited = false;
  int poll_error = 0;
  while (!exited) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd fds[4];
    nfds_t n = 0;
    int out_i = -1, err_i = -1, in_i = -1;
    if (out.read.get() >= 0) out_i = n, fds[n++] = {out.read.get(), POLLIN, 0};
    if (err.read.get() >= 0) err_i = n, fds[n++] = {err.read.get(), POLLIN, 0};
    if (in.write.get() >= 0) in_i = n, fds[n++] = {in.write.get(), POLLOUT, 0};
    if (pidfd.get() >= 0) fds[n++] = {pidfd.get(), POLLIN, 0};
    const int64_t wait_ms = pidfd.get() >= 0 ? 60'000 : 10;
    const int ready = ::poll(fds, n, static_cast<int>(std::min<int64_t>(left.count(), wait_ms)));
    if (ready < 0 && errno != EINTR) {
      poll_error = errno;
      break;
    }
    if (ready > 0) {
      if (out_i >= 0 && fds[out_i].revents != 0) drain(out.read, &result.stdout_data);
      if (err_i >= 0 && fds[err_i].revents != 0) drain(err.read, &result.stderr_data);
      if (in_i >= 0 && (fds[in_i].revents & (POLLERR | POLLHUP))) {
        in.write.Close();  // the command closed its stdin: what it did not read is dropped
      } else if (in_i >= 0 && fds[in_i].revents != 0) {
        const ssize_t w = ::write(in.write.get(), input->data() + written, input->size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input->size()) {
          in.write.Close();
        }
      }
    }
    pid_t reaped;
    while ((reaped = ::waitpid(pid, &wstatus, WNOHANG)) < 0 && errno == EINTR) {
    }
    exited = reaped == pid;
  }
  if (exited) {
    // What it wrote before it exited is all in the pipes. A child it left behind may hold them
    // open for longer: that is not waited for.
    if (out.read.get() >= 0) drain(out.read, &result.stdout_data);
    if (err.read.get() >= 0) drain(err.read, &result.stderr_data);
  } else {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (poll_error != 0) return Errno("host command " + argv[0] + ": poll", poll_error);
  }
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.term_signal = WTERMSIG(wstatus);
  }
  return result;
}

class NsenterHostExec final : public HostExec {
 public:
  explicit NsenterHostExec(std::unique_ptr<HostExec> inner) : inner_(std::move(inner)) {}
  Result<ExecResult> Run(const std::vector<std::string>& argv,
                         const ExecOptions& options) override {
    if (argv.empty() || argv[0].empty()) return InvalidArgument("host command: empty argv");
    std::vector<std::string> full(std::begin(kNsenterPrefix), std::end(kNsenterPrefix));
    full.insert(full.end(), argv.begin(), argv.end());
    return inner_->Run(full, options);
  }

 private:
  const std::unique_ptr<HostExec> inner_;
};

}  // namespace

std::string ExecResult::Describe() const {
  std::string what;
  if (timed_out) {
    what = "timed out";
  } else if (term_signal != 0) {
    what = "killed by signal " + std::to_string(term_signal);
  } else {
    what = "exit status " + std::to_string(exit_code);
  }
  std::string_view err = stderr_data;
  while (!err.empty() && (err.front() == '\n' || err.front() == ' ')) err.remove_prefix(1);
  err = err.substr(0, err.find('\n'));
  if (!err.empty()) what += ": " + std::string(err.substr(0, 200));
  return what;
}

std::optional<HostExecMode> ParseHostExecMode(std::string_view name) {
  if (name == "direct") return HostExecMode::kDirect;
  if (name == "nsenter") return HostExecMode::kNsenter;
  return std::nullopt;
}

std::unique_ptr<HostExec> MakeDirectHostExec() { return std::make_unique<DirectHostExec>(); }

std::unique_ptr<HostExec> MakeNsenterHostExec(std::unique_ptr<HostExec> inner) {
  return std::make_unique<NsenterHostExec>(std::move(inner));
}

std::unique_ptr<HostExec> MakeHostExec(HostExecMode mode) {
  if (mode == HostExecMode::kNsenter) return MakeNsenterHostExec(MakeDirectHostExec());
  return MakeDirectHostExec();
}

}  // namespace iscsigw::csi
