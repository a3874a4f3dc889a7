// What `hearth bench` reports of a load level: throughput, latency percentiles (time to
// first token, time per output token, inter-token latency, end to end) and errors by
// kind; as a Markdown table, as JSON (which --compare reads back), and as the panels
// of its plot. Pure functions of their input.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "common/status.h"
#include "tools/load_run.h"
#include "tools/png_plot.h"

namespace hearth::cli {

// Percentiles by linear interpolation between the two nearest ranks (numpy's default);
// all zero, with n = 0, for no samples.
struct Percentiles {
  size_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Percentiles percentiles(std::vector<double> samples);

struct LevelSummary {
  std::string kind = "users";  // "users" or "rate" (arrivals per second)
  double load = 0;
  double wall_s = 0;
  size_t requests = 0;   // ended, successfully or not
  size_t completed = 0;  // ended with [DONE]
  std::map<std::string, size_t> errors;  // failed requests by kind ("HTTP 429", "timeout", ...)
  std::string first_error;               // one failure's detail, to act on
  size_t dropped = 0;                    // open loop: arrivals over the client's in-flight cap
  size_t peak_in_flight = 0;
  double requests_per_s = 0;     // completed / wall
  double output_tokens_per_s = 0;  // completed requests' output tokens / wall
  double mean_prompt_tokens = -1;  // from usage; -1: the server sent none
  double mean_output_tokens = 0;
  double mean_cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens; -1: none sent
  // The server's speculative decoding over the level: drafted tokens kept / drafted
  // (its /metrics, read before and after); -1: it drafted none or reports none.
  double spec_acceptance = -1;
  Percentiles ttft_ms, tpot_ms, itl_ms, e2e_s;

  double error_ratio() const { return requests == 0 ? 0 : static_cast<double>(requests - completed) / requests; }
};

LevelSummary summarize(const LevelRun& run);

// A run's levels as a Markdown table: load, req/s, output tok/s, TTFT, TPOT and end to
// end p50/p90/p99, tokens in and out per request, errors (% and by kind).
std::string format_table(const std::vector<LevelSummary>& levels);

// Several runs (e.g. two servers) side by side at each load: one row per run and level.
struct NamedRun {
  std::string name;
  std::vector<LevelSummary> levels;
};
std::string format_comparison(const std::vector<NamedRun>& runs);

boost::json::object level_json(const LevelSummary& level);
// Reads back what level_json() wrote.
Result<LevelSummary> level_from_json(const boost::json::value& v);

// The plot: TTFT, TPOT and end-to-end latency (p50 solid, p99 dashed) and output tok/s,
// each against load, one colour per run.
std::vector<PlotPanel> load_panels(const std::vector<NamedRun>& runs);

}  // namespace hearth::cli
