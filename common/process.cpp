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

uint64_t process_start_time(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  // The command name (field 2) is in parentheses and may hold spaces: skip past it.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  size_t pos = close + 2;  // field 3 starts here
  for (int field = 3; field < 22 && pos < stat.size(); ++field) {
    pos = stat.find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  return std::strtoull(stat.c_str() + pos, nullptr, 10);
}

bool process_alive(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const uint64_t now = process_start_time(pid);
  if (now == 0) return false;  // gone, or a zombie whose stat vanished
  return start_time == 0 || now == start_time;
}

std::vector<int> processes_mapping(const std::filesystem::path& path) {
  std::vector<int> pids;
  const std::string needle = std::filesystem::absolute(path).lexically_normal().string();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream maps(std::string("/proc/") + e->d_name + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      // The path is the last field; a deleted file shows " (deleted)" after it.
      const size_t at = line.find(needle);
      if (at != std::string::npos && (at + needle.size() == line.size() || line[at + needle.size()] == ' ')) {
        pids.push_back(static_cast<int>(pid));
        break;
      }
    }
  }
  ::closedir(proc);
  std::sort(pids.begin(), pids.end());
  return pids;
}

double monotonic_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace hearth
