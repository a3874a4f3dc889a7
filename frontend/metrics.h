#pragma once
// Prometheus metrics the frontend exposes: a fixed-bucket histogram that many threads
// may observe into without a lock, and the text exposition format.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth {

// Latencies in seconds, with buckets from 5 ms to 2 minutes (the spread between a short
// completion on a GPU and a long one on a loaded CPU).
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1.0,   2.5,  5.0,   10.0, 30.0, 60.0, 120.0};

  void observe(double seconds);

  // The `# HELP`/`# TYPE` lines, the cumulative `_bucket{le=...}` lines (with `+Inf`),
  // `_sum` and `_count`, appended to `out`.
  void render(std::string& out, std::string_view name, std::string_view help) const;

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size()> buckets_{};  // not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

// One `# HELP`, `# TYPE` and sample line of a counter or gauge.
void render_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                   uint64_t value);

}  // namespace hearth
