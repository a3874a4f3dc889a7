#include "frontend/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace hearth {

LatencyHistogram::LatencyHistogram(std::span<const double> bounds) : n_bounds_(std::min(bounds.size(), kMaxBounds)) {
  std::copy_n(bounds.begin(), n_bounds_, bounds_.begin());
}

void LatencyHistogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // NaN or a clock step backwards
  for (size_t i = 0; i < n_bounds_; ++i) {
    if (seconds <= bounds_[i]) {
      buckets_[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  // Past the last bound it counts only in +Inf, which is `count_`.
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::llround(std::min(seconds, 1e9) * 1e9)), std::memory_order_relaxed);
}

void render_metric_header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void LatencyHistogram::render(std::string& out, std::string_view name, std::string_view help,
                              std::string_view labels) const {
  render_metric_header(out, name, "histogram", help);
  const std::string sep = labels.empty() ? "" : fmt::format("{},", labels);
  const std::string own = labels.empty() ? "" : fmt::format("{{{}}}", labels);
  // Read the total first: observers add to a bucket before the count, so a bucket read
  // afterwards can only be ahead, and the cumulative lines are capped to keep +Inf largest.
  const uint64_t total = count_.load(std::memory_order_relaxed);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < n_bounds_; ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, sep, bounds_[i], std::min(cumulative, total));
  }
  out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, sep, total);
  out += fmt::format("{}_sum{} {:.6f}\n", name, own,
                     static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9);
  out += fmt::format("{}_count{} {}\n", name, own, total);
}

void render_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                   double value, std::string_view labels) {
  render_metric_header(out, name, type, help);
  out += fmt::format("{}{} {}\n", name, labels.empty() ? std::string() : fmt::format("{{{}}}", labels), value);
}

std::string metric_label(std::string_view label, std::string_view value) {
  std::string out = fmt::format("{}=\"", label);
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

void render_process_metrics(std::string& out) {
  // /proc/self/stat: utime (14), stime (15), starttime (22), vsize (23), rss (24), after
  // the parenthesised command name, which may itself hold spaces.
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  for (int i = 3; fields >> f; ++i) {
    if (i == 14) utime = std::stod(f);
    if (i == 15) stime = std::stod(f);
    if (i == 22) start_ticks = std::stod(f);
    if (i == 23) vsize = std::stod(f);
    if (i == 24) {
      rss_pages = std::stod(f);
      break;
    }
  }
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  // Boot time: now (wall) minus uptime.
  double boot = 0;
  if (std::ifstream up("/proc/uptime"); up) {
    double uptime = 0;
    up >> uptime;
    boot = static_cast<double>(std::time(nullptr)) - uptime;
  }
  size_t fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    ++fds;
  }
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  render_metric(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
                (utime + stime) / ticks);
  render_metric(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                rss_pages * static_cast<double>(::sysconf(_SC_PAGESIZE)));
  render_metric(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize);
  render_metric(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
                std::round(boot + start_ticks / ticks));
  render_metric(out, "process_open_fds", "gauge", "Number of open file descriptors.", static_cast<double>(fds));
  render_metric(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                static_cast<double>(limit.rlim_cur));
}

}  // namespace hearth
