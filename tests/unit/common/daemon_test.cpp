// sd_notify through a socket this test owns (as systemd's NOTIFY_SOCKET), the watchdog
// interval, the signal wait, and parent-death for children of supervisors.
#include "common/daemon.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "tests/notify_socket.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;

// The test's own socket as this process's NOTIFY_SOCKET, while it lives.
class NotifyingTo {
 public:
  explicit NotifyingTo(const testing::NotifySocket& socket) { ::setenv("NOTIFY_SOCKET", socket.path().c_str(), 1); }
  ~NotifyingTo() { ::unsetenv("NOTIFY_SOCKET"); }
};

TEST(DaemonTest, NotificationsReachTheNotifySocket) {
  testing::NotifySocket socket;
  NotifyingTo notifying(socket);
  daemon_notify_ready("serving on 8080");
  EXPECT_EQ(socket.next(), "READY=1\nSTATUS=serving on 8080");
  daemon_notify_status("draining");
  EXPECT_EQ(socket.next(), "STATUS=draining");
  daemon_notify_watchdog();
  EXPECT_EQ(socket.next(), "WATCHDOG=1");
  daemon_notify_stopping();
  EXPECT_EQ(socket.next(), "STOPPING=1");
  EXPECT_EQ(socket.next(50ms), "") << "nothing else was sent";
}

TEST(DaemonTest, NotificationsOutsideSystemdAreHarmless) {
  ::unsetenv("NOTIFY_SOCKET");
  daemon_notify_ready("x");
  daemon_notify_watchdog();
  daemon_notify_stopping();
  SUCCEED();
}

TEST(DaemonTest, WatchdogIntervalIsHalfWhatSystemdAsked) {
  ::unsetenv("WATCHDOG_PID");
  ::setenv("WATCHDOG_USEC", "500000", 1);
  EXPECT_EQ(daemon_watchdog_interval(7000ms), 250ms);
  // For another process: not ours to ping.
  ::setenv("WATCHDOG_PID", "1", 1);
  EXPECT_EQ(daemon_watchdog_interval(7000ms), 7000ms);
  ::unsetenv("WATCHDOG_PID");
  ::unsetenv("WATCHDOG_USEC");
  EXPECT_EQ(daemon_watchdog_interval(7000ms), 7000ms);
}

// Signal masks are per process: these run in a child (a death test) of their own.
TEST(DaemonTest, BlockedSignalsAreReceivedByTheWait) {
  EXPECT_EXIT(
      {
        daemon_block_signals();
        const auto t0 = std::chrono::steady_clock::now();
        const int none = daemon_wait_signal(50ms);
        const bool waited = std::chrono::steady_clock::now() - t0 >= 40ms;
        ::raise(SIGHUP);  // blocked: it waits for us instead of ending the process
        const int hup = daemon_wait_signal(5000ms);
        ::raise(SIGTERM);
        const int term = daemon_wait_signal(5000ms);
        std::exit(none == 0 && waited && hup == SIGHUP && term == SIGTERM ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(DaemonTest, AChildOfAKilledSupervisorGetsSigterm) {
  int ready_pipe[2], result_pipe[2];
  ASSERT_EQ(::pipe(ready_pipe), 0);
  ASSERT_EQ(::pipe(result_pipe), 0);
  const pid_t supervisor = ::fork();
  ASSERT_GE(supervisor, 0);
  if (supervisor == 0) {
    const pid_t daemon = ::fork();
    if (daemon == 0) {
      ::setenv("HEARTH_DIE_WITH_PARENT", "1", 1);
      ::setenv("HEARTH_PARENT_PID", std::to_string(::getppid()).c_str(), 1);
      daemon_block_signals();
      const unsigned char ready = 1;
      [[maybe_unused]] ssize_t w = ::write(ready_pipe[1], &ready, 1);
      const auto sig = static_cast<unsigned char>(daemon_wait_signal(10000ms));
      w = ::write(result_pipe[1], &sig, 1);
      ::_exit(0);
    }
    unsigned char ready = 0;
    [[maybe_unused]] ssize_t r = ::read(ready_pipe[0], &ready, 1);
    ::_exit(0);  // the supervisor dies; its child must hear of it
  }
  ::close(result_pipe[1]);
  int status = 0;
  ::waitpid(supervisor, &status, 0);
  unsigned char sig = 0;
  pollfd p{result_pipe[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "the daemon never reported";
  ASSERT_EQ(::read(result_pipe[0], &sig, 1), 1);
  EXPECT_EQ(sig, SIGTERM) << "the daemon waited out its timeout instead";
  for (int fd : {ready_pipe[0], ready_pipe[1], result_pipe[0]}) ::close(fd);
}

}  // namespace
}  // namespace hearth
