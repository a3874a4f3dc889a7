#include "tools/load_report.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace hearth::cli {

namespace json = boost::json;

Percentiles percentiles(std::vector<double> samples) {
  Percentiles p;
  p.n = samples.size();
  if (samples.empty()) return p;
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    const double rank = q * static_cast<double>(samples.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (samples[hi] - samples[lo]) * (rank - static_cast<double>(lo));
  };
  p.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.max = samples.back();
  return p;
}

LevelSummary summarize(const LevelRun& run) {
  LevelSummary s;
  s.kind = run.level.kind == LoadLevel::Kind::kUsers ? "users" : "rate";
  s.load = run.level.value;
  s.wall_s = run.wall_s;
  s.requests = run.records.size();
  s.dropped = run.dropped;
  s.peak_in_flight = run.peak_in_flight;
  std::vector<double> ttft, tpot, itl, e2e;
  double prompt = 0, output = 0, cached = 0;
  size_t with_prompt = 0, with_cached = 0;
  for (const RequestRecord& r : run.records) {
    if (!r.ok()) {
      ++s.errors[r.error];
      if (s.first_error.empty()) s.first_error = r.error + ": " + r.error_detail;
      continue;
    }
    ++s.completed;
    e2e.push_back(r.end_s);
    if (r.first_token_s >= 0) {
      ttft.push_back(r.first_token_s * 1e3);
      if (r.output_tokens > 1) tpot.push_back((r.end_s - r.first_token_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
    }
    for (double g : r.token_gaps_s) itl.push_back(g * 1e3);
    output += static_cast<double>(r.output_tokens);
    if (r.prompt_tokens >= 0) {
      prompt += static_cast<double>(r.prompt_tokens);
      ++with_prompt;
    }
    if (r.cached_tokens >= 0) {
      cached += static_cast<double>(r.cached_tokens);
      ++with_cached;
    }
  }
  if (s.wall_s > 0) {
    s.requests_per_s = static_cast<double>(s.completed) / s.wall_s;
    s.output_tokens_per_s = output / s.wall_s;
  }
  if (s.completed > 0) s.mean_output_tokens = output / static_cast<double>(s.completed);
  if (with_prompt > 0) s.mean_prompt_tokens = prompt / static_cast<double>(with_prompt);
  if (with_cached > 0) s.mean_cached_tokens = cached / static_cast<double>(with_cached);
  s.ttft_ms = percentiles(std::move(ttft));
  s.tpot_ms = percentiles(std::move(tpot));
  s.itl_ms = percentiles(std::move(itl));
  s.e2e_s = percentiles(std::move(e2e));
  return s;
}

namespace {

std::string three(const Percentiles& p, int decimals) {
  if (p.n == 0) return "-";
  return fmt::format("{:.{}f} / {:.{}f} / {:.{}f}", p.p50, decimals, p.p90, decimals, p.p99, decimals);
}

std::string load_cell(const LevelSummary& l) { return fmt::format("{:g}", l.load); }

std::string errors_cell(const LevelSummary& l) {
  std::string cell = fmt::format("{:.1f}%", 100.0 * l.error_ratio());
  std::string kinds;
  for (const auto& [kind, n] : l.errors) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, kind);
  if (l.dropped > 0) kinds += fmt::format("{}{} not sent (client cap)", kinds.empty() ? "" : ", ", l.dropped);
  return kinds.empty() ? cell : cell + " (" + kinds + ")";
}

std::string tokens_cell(const LevelSummary& l) {
  std::string in = l.mean_prompt_tokens < 0 ? "?" : fmt::format("{:.0f}", l.mean_prompt_tokens);
  if (l.mean_cached_tokens > 0) in += fmt::format(" ({:.0f} cached)", l.mean_cached_tokens);
  return fmt::format("{} / {:.0f}", in, l.mean_output_tokens);
}

// Rows of cells as a Markdown table with aligned columns.
std::string markdown(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    out += "|";
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < rows[r].size() ? rows[r][i] : "";
      out += " " + cell + std::string(width[i] - cell.size(), ' ') + " |";
    }
    out += "\n";
    if (r == 0) {
      out += "|";
      for (size_t w : width) out += " " + std::string(w, '-') + " |";
      out += "\n";
    }
  }
  return out;
}

std::vector<std::string> header(const std::string& kind, bool named) {
  std::vector<std::string> h;
  if (named) h.push_back("server");
  h.insert(h.end(), {kind == "rate" ? "rate (req/s)" : "users", "req/s", "out tok/s", "TTFT p50/p90/p99 ms",
                     "TPOT p50/p90/p99 ms", "ITL p99 ms", "E2E p50/p90/p99 s", "tokens in / out", "errors"});
  return h;
}

std::vector<std::string> row(const LevelSummary& l, const std::string* name) {
  std::vector<std::string> r;
  if (name != nullptr) r.push_back(*name);
  r.insert(r.end(), {load_cell(l), fmt::format("{:.2f}", l.requests_per_s), fmt::format("{:.1f}", l.output_tokens_per_s),
                     three(l.ttft_ms, 0), three(l.tpot_ms, 1), l.itl_ms.n == 0 ? "-" : fmt::format("{:.1f}", l.itl_ms.p99),
                     three(l.e2e_s, 2), tokens_cell(l), errors_cell(l)});
  return r;
}

json::object percentiles_json(const Percentiles& p) {
  return {{"n", p.n}, {"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}};
}

Result<Percentiles> percentiles_from_json(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_object()) return make_error(ErrorCode::kFormat, "\"{}\" is missing or not an object", key);
  Percentiles p;
  try {
    const json::object& q = v->as_object();
    p.n = json::value_to<size_t>(q.at("n"));
    p.mean = q.at("mean").to_number<double>();
    p.p50 = q.at("p50").to_number<double>();
    p.p90 = q.at("p90").to_number<double>();
    p.p99 = q.at("p99").to_number<double>();
    p.max = q.at("max").to_number<double>();
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kFormat, "\"{}\": {}", key, e.what());
  }
  return p;
}

}  // namespace

std::string format_table(const std::vector<LevelSummary>& levels) {
  std::vector<std::vector<std::string>> rows{header(levels.empty() ? "users" : levels.front().kind, false)};
  for (const LevelSummary& l : levels) rows.push_back(row(l, nullptr));
  return markdown(rows);
}

std::string format_comparison(const std::vector<NamedRun>& runs) {
  std::string kind = "users";
  std::vector<double> loads;
  for (const NamedRun& run : runs) {
    for (const LevelSummary& l : run.levels) {
      kind = l.kind;
      if (std::find(loads.begin(), loads.end(), l.load) == loads.end()) loads.push_back(l.load);
    }
  }
  std::sort(loads.begin(), loads.end());
  std::vector<std::vector<std::string>> rows{header(kind, true)};
  for (double load : loads) {
    for (const NamedRun& run : runs) {
      for (const LevelSummary& l : run.levels) {
        if (l.load == load) rows.push_back(row(l, &run.name));
      }
    }
  }
  return markdown(rows);
}

json::object level_json(const LevelSummary& l) {
  json::object errors;
  for (const auto& [kind, n] : l.errors) errors[kind] = n;
  return {{"kind", l.kind},
          {"load", l.load},
          {"wall_s", l.wall_s},
          {"requests", l.requests},
          {"completed", l.completed},
          {"errors", std::move(errors)},
          {"error_ratio", l.error_ratio()},
          {"first_error", l.first_error},
          {"dropped", l.dropped},
          {"peak_in_flight", l.peak_in_flight},
          {"requests_per_s", l.requests_per_s},
          {"output_tokens_per_s", l.output_tokens_per_s},
          {"mean_prompt_tokens", l.mean_prompt_tokens},
          {"mean_output_tokens", l.mean_output_tokens},
          {"mean_cached_tokens", l.mean_cached_tokens},
          {"spec_acceptance", l.spec_acceptance},
          {"ttft_ms", percentiles_json(l.ttft_ms)},
          {"tpot_ms", percentiles_json(l.tpot_ms)},
          {"itl_ms", percentiles_json(l.itl_ms)},
          {"e2e_s", percentiles_json(l.e2e_s)}};
}

Result<LevelSummary> level_from_json(const json::value& v) {
  if (!v.is_object()) return make_error(ErrorCode::kFormat, "a level is not a JSON object");
  const json::object& o = v.as_object();
  LevelSummary l;
  try {
    l.kind = json::value_to<std::string>(o.at("kind"));
    if (l.kind != "users" && l.kind != "rate") return make_error(ErrorCode::kFormat, "\"kind\" is \"{}\"", l.kind);
    l.load = o.at("load").to_number<double>();
    l.wall_s = o.at("wall_s").to_number<double>();
    l.requests = json::value_to<size_t>(o.at("requests"));
    l.completed = json::value_to<size_t>(o.at("completed"));
    for (const auto& [kind, n] : o.at("errors").as_object()) l.errors[std::string(kind)] = json::value_to<size_t>(n);
    l.first_error = json::value_to<std::string>(o.at("first_error"));
    l.dropped = json::value_to<size_t>(o.at("dropped"));
    l.peak_in_flight = json::value_to<size_t>(o.at("peak_in_flight"));
    l.requests_per_s = o.at("requests_per_s").to_number<double>();
    l.output_tokens_per_s = o.at("output_tokens_per_s").to_number<double>();
    l.mean_prompt_tokens = o.at("mean_prompt_tokens").to_number<double>();
    l.mean_output_tokens = o.at("mean_output_tokens").to_number<double>();
    l.mean_cached_tokens = o.at("mean_cached_tokens").to_number<double>();
    if (const auto* a = o.if_contains("spec_acceptance")) l.spec_acceptance = a->to_number<double>();  // newer files
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kFormat, "a level: {}", e.what());
  }
  HEARTH_ASSIGN_OR_RETURN(l.ttft_ms, percentiles_from_json(o, "ttft_ms"));
  HEARTH_ASSIGN_OR_RETURN(l.tpot_ms, percentiles_from_json(o, "tpot_ms"));
  HEARTH_ASSIGN_OR_RETURN(l.itl_ms, percentiles_from_json(o, "itl_ms"));
  HEARTH_ASSIGN_OR_RETURN(l.e2e_s, percentiles_from_json(o, "e2e_s"));
  return l;
}

std::vector<PlotPanel> load_panels(const std::vector<NamedRun>& runs) {
  const bool rate = !runs.empty() && !runs.front().levels.empty() && runs.front().levels.front().kind == "rate";
  const std::string x_label = rate ? "arrivals per second" : "concurrent users";
  PlotPanel ttft{"time to first token, ms (p50 solid, p99 dashed)", x_label, true, {}};
  PlotPanel tpot{"time per output token, ms (p50 solid, p99 dashed)", x_label, true, {}};
  PlotPanel e2e{"end-to-end latency, s (p50 solid, p99 dashed)", x_label, true, {}};
  PlotPanel throughput{"output tokens per second", x_label, true, {}};
  for (size_t i = 0; i < runs.size(); ++i) {
    const int colour = static_cast<int>(i);
    auto series = [&](const std::string& suffix, bool dashed, auto value) {
      PlotSeries s{runs[i].name + suffix, {}, {}, colour, dashed};
      for (const LevelSummary& l : runs[i].levels) {
        s.x.push_back(l.load);
        s.y.push_back(value(l));
      }
      return s;
    };
    auto or_none = [](const Percentiles& p, double v) { return p.n == 0 ? -1.0 : v; };
    ttft.series.push_back(series(" p50", false, [&](const LevelSummary& l) { return or_none(l.ttft_ms, l.ttft_ms.p50); }));
    ttft.series.push_back(series(" p99", true, [&](const LevelSummary& l) { return or_none(l.ttft_ms, l.ttft_ms.p99); }));
    tpot.series.push_back(series(" p50", false, [&](const LevelSummary& l) { return or_none(l.tpot_ms, l.tpot_ms.p50); }));
    tpot.series.push_back(series(" p99", true, [&](const LevelSummary& l) { return or_none(l.tpot_ms, l.tpot_ms.p99); }));
    e2e.series.push_back(series(" p50", false, [&](const LevelSummary& l) { return or_none(l.e2e_s, l.e2e_s.p50); }));
    e2e.series.push_back(series(" p99", true, [&](const LevelSummary& l) { return or_none(l.e2e_s, l.e2e_s.p99); }));
    throughput.series.push_back(series(" p50", false, [](const LevelSummary& l) { return l.output_tokens_per_s; }));
  }
  return {ttft, tpot, e2e, throughput};
}

}  // namespace hearth::cli
