#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string_view>

extern char** environ;

namespace hearth {
namespace {

std::string drain(int fd) {
  std::string out;
  char buf[65536];
  ::lseek(fd, 0, SEEK_SET);
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int temp_fd(const char* kind) {
  std::string name = std::string("/tmp/hearth-") + kind + "-XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::unlink(name.c_str());
  return fd;
}

// This process's environment plus `extra`.
// An entry of `extra` replaces this process's entry of the same name (getenv() would
// find the first of two, and a child of a child must see its own parent's pid).
std::vector<char*> make_env(const Environment& extra, std::vector<std::string>& storage) {
  storage = extra;
  storage.push_back("HEARTH_DIE_WITH_PARENT=1");
  storage.push_back("HEARTH_PARENT_PID=" + std::to_string(::getpid()));
  auto overridden = [&storage](std::string_view entry) {
    const std::string_view name = entry.substr(0, entry.find('=') + 1);
    for (const std::string& e : storage) {
      if (std::string_view(e).substr(0, e.find('=') + 1) == name) return true;
    }
    return false;
  };
  std::vector<char*> out;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) out.push_back(*e);
  }
  for (std::string& e : storage) out.push_back(e.data());
  out.push_back(nullptr);
  return out;
}

pid_t spawn(const std::vector<std::string>& argv, const Environment& env, int out_fd, int err_fd,
            const std::vector<int>& pass_fds = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  // Passed descriptors go through copies above the targets, so that no dup2 is from a
  // descriptor to itself (which would keep its FD_CLOEXEC) and none overwrites another
  // that is still to be passed.
  std::vector<int> copies;
  for (int fd : pass_fds) copies.push_back(::fcntl(fd, F_DUPFD_CLOEXEC, 3 + static_cast<int>(pass_fds.size())));
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i] >= 0) posix_spawn_file_actions_adddup2(&actions, copies[i], 3 + static_cast<int>(i));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  std::vector<std::string> env_storage;
  std::vector<char*> envp = make_env(env, env_storage);
  // Children start with no blocked signals and default handlers, whatever this process
  // (a daemon waiting for signals synchronously, say) has set up.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  for (int fd : copies) {
    if (fd >= 0) ::close(fd);
  }
  return rc == 0 ? pid : -1;
}

int decode_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const Environment& env) {
  // Output goes to temporary files so that neither pipe can fill up and block the child.
  const int out_fd = temp_fd("out"), err_fd = temp_fd("err");
  ProcessResult result;
  const pid_t pid = spawn(argv, env, out_fd, err_fd);
  if (pid < 0) {
    ::close(out_fd);
    ::close(err_fd);
    result.err = "posix_spawn failed";
    return result;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = decode_status(status);
  result.out = drain(out_fd);
  result.err = drain(err_fd);
  ::close(out_fd);
  ::close(err_fd);
  return result;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const Environment& env,
                           const std::vector<int>& pass_fds, bool inherit_stderr) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  if (!inherit_stderr) err_fd_ = temp_fd("child-err");
  pid_ = spawn(argv, env, pipe_fds[1], inherit_stderr ? STDERR_FILENO : err_fd_, pass_fds);
  ::close(pipe_fds[1]);
  out_fd_ = pipe_fds[0];
  if (pid_ < 0) throw std::runtime_error("posix_spawn failed for " + argv[0]);
}

ChildProcess::~ChildProcess() {
  if (!status_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{out_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      stdout_closed_ = true;
      return std::nullopt;
    }
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

void ChildProcess::signal(int sig) {
  if (!status_) ::kill(pid_, sig);
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = decode_status(status);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    ::usleep(2000);
  }
}

std::string ChildProcess::err() const { return err_fd_ < 0 ? std::string() : drain(err_fd_); }

}  // namespace hearth
