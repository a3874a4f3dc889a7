#include "frontend/metrics.h"

#include <cmath>

#include <fmt/format.h>

namespace hearth {

void LatencyHistogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // NaN or a clock step backwards
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      buckets_[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  // Past the last bound it counts only in +Inf, which is `count_`.
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::llround(std::min(seconds, 1e9) * 1e9)), std::memory_order_relaxed);
}

void LatencyHistogram::render(std::string& out, std::string_view name, std::string_view help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  // Read the total first: observers add to a bucket before the count, so a bucket read
  // afterwards can only be ahead, and the cumulative lines are capped to keep +Inf largest.
  const uint64_t total = count_.load(std::memory_order_relaxed);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], std::min(cumulative, total));
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, total);
  out += fmt::format("{}_sum {:.6f}\n", name, static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9);
  out += fmt::format("{}_count {}\n", name, total);
}

void render_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                   uint64_t value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace hearth
