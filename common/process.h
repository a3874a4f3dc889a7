// Facts about processes on this machine, read from /proc: whether a pid is alive (and
// still the same process, not a reused pid), and which processes map a file. Used to
// tell stale shared-memory segments from live ones. Thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

// The start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22), or 0
// when the process does not exist.
uint64_t process_start_time(int pid);

// True when `pid` runs (a zombie, exited but not yet reaped, does not) and, if
// `start_time` is non-zero, started at that time.
bool process_alive(int pid, uint64_t start_time = 0);

// Pids of the running (not zombie) children of `parent` whose argv[0] ends with `name`,
// ascending (from /proc/*/stat and cmdline).
std::vector<int> children_of(int parent, std::string_view name);

// Pids of the processes that have `path` mapped (from /proc/*/maps), ascending.
std::vector<int> processes_mapping(const std::filesystem::path& path);

// The command name of `pid` (/proc/<pid>/comm), or "?" when it cannot be read.
std::string process_command(int pid);

// Seconds since an arbitrary fixed point (CLOCK_MONOTONIC), for durations.
double monotonic_seconds();
// The same clock in nanoseconds: what every heartbeat and timestamp in shared memory uses
// (it is the same in every process of the machine).
uint64_t monotonic_ns();

}  // namespace hearth
