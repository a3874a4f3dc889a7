#include "common/cpu_set.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace hearth {

std::string CpuSet::describe() const {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

uint64_t CpuSet::mask64() const {
  uint64_t m = 0;
  for (int c : cpus) {
    if (c < 64) m |= uint64_t{1} << c;
  }
  return m;
}

Result<CpuSet> cpu_set_parse(std::string_view list) {
  CpuSet set;
  auto number = [](std::string_view s, int& out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && out >= 0 && out < CPU_SETSIZE;
  };
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string_view item = list.substr(at, comma - at);
    const size_t dash = item.find('-');
    int first = 0, last = 0;
    const bool ok = dash == std::string_view::npos
                        ? number(item, first) && (last = first, true)
                        : number(item.substr(0, dash), first) && number(item.substr(dash + 1), last) && first <= last;
    if (!ok) {
      return make_error(ErrorCode::kInvalidArgument, "'{}' is not a CPU list such as 0-3,8 (CPUs 0..{})", list,
                        CPU_SETSIZE - 1);
    }
    for (int c = first; c <= last; ++c) set.cpus.push_back(c);
    at = comma + 1;
  }
  std::sort(set.cpus.begin(), set.cpus.end());
  set.cpus.erase(std::unique(set.cpus.begin(), set.cpus.end()), set.cpus.end());
  return set;
}

CpuSet cpu_set_current() {
  CpuSet set;
  cpu_set_t s;
  CPU_ZERO(&s);
  if (sched_getaffinity(0, sizeof(s), &s) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &s)) set.cpus.push_back(c);
    }
  }
  return set;
}

Result<CpuSet> cpu_set_share(const CpuSet& set, int part, int parts) {
  const int n = static_cast<int>(set.cpus.size());
  if (parts < 1 || part < 0 || part >= parts) {
    return make_error(ErrorCode::kInvalidArgument, "share {} of {} does not exist", part, parts);
  }
  if (n < parts) {
    return make_error(ErrorCode::kInvalidArgument, "{} CPUs ({}) cannot be split among {} ranks", n, set.describe(),
                      parts);
  }
  const int base = n / parts, extra = n % parts;
  const int begin = part * base + std::min(part, extra);
  const int size = base + (part < extra ? 1 : 0);
  CpuSet out;
  out.cpus.assign(set.cpus.begin() + begin, set.cpus.begin() + begin + size);
  return out;
}

Status cpu_set_pin(const CpuSet& set) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int c : set.cpus) CPU_SET(c, &s);
  if (set.cpus.empty() || sched_setaffinity(0, sizeof(s), &s) != 0) {
    return make_error(ErrorCode::kInvalidArgument, "cannot run on CPUs {}: {}", set.describe(),
                      set.cpus.empty() ? "no CPU given" : std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace hearth
