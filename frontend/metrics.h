#pragma once
// Prometheus metrics the frontend exposes: a fixed-bucket histogram that many threads
// may observe into without a lock, the text exposition format, and the process_*
// metrics every Prometheus client library exports.

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace hearth {

// Bucket bounds in seconds. Request latencies: 5 ms to 2 minutes (a short completion on a
// GPU to a long one on a loaded CPU). Token latencies: 1 ms to 10 s (a GPU decode step to
// a CPU step under a full batch of long prefills).
inline constexpr std::array<double, 14> kRequestLatencyBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                                 1.0,   2.5,  5.0,   10.0, 30.0, 60.0, 120.0};
inline constexpr std::array<double, 16> kTokenLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05,
                                                               0.075, 0.1,    0.2,   0.3,  0.5,   1.0,  2.5,  10.0};

class LatencyHistogram {
 public:
  static constexpr size_t kMaxBounds = 24;
  explicit LatencyHistogram(std::span<const double> bounds = kRequestLatencyBounds);

  void observe(double seconds);

  // The `# HELP`/`# TYPE` lines, the cumulative `_bucket{le=...}` lines (with `+Inf`),
  // `_sum` and `_count`, appended to `out`; `labels` (`model_name="x"`, or empty) go on
  // every sample.
  void render(std::string& out, std::string_view name, std::string_view help, std::string_view labels = {}) const;

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::array<double, kMaxBounds> bounds_{};
  size_t n_bounds_ = 0;
  std::array<std::atomic<uint64_t>, kMaxBounds> buckets_{};  // not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

// The `# HELP` and `# TYPE` lines of a family, whose samples the caller writes.
void render_metric_header(std::string& out, std::string_view name, std::string_view type, std::string_view help);

// One `# HELP`, `# TYPE` and sample line of a counter or gauge; `labels` as above.
void render_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                   double value, std::string_view labels = {});

// `label="value"` with the value escaped as the exposition format wants.
std::string metric_label(std::string_view label, std::string_view value);

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds and process_max_fds of this process, from /proc.
void render_process_metrics(std::string& out);

}  // namespace hearth
