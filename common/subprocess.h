// Child processes: run to completion (exit status and both output streams), or in the
// background (a child to read lines from, signal and reap). Used by `hearth serve`,
// benchmarks and the multi-process tests. Not thread-safe per object.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hearth {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal when killed by one
  std::string out;
  std::string err;
};

// Extra environment entries ("NAME=value") for a child, on top of this process's own.
// Every child also gets HEARTH_DIE_WITH_PARENT=1 and HEARTH_PARENT_PID: hearth's daemons
// then stop when the process that started them dies (common/daemon.h). The kernel ties
// that to the thread that started the child: start long-lived children from a thread
// that outlives them.
using Environment = std::vector<std::string>;

// Runs `argv` (argv[0] a path) to completion with stdin from /dev/null.
ProcessResult run_process(const std::vector<std::string>& argv, const Environment& env = {});

// A process running in the background; its stdout is a pipe read line by line, its
// stderr goes to a file (or this process's stderr). The destructor kills (SIGKILL) and reaps it if still running.
class ChildProcess {
 public:
  // `pass_fds` are given to the child as descriptors 3, 4, ... (a listening socket for
  // a frontend, say); nothing else of this process's is inherited but what lacks
  // FD_CLOEXEC. With `inherit_stderr` the child writes to this process's stderr (and
  // err() is empty) instead of a file.
  explicit ChildProcess(const std::vector<std::string>& argv, const Environment& env = {},
                        const std::vector<int>& pass_fds = {}, bool inherit_stderr = false);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The next line of stdout (without the newline), or nullopt on timeout or EOF.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  // Whether stdout has reached EOF (the child closed it, or exited): no line will come.
  bool stdout_closed() const { return stdout_closed_; }
  void signal(int sig);
  // Waits for exit; returns the status as ProcessResult::exit_code does, or nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // Everything the child wrote to stderr so far.
  std::string err() const;

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string buffer_;
  bool stdout_closed_ = false;
  std::optional<int> status_;
};

}  // namespace hearth
