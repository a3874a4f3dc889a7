// kv_adopt_bench: what an engine crash costs a stream, with the resident KV cache adopted
// and without (--no-kv-adopt: the restarted engine computes every resumed request again).
// For each context length, `hearth serve` runs N streams whose prompts are that many
// distinct tokens; once every stream is decoding, the engine is SIGKILLed (serve starts
// another). Prints, per context and mode, the time from the kill to each stream's next
// token (median and max over the streams), the ratio between the modes, and how many
// streams ended with the same text both ways. With --tp 2 the engine is a group of two
// ranks (--threads each), both killed.
//
//   kv_adopt_bench [--model GGUF] [--streams 4] [--contexts 500,2000] [--threads 2] [--tp 1]
//
// Without --model it writes the 1B synthetic Llama as Q4_0 (`hearth synth --preset 1b`).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "common/args.h"
#include "common/process.h"
#include "common/subprocess.h"
#include "kernels/cpu/isa.h"
#include "tests/integration/http_client.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace json = boost::json;

using hearth::bench::bin;

// One stream: when each piece of its response arrived.
struct Stream {
  std::mutex mu;
  std::vector<Clock::time_point> arrivals;  // guarded by mu
  std::string body;
  std::string error;
  int status = 0;
  bool done = false;  // the response has ended
};

struct Result {
  double median_ms = -1, max_ms = -1;
  bool ok = true;
  std::vector<std::string> texts;  // each stream's text, for comparing the modes
};

// The text of an event stream of completion chunks.
std::string stream_text(const std::string& body) {
  std::string text;
  for (size_t at = body.find("data: "); at != std::string::npos; at = body.find("data: ", at + 6)) {
    const size_t end = body.find('\n', at);
    const std::string data = body.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
    if (data.starts_with("[DONE]")) break;
    boost::system::error_code ec;
    const json::value v = json::parse(data, ec);
    if (ec || !v.is_object() || !v.as_object().contains("choices")) continue;
    for (const json::value& c : v.at("choices").as_array()) {
      if (c.as_object().contains("text")) text += std::string(c.at("text").as_string());
    }
  }
  return text;
}

Result run_case(const std::string& model, int streams, int context, int threads, int tp, bool adopt) {
  const std::string shm = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  // Long enough that the first stream still decodes when the last one (whose prefill
  // waits behind every other's, 512 tokens a step by default) is a dozen tokens in:
  // twice that many steps, and 64.
  const int max_tokens = 64 + streams * context / 256;
  const int ctx = context + max_tokens + 16;
  const int blocks = streams * ((ctx + 15) / 16) + 16;
  std::vector<std::string> argv = {bin("hearth"), "serve", "--model", model, "--port", "0", "--instance",
                                   "bench-kv-adopt", "--shm-dir", shm, "--ctx", std::to_string(ctx), "--slots",
                                   std::to_string(streams * 2), "--kv-blocks", std::to_string(blocks), "--threads",
                                   std::to_string(threads), "--engine-wait", "3600000", "--remove-on-exit",
                                   "--tp", std::to_string(tp)};
  if (!adopt) argv.push_back("--no-kv-adopt");
  hearth::ChildProcess serve(argv);
  const auto line = serve.read_line(300s);
  if (!line) {
    std::fprintf(stderr, "kv_adopt_bench: hearth serve did not start: %s\n", serve.err().c_str());
    return {.ok = false};
  }
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));

  std::vector<Stream> s(static_cast<size_t>(streams));
  std::vector<std::thread> clients;
  std::mt19937 rng(static_cast<uint32_t>(context));
  std::uniform_int_distribution<int> id(300, 8000);
  for (int i = 0; i < streams; ++i) {
    json::array prompt;
    prompt.push_back(1);
    for (int t = 1; t < context; ++t) prompt.push_back(id(rng));
    const json::object body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
                               {"ignore_eos", true}, {"stream", true}};
    clients.emplace_back([port, body, &st = s[static_cast<size_t>(i)]] {
      size_t seen = 0;
      const auto res = hearth::testing::http_request_streamed(
          port, "/v1/completions", json::serialize(body),
          [&](const std::string& raw) {
            if (raw.size() == seen) return;
            seen = raw.size();
            std::lock_guard lock(st.mu);
            st.arrivals.push_back(Clock::now());
          },
          std::chrono::seconds(3600));  // the last prompts wait for every other prefill
      std::lock_guard lock(st.mu);
      st.status = res.status;
      st.body = res.body;
      st.error = res.error;
      st.done = true;
    });
  }
  // Every stream decoding: a dozen pieces in. A stream that ended before is a failed run
  // (the kill would find it finished), said at once rather than waited on.
  std::string ended;
  for (const auto deadline = Clock::now() + 3600s; Clock::now() < deadline; std::this_thread::sleep_for(5ms)) {
    bool all = true;
    for (size_t i = 0; i < s.size() && ended.empty(); ++i) {
      std::lock_guard lock(s[i].mu);
      all = all && s[i].arrivals.size() >= 12;
      if (s[i].done) {
        ended = fmt::format("stream {} ended before the kill (HTTP {}{}{}): {}", i, s[i].status,
                            s[i].error.empty() ? "" : ": ", s[i].error, s[i].body.substr(0, 300));
      }
    }
    if (all || !ended.empty()) break;
    if (Clock::now() + 5ms >= deadline) ended = "the streams were not all decoding after an hour";
  }
  if (!ended.empty()) {
    std::fprintf(stderr, "kv_adopt_bench: %s\n", ended.c_str());
    serve.signal(SIGTERM);  // the other streams end with the server
    for (auto& c : clients) c.join();
    serve.wait(120s);
    return {.ok = false};
  }
  const auto killed = Clock::now();
  for (int pid : hearth::children_of(serve.pid(), "hearth-engine")) ::kill(pid, SIGKILL);
  // Every stream ends within half an hour of the kill, or the run has failed (an engine
  // that never came back): the server is stopped, which ends the streams.
  Result r;
  for (const auto deadline = killed + 1800s;; std::this_thread::sleep_for(20ms)) {
    const bool all_done = std::all_of(s.begin(), s.end(), [](Stream& st) {
      std::lock_guard lock(st.mu);
      return st.done;
    });
    if (all_done) break;
    if (Clock::now() >= deadline) {
      std::fprintf(stderr, "kv_adopt_bench: the streams did not end within 30 minutes of the kill\n");
      r.ok = false;
      serve.signal(SIGTERM);
      break;
    }
  }
  for (auto& c : clients) c.join();
  std::vector<double> gaps;
  for (Stream& st : s) {
    const auto next = std::find_if(st.arrivals.begin(), st.arrivals.end(), [&](auto t) { return t > killed; });
    if (st.status != 200 || st.body.find("[DONE]") == std::string::npos || next == st.arrivals.end()) r.ok = false;
    if (next != st.arrivals.end()) gaps.push_back(std::chrono::duration<double, std::milli>(*next - killed).count());
    r.texts.push_back(stream_text(st.body));
  }
  std::sort(gaps.begin(), gaps.end());
  if (!gaps.empty()) {
    r.median_ms = gaps[gaps.size() / 2];
    r.max_ms = gaps.back();
  }
  serve.signal(SIGTERM);
  serve.wait(120s);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  auto args = hearth::Args::parse({argv + 1, argv + argc}, {"model", "streams", "contexts", "threads", "tp"}, {});
  if (!args.is_ok()) {
    std::fprintf(stderr, "kv_adopt_bench: %s\n", args.status().message().c_str());
    return 2;
  }
  auto streams = args->get_int("streams", 1, 64);
  auto threads = args->get_int("threads", 1, 1024);
  auto tp = args->get_int("tp", 1, 16);
  if (!streams.is_ok() || !threads.is_ok() || !tp.is_ok()) {
    std::fprintf(stderr, "kv_adopt_bench: %s\n",
                 (!streams.is_ok() ? streams.status() : !threads.is_ok() ? threads.status() : tp.status())
                     .message()
                     .c_str());
    return 2;
  }
  std::vector<int> contexts;
  {
    std::stringstream list(args->get("contexts").value_or("500,2000"));
    for (std::string item; std::getline(list, item, ',');) {
      const int c = std::atoi(item.c_str());
      if (c < 16 || c > 32000) {
        std::fprintf(stderr, "kv_adopt_bench: --contexts: \"%s\" is not a length from 16 to 32000\n", item.c_str());
        return 2;
      }
      contexts.push_back(c);
    }
  }
  std::string model = args->get("model").value_or("");
  std::filesystem::path made;
  if (model.empty()) {
    made = std::filesystem::temp_directory_path() / ("kv-adopt-bench-" + std::to_string(::getpid()) + ".gguf");
    const auto synth = hearth::run_process({bin("hearth"), "synth", "--preset", "1b", "--type", "q4_0", "--gguf",
                                            made.string()});  // the loader splits it for --tp
    if (synth.exit_code != 0) {
      std::fprintf(stderr, "kv_adopt_bench: hearth synth failed: %s\n", synth.err.c_str());
      return 1;
    }
    model = made.string();
  }
  const int n = static_cast<int>(streams->value_or(4));
  const int t = static_cast<int>(threads->value_or(2));
  const int ranks = static_cast<int>(tp->value_or(1));
  std::printf("# cpu: %s\n", hearth::kernels::cpu::cpu_host_summary().c_str());
  std::printf("# engine SIGKILLed mid-decode (%s): %s, %d streams of distinct prompts, %d threads%s; time from the kill "
              "to each stream's next token\n",
              ranks > 1 ? fmt::format("all {} ranks of its group", ranks).c_str() : "one rank",
              std::filesystem::path(model).filename().c_str(), n, t, ranks > 1 ? " per rank" : "");
  std::printf("| context | adopted: median / max ms | --no-kv-adopt: median / max ms | speed-up (median) | same text |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
  int failed = 0;
  for (int c : contexts) {
    const Result a = run_case(model, n, c, t, ranks, true);
    const Result r = run_case(model, n, c, t, ranks, false);
    failed += (a.ok ? 0 : 1) + (r.ok ? 0 : 1);
    // Greedy: a stream continued from the adopted cache and one computed again must say
    // the same (what an uninterrupted run says; the tests check that on a small model).
    int same = 0;
    for (size_t i = 0; i < a.texts.size() && i < r.texts.size(); ++i) same += a.texts[i] == r.texts[i] && !a.texts[i].empty();
    if (same != n) ++failed;
    std::printf("| %d | %.0f / %.0f | %.0f / %.0f | %.1fx | %d of %d |\n", c, a.median_ms, a.max_ms, r.median_ms,
                r.max_ms, a.median_ms > 0 ? r.median_ms / a.median_ms : 0.0, same, n);
    std::fflush(stdout);
  }
  if (!made.empty()) std::filesystem::remove(made);
  if (failed > 0) std::fprintf(stderr, "kv_adopt_bench: %d runs had a stream that did not complete or differed\n", failed);
  return failed > 0 ? 1 : 0;
}
