#include "common/process.h"

#include <dirent.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

namespace hearth {

namespace {

// The state letter (field 3) and start time (field 22) of /proc/<pid>/stat; false when
// the process is gone.
bool read_stat(int pid, char& state, uint64_t& start_time) {
  if (pid <= 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  // The command name (field 2) is in parentheses and may hold spaces: skip past it.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  size_t pos = close + 2;  // field 3 starts here
  state = stat[pos];
  for (int field = 3; field < 22 && pos < stat.size(); ++field) {
    pos = stat.find(' ', pos);
    if (pos == std::string::npos) return false;
    ++pos;
  }
  start_time = std::strtoull(stat.c_str() + pos, nullptr, 10);
  return true;
}

}  // namespace

uint64_t process_start_time(int pid) {
  char state = 0;
  uint64_t start = 0;
  return read_stat(pid, state, start) ? start : 0;
}

bool process_alive(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = 0;
  uint64_t now = 0;
  if (!read_stat(pid, state, now) || now == 0) return false;
  if (state == 'Z' || state == 'X') return false;  // exited, not yet reaped by its parent
  return start_time == 0 || now == start_time;
}

namespace {

// The pids in /proc for which keep(pid, "/proc/<pid>/") holds, sorted.
template <typename Keep>
std::vector<int> find_processes(Keep keep) {
  std::vector<int> pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (keep(std::string("/proc/") + e->d_name + "/")) pids.push_back(static_cast<int>(pid));
  }
  ::closedir(proc);
  std::sort(pids.begin(), pids.end());
  return pids;
}

}  // namespace

std::vector<int> children_of(int parent, std::string_view name) {
  return find_processes([&](const std::string& dir) {
    std::ifstream stat(dir + "stat");
    std::string line;
    if (!std::getline(stat, line)) return false;
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) return false;
    const char state = line[close + 2];  // field 3; field 4 is the parent
    if (state == 'Z' || state == 'X' || std::atoi(line.c_str() + close + 4) != parent) return false;
    std::ifstream cmd(dir + "cmdline");
    std::string argv0;
    std::getline(cmd, argv0, '\0');
    return argv0.ends_with(name);
  });
}

std::vector<int> processes_mapping(const std::filesystem::path& path) {
  const std::string needle = std::filesystem::absolute(path).lexically_normal().string();
  return find_processes([&](const std::string& dir) {
    std::ifstream maps(dir + "maps");
    std::string line;
    while (std::getline(maps, line)) {
      // The path is the last field; a deleted file shows " (deleted)" after it.
      const size_t at = line.find(needle);
      if (at != std::string::npos && (at + needle.size() == line.size() || line[at + needle.size()] == ' ')) {
        return true;
      }
    }
    return false;
  });
}

std::string process_command(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name.empty() ? "?" : name;
}

double monotonic_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace hearth
