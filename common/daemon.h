// What a long-running hearth process tells its supervisor, and how it waits for
// signals: sd_notify READY / STATUS / WATCHDOG / STOPPING when run under systemd (no-ops
// otherwise), and a signal wait that wakes in time for the next watchdog ping.
// Call daemon_block_signals() first thing in main(), before any thread starts.
#pragma once

#include <chrono>
#include <string_view>

namespace hearth {

// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and threads it starts later), so
// that daemon_wait_signal() receives them instead of default handlers killing us. When
// HEARTH_DIE_WITH_PARENT is set (children of `hearth serve` and of tests), the process
// also gets SIGTERM when its parent dies, so a killed supervisor leaves no orphans.
void daemon_block_signals();

// For supervisors: daemon_wait_signal() also returns SIGCHLD, so that a child's death is
// handled at once instead of at the next poll. Call after daemon_block_signals().
void daemon_watch_children();

// Waits up to `timeout` for SIGTERM, SIGINT or SIGHUP (and SIGCHLD, see above); returns
// the signal, or 0.
int daemon_wait_signal(std::chrono::milliseconds timeout);

// sd_notify wrappers; they do nothing outside systemd.
void daemon_notify_ready(std::string_view status);
void daemon_notify_status(std::string_view status);
void daemon_notify_watchdog();
void daemon_notify_stopping();

// Half the watchdog timeout systemd asked for (WATCHDOG_USEC), or `fallback` when none.
std::chrono::milliseconds daemon_watchdog_interval(std::chrono::milliseconds fallback);

}  // namespace hearth
