#include "common/daemon.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <systemd/sd-daemon.h>
#include <time.h>

#include <cerrno>
#include <string>

namespace hearth {
namespace {

std::atomic<bool> g_watch_children{false};

sigset_t daemon_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  if (g_watch_children.load()) sigaddset(&set, SIGCHLD);
  return set;
}

void notify(std::string_view message) {
  const std::string m(message);
  sd_notify(0, m.c_str());
}

}  // namespace

void daemon_block_signals() {
  const sigset_t set = daemon_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (const char* env = std::getenv("HEARTH_DIE_WITH_PARENT"); env != nullptr && *env == '1') {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    // The parent may have died before the call above: then we already belong to another.
    const char* parent = std::getenv("HEARTH_PARENT_PID");
    if (parent != nullptr && std::atoi(parent) != ::getppid()) ::raise(SIGTERM);
  }
}

void daemon_watch_children() {
  g_watch_children.store(true);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int daemon_wait_signal(std::chrono::milliseconds timeout) {
  const sigset_t set = daemon_signals();
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1000000);
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

void daemon_notify_ready(std::string_view status) { notify("READY=1\nSTATUS=" + std::string(status)); }
void daemon_notify_status(std::string_view status) { notify("STATUS=" + std::string(status)); }
void daemon_notify_watchdog() { notify("WATCHDOG=1"); }
void daemon_notify_stopping() { notify("STOPPING=1"); }

std::chrono::milliseconds daemon_watchdog_interval(std::chrono::milliseconds fallback) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    return std::chrono::milliseconds(std::max<uint64_t>(1, usec / 2000));
  }
  return fallback;
}

}  // namespace hearth
