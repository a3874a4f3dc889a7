// `hearth bench`: a load generator for any OpenAI-compatible server (hearth, vLLM,
// llama-server). Closed-loop users or open-loop Poisson arrivals, level after level;
// streaming requests timed per token; a table per run, JSON, and a PNG plot.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "common/args.h"
#include "common/mapped_file.h"
#include "common/version.h"
#include "loader/model.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/load_report.h"
#include "tools/load_run.h"
#include "tools/load_workload.h"
#include "tools/png_plot.h"

namespace hearth::cli {
namespace {

namespace json = boost::json;

constexpr const char* kUsage = R"(usage: hearth bench [--url URL] [--users N,N,...| --rate R,R,...] [options]
       hearth bench --compare RUN.json RUN.json ... [--plot FILE]

Loads an OpenAI-compatible server (hearth, vLLM, llama-server) level after level and
reports, per level: requests and output tokens per second, time to first token (TTFT),
time per output token after the first (TPOT), inter-token latency (ITL), end-to-end
latency (p50/p90/p99), tokens in and out, and failed requests by kind (HTTP status,
connect, timeout, reset, truncated stream). Every request streams.

load:
  --url URL               the server's API root (default http://127.0.0.1:8080/v1)
  --users N,N,...         closed loop: N users, each sending its next request as soon as
                          the last one ended (default 1,4,16,64)
  --rate R,R,...          open loop: Poisson arrivals at R requests per second
  --duration SECONDS      requests start within this time per level (default 20); the
                          level then waits for every started request to end
  --timeout SECONDS       per request, connect to last token (default 300)
  --max-in-flight N       open loop: arrivals while N requests run are not sent, and
                          counted (default 4096)
  --threads N             client threads (default 1: many connections each)

requests:
  --model NAME            the "model" field (default: the first of GET /v1/models)
  --api completions|chat  POST /v1/completions with a prompt (default), or
                          /v1/chat/completions with one user message
  --input-tokens N        synthetic prompt length (default 64)
  --output-tokens N       max_tokens (default 32)
  --shared-prefix RATIO   the share of each synthetic prompt that is the same for every
                          request (0 to 1, default 0): a system prompt, as prefix caches see it
  --num-prompts N         distinct synthetic prompts, used in turn (default 1000)
  --tokenizer PATH        count synthetic prompt tokens exactly with this tokenizer (a
                          GGUF model, tokenizer.json, .model, ...); without it, a word is
                          taken as a token and the table shows what the server counted
  --prompts FILE          prompts from a file instead: one per line, either plain text or
                          JSON ({"prompt": ...} or {"messages": [...]}, optional "max_tokens")
  --ignore-eos            ask for exactly --output-tokens tokens ("ignore_eos": true;
                          hearth, vLLM and llama-server honour it)
  --temperature T         sent as given (default: not sent, the server's default)
  --extra-body JSON       a JSON object whose fields are added to every request (e.g.
                          '{"logit_bias": {"13": -100}}'), replacing those hearth bench sets
  --api-key KEY           sent as "Authorization: Bearer KEY"
  --seed N                synthetic prompts and arrival times (default 1)

output:
  --name NAME             the run's name in JSON, comparisons and plots (default: the model)
  --json FILE             write the run (settings and every level) as JSON
  --plot FILE.png         plot latency and throughput against load
  --compare FILES         read runs written by --json and show them side by side
  --strict                exit 1 when any request failed
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth bench: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

int fail(const Status& status) {
  std::fprintf(stderr, "hearth bench: %s\n", status.to_string().c_str());
  return 1;
}

// "1,4,16" as positive numbers; whole numbers only when `whole`.
Result<std::vector<double>> number_list(const std::string& flag, const std::string& text, bool whole) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v > 0) || !std::isfinite(v) ||
        (whole && (v != std::floor(v) || v > 100000))) {
      return make_error(ErrorCode::kInvalidArgument, "--{}: \"{}\" is not a {} number", flag, item,
                        whole ? "positive whole" : "positive");
    }
    out.push_back(v);
  }
  if (out.empty()) return make_error(ErrorCode::kInvalidArgument, "--{} needs at least one value", flag);
  return out;
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::filesystem::path& path) {
  if (path.extension() == ".gguf") {
    HEARTH_ASSIGN_OR_RETURN(LoadedModel model, model_open(path, {}));
    return tokenizer_load(model.tokenizer);
  }
  HEARTH_ASSIGN_OR_RETURN(TokenizerSource source, tokenizer_source_from_path(path));
  return tokenizer_load(source);
}

// The first model GET /v1/models lists.
Result<std::string> served_model(const Endpoint& endpoint) {
  HEARTH_ASSIGN_OR_RETURN(HttpReply reply, http_get(endpoint, endpoint.prefix + "/models", std::chrono::seconds(10)));
  if (reply.status != 200) {
    return make_error(ErrorCode::kUnavailable, "GET {}/models answered {}: {}", endpoint.prefix, reply.status,
                      reply.body.substr(0, 200));
  }
  boost::system::error_code ec;
  const json::value v = json::parse(reply.body, ec);
  const json::value* data = !ec && v.is_object() ? v.as_object().if_contains("data") : nullptr;
  if (data != nullptr && data->is_array() && !data->as_array().empty() && data->as_array()[0].is_object()) {
    const json::value* id = data->as_array()[0].as_object().if_contains("id");
    if (id != nullptr && id->is_string()) return std::string(id->as_string());
  }
  return make_error(ErrorCode::kUnavailable, "GET {}/models lists no model; give --model", endpoint.prefix);
}

Result<std::vector<NamedRun>> read_runs(const std::vector<std::string>& paths) {
  std::vector<NamedRun> runs;
  for (const std::string& path : paths) {
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_small_file(path, size_t{64} << 20));
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    if (ec || !v.is_object()) return make_error(ErrorCode::kFormat, "{}: not a JSON object ({})", path, ec.message());
    const json::object& o = v.as_object();
    NamedRun run;
    const json::value* name = o.if_contains("name");
    const json::value* levels = o.if_contains("levels");
    if (name == nullptr || !name->is_string() || levels == nullptr || !levels->is_array()) {
      return make_error(ErrorCode::kFormat, "{}: not a run written by hearth bench --json (no name or levels)", path);
    }
    run.name = std::string(name->as_string());
    for (const json::value& l : levels->as_array()) {
      auto level = level_from_json(l);
      if (!level.is_ok()) return level.status().with_context(path);
      run.levels.push_back(std::move(level).value());
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return make_error(ErrorCode::kIo, "cannot write {}", path);
  return Status::ok();
}

Status write_plot(const std::string& path, const std::string& title, const std::vector<NamedRun>& runs) {
  return write_png(path, plot_panels(title, load_panels(runs)));
}

int compare_command(const Args& args) {
  auto runs = read_runs(args.positionals());
  if (!runs.is_ok()) return fail(runs.status());
  // Side by side means the same axis: users against users, rate against rate; and a
  // column per run, so two runs may not share a name.
  std::set<std::string> names;
  for (const NamedRun& run : *runs) {
    if (!names.insert(run.name).second) {
      return fail(make_error(ErrorCode::kInvalidArgument,
                             "two runs are named \"{}\": give each run its own --name when you run it", run.name));
    }
    for (const LevelSummary& level : run.levels) {
      const std::string& first = runs->front().levels.empty() ? level.kind : runs->front().levels.front().kind;
      if (level.kind != first) {
        return fail(make_error(ErrorCode::kInvalidArgument,
                               "run \"{}\" has {} levels and run \"{}\" {} levels: compare closed-loop runs "
                               "(--users) with each other and open-loop runs (--rate) with each other",
                               runs->front().name, first, run.name, level.kind));
      }
    }
  }
  std::fputs(format_comparison(*runs).c_str(), stdout);
  if (auto plot = args.get("plot")) {
    std::string title = "hearth bench: ";
    for (size_t i = 0; i < runs->size(); ++i) title += (i > 0 ? " vs " : "") + (*runs)[i].name;
    if (Status s = write_plot(*plot, title, *runs); !s.is_ok()) return fail(s);
  }
  return 0;
}

// The server's speculative-decoding counts from its /metrics: tokens drafted and kept;
// none where it reports none (another server, or /metrics wants a key the run lacks).
std::optional<std::pair<double, double>> spec_counts(const Endpoint& endpoint) {
  auto reply = http_get(endpoint, "/metrics", std::chrono::seconds(5));
  if (!reply.is_ok() || reply->status != 200) return std::nullopt;
  double drafted = -1, kept = -1;
  std::istringstream lines(reply->body);
  for (std::string line; std::getline(lines, line);) {
    double* target = line.starts_with("hearth_spec_decode_num_draft_tokens_total")      ? &drafted
                     : line.starts_with("hearth_spec_decode_num_accepted_tokens_total") ? &kept
                                                                                        : nullptr;
    if (target == nullptr) continue;
    const size_t space = line.rfind(' ');
    if (space != std::string::npos) *target = std::strtod(line.c_str() + space + 1, nullptr);
  }
  if (drafted < 0 || kept < 0) return std::nullopt;
  return std::pair{drafted, kept};
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  auto args = Args::parse(argv,
                          {"url", "users", "rate", "duration", "timeout", "max-in-flight", "threads", "model", "api",
                           "input-tokens", "output-tokens", "shared-prefix", "num-prompts", "tokenizer", "prompts",
                           "temperature", "extra-body", "api-key", "seed", "name", "json", "plot"},
                          {"help", "ignore-eos", "compare", "strict"}, true);
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  // A flag the chosen mode does not use is refused, never silently dropped.
  auto refuse_with = [&](const char* mode, std::initializer_list<const char*> flags) -> std::optional<int> {
    for (const char* f : flags) {
      if (args->has(f)) return usage_error(fmt::format("--{} has no effect with {}", f, mode));
    }
    return std::nullopt;
  };
  if (args->has("compare")) {
    if (auto refused = refuse_with("--compare (it reads finished runs)",
                                   {"url", "users", "rate", "duration", "timeout", "max-in-flight", "threads", "model",
                                    "api", "input-tokens", "output-tokens", "shared-prefix", "num-prompts", "tokenizer",
                                    "prompts", "temperature", "extra-body", "api-key", "seed", "name", "json",
                                    "ignore-eos", "strict"})) {
      return *refused;
    }
    if (args->positionals().empty()) return usage_error("--compare needs the JSON files of runs");
    return compare_command(*args);
  }
  if (!args->positionals().empty()) return usage_error("unexpected argument \"" + args->positionals().front() + "\"");
  if (args->has("users") && args->has("rate")) return usage_error("give --users or --rate, not both");
  if (!args->has("rate")) {
    if (auto refused = refuse_with("closed-loop users (it caps open-loop --rate arrivals)", {"max-in-flight"})) {
      return *refused;
    }
  }
  if (args->has("prompts")) {
    if (auto refused = refuse_with("--prompts (they shape synthetic prompts)",
                                   {"input-tokens", "shared-prefix", "num-prompts", "tokenizer"})) {
      return *refused;
    }
  }

  auto endpoint = parse_endpoint(args->get("url").value_or("http://127.0.0.1:8080/v1"));
  if (!endpoint.is_ok()) return usage_error(endpoint.status().message());
  if (auto key = args->get("api-key")) endpoint->headers["Authorization"] = "Bearer " + *key;

  std::vector<LoadLevel> levels;
  {
    const bool rate = args->has("rate");
    auto values = number_list(rate ? "rate" : "users", args->get(rate ? "rate" : "users").value_or("1,4,16,64"), !rate);
    if (!values.is_ok()) return usage_error(values.status().message());
    for (double v : *values) levels.push_back({rate ? LoadLevel::Kind::kRate : LoadLevel::Kind::kUsers, v});
  }
  auto duration = args->get_double("duration");
  auto timeout = args->get_double("timeout");
  auto temperature = args->get_double("temperature");
  auto shared = args->get_double("shared-prefix");
  auto max_in_flight = args->get_int("max-in-flight", 1, 1 << 20);
  auto threads = args->get_int("threads", 1, 256);
  auto input_tokens = args->get_int("input-tokens", 1, 1 << 20);
  auto output_tokens = args->get_int("output-tokens", 1, 1 << 20);
  auto num_prompts = args->get_int("num-prompts", 1, 1 << 20);
  auto seed = args->get_int("seed", 0, INT64_MAX);
  for (const auto* d : {&duration, &timeout, &temperature, &shared}) {
    if (!d->is_ok()) return usage_error(d->status().message());
  }
  for (const auto* i : {&max_in_flight, &threads, &input_tokens, &output_tokens, &num_prompts, &seed}) {
    if (!i->is_ok()) return usage_error(i->status().message());
  }
  if (duration->value_or(20) <= 0 || duration->value_or(20) > 86400) return usage_error("--duration: from 0 to 86400 seconds");
  if (timeout->value_or(300) <= 0 || timeout->value_or(300) > 86400) return usage_error("--timeout: from 0 to 86400 seconds");
  if (shared->value_or(0) < 0 || shared->value_or(0) > 1) return usage_error("--shared-prefix: a ratio from 0 to 1");
  const std::string api = args->get("api").value_or("completions");
  if (api != "completions" && api != "chat") return usage_error("--api: completions or chat");

  WorkloadSpec spec;
  spec.chat = api == "chat";
  spec.input_tokens = static_cast<int>(input_tokens->value_or(64));
  spec.output_tokens = static_cast<int>(output_tokens->value_or(32));
  spec.shared_prefix = shared->value_or(0);
  spec.num_prompts = static_cast<int>(num_prompts->value_or(1000));
  spec.ignore_eos = args->has("ignore-eos");
  spec.temperature = *temperature;
  spec.seed = static_cast<uint64_t>(seed->value_or(1));
  if (auto extra = args->get("extra-body")) {
    boost::system::error_code ec;
    json::value v = json::parse(*extra, ec);
    if (ec || !v.is_object()) return usage_error("--extra-body: not a JSON object");
    if (v.as_object().contains("stream")) return usage_error("--extra-body: \"stream\" is not yours to set: every request streams");
    spec.extra = std::move(v.as_object());
  }

  if (Status s = resolve_endpoint(*endpoint); !s.is_ok()) return fail(s);
  if (auto model = args->get("model")) {
    spec.model = *model;
  } else {
    auto served = served_model(*endpoint);
    if (!served.is_ok()) return fail(served.status());
    spec.model = *served;
  }

  std::unique_ptr<Tokenizer> tokenizer;
  if (auto path = args->get("tokenizer")) {
    auto t = load_tokenizer(*path);
    if (!t.is_ok()) return fail(t.status().with_context("--tokenizer"));
    tokenizer = std::move(t).value();
  }
  Workload workload;
  workload.target = endpoint->prefix + (spec.chat ? "/chat/completions" : "/completions");
  if (auto file = args->get("prompts")) {
    auto text = read_small_file(*file, size_t{1} << 30);
    if (!text.is_ok()) return fail(text.status().with_context("--prompts"));
    auto bodies = bodies_from_prompts(spec, *text);
    if (!bodies.is_ok()) return fail(bodies.status().with_context(*file));
    workload.bodies = std::move(bodies).value();
  } else {
    auto bodies = synthetic_bodies(spec, tokenizer.get());
    if (!bodies.is_ok()) return fail(bodies.status());
    workload.bodies = std::move(bodies).value();
  }

  LoadOptions options;
  options.duration = std::chrono::milliseconds(std::llround(duration->value_or(20) * 1e3));
  options.timeout = std::chrono::milliseconds(std::llround(timeout->value_or(300) * 1e3));
  options.threads = static_cast<int>(threads->value_or(1));
  options.seed = spec.seed;
  options.max_in_flight = static_cast<size_t>(max_in_flight->value_or(4096));
  const std::string name = args->get("name").value_or(spec.model);

  std::fprintf(stderr, "hearth bench: %s at %s, %s, %zu levels of %.0f s\n", name.c_str(),
               args->get("url").value_or("http://127.0.0.1:8080/v1").c_str(), describe(spec, args->has("prompts")).c_str(),
               levels.size(), duration->value_or(20));
  std::vector<LevelSummary> summaries;
  for (const LoadLevel& level : levels) {
    const auto spec_before = spec_counts(*endpoint);
    const LevelRun run = run_level(*endpoint, workload, level, options);
    summaries.push_back(summarize(run));
    LevelSummary& s = summaries.back();
    const auto spec_after = spec_before ? spec_counts(*endpoint) : std::nullopt;
    if (spec_after && spec_after->first > spec_before->first) {
      s.spec_acceptance = (spec_after->second - spec_before->second) / (spec_after->first - spec_before->first);
    }
    std::fprintf(stderr, "  %s %g: %zu requests in %.1f s, %.2f req/s, TTFT p50 %.0f ms, %.1f%% failed%s%s%s\n",
                 s.kind.c_str(), s.load, s.requests, s.wall_s, s.requests_per_s, s.ttft_ms.p50, 100 * s.error_ratio(),
                 s.spec_acceptance < 0 ? "" : fmt::format(", speculation kept {:.1f}% of drafts", 100 * s.spec_acceptance).c_str(),
                 s.first_error.empty() ? "" : " (first: ", s.first_error.empty() ? "" : (s.first_error + ")").c_str());
  }
  std::fputs(format_table(summaries).c_str(), stdout);

  if (auto path = args->get("json")) {
    json::array levels_json;
    for (const LevelSummary& s : summaries) levels_json.push_back(level_json(s));
    json::object out{{"tool", version_line("hearth bench")},
                     {"name", name},
                     {"url", args->get("url").value_or("http://127.0.0.1:8080/v1")},
                     {"workload", workload_json(spec, args->get("prompts").value_or(""))},
                     {"duration_s", duration->value_or(20)},
                     {"levels", std::move(levels_json)}};
    if (Status s = write_text(*path, json::serialize(out) + "\n"); !s.is_ok()) return fail(s);
  }
  if (auto path = args->get("plot")) {
    if (Status s = write_plot(*path, "hearth bench: " + name, {NamedRun{name, summaries}}); !s.is_ok()) return fail(s);
  }
  if (args->has("strict")) {
    for (const LevelSummary& s : summaries) {
      if (s.completed != s.requests || s.dropped > 0) return 1;
    }
  }
  return 0;
}

}  // namespace hearth::cli
