#include "tests/integration/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

extern char** environ;

namespace hearth::testing {
namespace {

std::string drain(int fd) {
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv) {
  // Output goes to temporary files so that neither pipe can fill up and block the child.
  char out_name[] = "/tmp/hearth-out-XXXXXX", err_name[] = "/tmp/hearth-err-XXXXXX";
  const int out_fd = ::mkstemp(out_name), err_fd = ::mkstemp(err_name);
  if (out_fd < 0 || err_fd < 0) throw std::runtime_error("mkstemp failed");
  ::unlink(out_name);
  ::unlink(err_name);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ProcessResult result;
  if (rc != 0) {
    ::close(out_fd);
    ::close(err_fd);
    result.err = "posix_spawn failed";
    return result;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  ::lseek(out_fd, 0, SEEK_SET);
  ::lseek(err_fd, 0, SEEK_SET);
  result.out = drain(out_fd);
  result.err = drain(err_fd);
  ::close(out_fd);
  ::close(err_fd);
  return result;
}

std::string hearth_bin(const std::string& name) { return std::string(HEARTH_BIN_DIR) + "/" + name; }

}  // namespace hearth::testing
