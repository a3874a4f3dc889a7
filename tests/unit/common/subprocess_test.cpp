#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hearth
