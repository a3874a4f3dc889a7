#include "common/subprocess.h"

#include <sys/wait.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "common/process.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;

TEST(RunProcess, CollectsExitCodeAndBothStreams) {
  const ProcessResult r = run_process({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST(RunProcess, ChildrenGetTheExtraEnvironmentAndTheParentPid) {
  const ProcessResult r = run_process({"/bin/sh", "-c", "echo $HEARTH_X $HEARTH_DIE_WITH_PARENT $HEARTH_PARENT_PID"},
                                      {"HEARTH_X=7"});
  EXPECT_EQ(r.out, "7 1 " + std::to_string(::getpid()) + "\n");
}

TEST(RunProcess, ExtraEntriesReplaceInheritedOnes) {
  // As in a child of hearth serve that starts children of its own: what it inherited
  // must not shadow what it passes on (getenv() finds the first of two entries).
  ::setenv("HEARTH_PARENT_PID", "1", 1);
  ::setenv("HEARTH_X", "inherited", 1);
  const ProcessResult r = run_process(
      {"/bin/sh", "-c", "echo $HEARTH_PARENT_PID $HEARTH_X; env | grep -c -e '^HEARTH_PARENT_PID=' -e '^HEARTH_X='"},
      {"HEARTH_X=passed"});
  ::unsetenv("HEARTH_PARENT_PID");
  ::unsetenv("HEARTH_X");
  EXPECT_EQ(r.out, std::to_string(::getpid()) + " passed\n2\n");
}

TEST(ChildProcess, ReadsLinesSignalsAndReaps) {
  ChildProcess c({"/bin/sh", "-c", "echo ready; exec sleep 30"});
  EXPECT_EQ(c.read_line(5s), "ready");
  EXPECT_FALSE(c.wait(0ms).has_value());
  c.signal(SIGKILL);
  EXPECT_EQ(c.wait(5s), 128 + SIGKILL);
}

TEST(ChildProcess, PassesDescriptorsAsThreeAndUp) {
  int a[2], b[2];
  ASSERT_EQ(::pipe2(a, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(b, O_CLOEXEC), 0);
  // Passed in reverse order of creation: each must arrive where asked, without FD_CLOEXEC.
  ChildProcess c({"/bin/sh", "-c", "echo to3 >&3; echo to4 >&4; echo done"}, {}, {b[1], a[1]});
  EXPECT_EQ(c.read_line(5s), "done");
  EXPECT_EQ(c.wait(5s), 0);
  ::close(a[1]);
  ::close(b[1]);
  char buf[16] = {};
  EXPECT_EQ(::read(b[0], buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "to3\n");
  EXPECT_EQ(::read(a[0], buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "to4\n");
  ::close(a[0]);
  ::close(b[0]);
}

TEST(ChildProcess, DescriptorsNotPassedAreNotInherited) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const std::string fd = std::to_string(p[1]);
  ChildProcess c({"/bin/sh", "-c", "if [ -e /proc/self/fd/" + fd + " ]; then echo open; else echo closed; fi"});
  EXPECT_EQ(c.read_line(5s), "closed");
  c.wait(5s);
  ::close(p[0]);
  ::close(p[1]);
}

TEST(ChildrenOf, FindsRunningChildrenByName) {
  ChildProcess c({"/bin/sleep", "30"});
  // Until the child has exec'd, its command line is still this test's.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (children_of(::getpid(), "/sleep").empty() && std::chrono::steady_clock::now() < deadline) ::usleep(1000);
  EXPECT_EQ(children_of(::getpid(), "/sleep"), std::vector<int>{c.pid()});
  EXPECT_TRUE(children_of(::getpid(), "hearth-engine").empty());
  c.signal(SIGKILL);
  c.wait(5s);
  EXPECT_TRUE(children_of(::getpid(), "/sleep").empty());
}

TEST(ProcessAlive, AZombieIsNotAlive) {
  EXPECT_TRUE(process_alive(::getpid(), process_start_time(::getpid())));
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(0);
  // Not reaped yet: the pid exists, as a zombie, until waitpid().
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (process_alive(pid) && std::chrono::steady_clock::now() < deadline) ::usleep(1000);
  EXPECT_FALSE(process_alive(pid));
  EXPECT_EQ(::kill(pid, 0), 0) << "still a zombie";
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_FALSE(process_alive(pid));
}

}  // namespace
}  // namespace hearth
