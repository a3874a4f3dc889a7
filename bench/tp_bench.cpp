// The cost of tensor parallelism on CPU ranks: the shared-memory all-reduce (latency and
// bandwidth for one decode step's hidden state and for a 512-token prefill's), and with
// --model, greedy decoding at TP 1 and at TP N (ranks N-1..1 forked processes, each
// pinned to its share of the CPUs): tokens/s of both, the share of a TP N decode step
// spent in collectives and publishing the step, the largest logit difference between
// TP N and TP 1 at any step (relative to the row's largest logit) and whether the
// greedy ids agree; then TP N with speculative decoding (prompt lookup, and a draft model:
// the unsplit model on rank 0), whose greedy ids must be TP N's plain ones.
//
//   tp_bench [--tp N] [--dim D] [--model PATH.gguf] [--tokens 64] [--prompt 8]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/args.h"
#include "common/cpu_set.h"
#include "common/log.h"
#include "engine/core/backend.h"
#include "engine/core/driver.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/tp/tp_group.h"
#include "ipc/weights_segment.h"
#include "kernels/cpu/isa.h"
#include "loader/resident.h"

namespace hearth {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Forwards to a communicator and adds up the time its collectives take.
class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status all_reduce_sum(float* data, int64_t n, DeviceQueue q) override {
    const double t0 = now_s();
    Status st = inner_.all_reduce_sum(data, n, q);
    seconds += now_s() - t0;
    return st;
  }
  Status broadcast(void* data, size_t bytes, int root, DeviceQueue q) override {
    const double t0 = now_s();
    Status st = inner_.broadcast(data, bytes, root, q);
    seconds += now_s() - t0;
    return st;
  }
  Status barrier() override { return inner_.barrier(); }
  double seconds = 0;

 private:
  Communicator& inner_;
};

// Times StepSink::publish.
class TimedSink final : public StepSink {
 public:
  explicit TimedSink(StepSink& inner) : inner_(inner) {}
  Status publish(const ModelInput& input) override {
    const double t0 = now_s();
    Status st = inner_.publish(input);
    seconds += now_s() - t0;
    return st;
  }
  double seconds = 0;

 private:
  StepSink& inner_;
};

struct Sizes {
  int64_t floats;
  int iterations;
  const char* what;
};

std::vector<Sizes> reduce_sizes(int64_t dim) {
  return {{dim, 3000, "one decode step's hidden state"}, {512 * dim, 40, "a 512-token prefill's hidden states"}};
}

int die(const std::string& message) {
  std::fprintf(stderr, "tp_bench: %s\n", message.c_str());
  return 1;
}

struct Run {
  std::vector<TokenId> ids;
  std::vector<std::vector<float>> logits;  // per step, the sampled row
  double decode_seconds = 0;
  int decode_steps = 0;
};

// Greedy decoding of `prompt` for `tokens` steps through `runner`.
// `after_prefill` runs once the first step (the prompt) is done.
Status greedy(ModelRunner& runner, const std::vector<TokenId>& prompt, int tokens, Run& out,
              const std::function<void()>& after_prefill = {}) {
  std::vector<TokenId> seq = prompt;
  std::vector<int32_t> blocks;
  const int32_t bs = runner.cache().config().block_size;
  for (int32_t b = 0; b * bs < static_cast<int32_t>(prompt.size()) + tokens + 1; ++b) blocks.push_back(b);
  ModelInput in;
  int32_t done = 0;
  for (int step = 0; step < tokens; ++step) {
    in.clear(bs);
    HEARTH_RETURN_IF_ERROR(
        in.add_sequence(std::span(seq).subspan(static_cast<size_t>(done)), done, blocks, /*want_logits=*/true));
    const double t0 = now_s();
    HEARTH_ASSIGN_OR_RETURN(auto logits, runner.run(in));
    if (step > 0) {
      out.decode_seconds += now_s() - t0;
      ++out.decode_steps;
    }
    if (step == 0 && after_prefill) after_prefill();
    out.logits.emplace_back(logits.begin(), logits.end());
    done = static_cast<int32_t>(seq.size());
    seq.push_back(static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    out.ids.push_back(seq.back());
  }
  return Status::ok();
}

// Ranks 1..tp-1: the all-reduce rounds, then every step rank 0 publishes, until the
// group ends.
[[noreturn]] void shard_process(const std::filesystem::path& tp_path, const std::filesystem::path& weights_path, int rank,
                                int tp, int64_t dim) {
  auto share = cpu_set_share(cpu_set_current(), rank, tp);
  if (share.is_ok()) (void)cpu_set_pin(*share);
  auto seg = TpSegment::attach(tp_path);
  if (!seg.is_ok() || !seg->register_rank(rank).is_ok()) ::_exit(3);
  TpGroup group(std::move(*seg), {.rank = rank});
  auto joined = group.join(std::chrono::seconds(3600));
  if (!joined.is_ok() || !*joined) ::_exit(4);
  std::vector<float> x;
  for (const Sizes& s : reduce_sizes(dim)) {
    x.assign(static_cast<size_t>(s.floats), 1.0f);
    for (int i = 0; i < s.iterations + 5; ++i) {
      if (!group.communicator().all_reduce_sum(x.data(), s.floats).is_ok()) ::_exit(5);
    }
  }
  if (!weights_path.empty()) {
    auto weights = weights_attach(weights_path);
    if (!weights.is_ok()) ::_exit(6);
    const ModelConfig& c = weights->config;
    auto backend = make_cpu_backend({});
    auto cache = KvCache::create(*backend, {c.n_layers, c.kv_dim() / tp, 16, 64, KvDType::kF32});
    auto model = Model::create(c, weights->tensors(rank), *backend, 512, {.comm = &group.communicator()});
    if (!cache.is_ok() || !model.is_ok()) ::_exit(7);
    ModelRunner runner(**model, *cache);
    ModelInput in;
    while (true) {
      auto got = group.next_step(in, std::chrono::seconds(1));
      if (!got.is_ok()) break;
      if (*got && !runner.run_shard(in).is_ok()) break;
    }
  }
  ::_exit(0);
}

int run(int argc, char** argv) {
  auto args = Args::parse({argv + 1, argv + argc}, {"tp", "dim", "model", "tokens", "prompt"}, {});
  if (!args.is_ok()) return die(args.status().message());
  const int tp = static_cast<int>(args->get_int("tp", 2, 16).value().value_or(2));
  int64_t dim = args->get_int("dim", 1, 1 << 16).value().value_or(2048);
  const int tokens = static_cast<int>(args->get_int("tokens", 2, 400).value().value_or(64));
  const int prompt_len = static_cast<int>(args->get_int("prompt", 1, 256).value().value_or(8));
  const std::string model_path = args->get("model").value_or("");
  const auto cpus = cpu_set_current();
  std::printf("# cpu: %s\n", kernels::cpu::cpu_host_summary().c_str());
  std::printf("tp_bench: %d ranks on CPUs %s (%zu)\n", tp, cpus.describe().c_str(), cpus.cpus.size());

  char dir_template[] = "/dev/shm/hearth-tp-bench-XXXXXX";
  char* dir_name = ::mkdtemp(dir_template);
  if (dir_name == nullptr) return die("cannot make a directory in /dev/shm");
  const std::filesystem::path dir = dir_name;
  std::filesystem::path w1, wn;
  if (!model_path.empty()) {
    for (int split : {1, tp}) {
      ResidentOptions r;
      r.model = model_path;
      r.shm_dir = dir;
      r.instance = fmt::format("tp{}", split);
      r.tp = split;
      auto published = resident_publish(r);
      if (!published.is_ok()) return die(published.status().to_string());
    }
    w1 = segment_path(dir, "tp1", "weights");
    wn = segment_path(dir, fmt::format("tp{}", tp), "weights");
    auto probe = weights_attach(w1);
    if (!probe.is_ok()) return die(probe.status().to_string());
    dim = probe->config.dim;
  }
  const auto tp_path = segment_path(dir, "bench", "tp");
  TpSegmentConfig config;
  config.tp_size = static_cast<uint32_t>(tp);
  config.step_capacity = model_input_max_bytes(512, 1, 64);
  config.reduce_floats = static_cast<uint64_t>(512 * dim);
  auto created = TpSegment::open_or_create(tp_path, config);
  if (!created.is_ok()) return die(created.status().to_string());
  std::vector<pid_t> children;
  for (int r = 1; r < tp; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) shard_process(tp_path, wn, r, tp, dim);
    children.push_back(pid);
  }
  auto reap = [&children] {
    for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
  };

  // TP 1 first, on every CPU, before rank 0 pins itself.
  Run one;
  std::vector<TokenId> prompt = {1};
  if (!model_path.empty()) {
    auto weights = weights_attach(w1);
    const ModelConfig& c = weights->config;
    for (int i = 1; i < prompt_len; ++i) prompt.push_back(3 + (i * 7919) % (c.vocab_size - 3));
    auto backend = make_cpu_backend({});
    auto cache = KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 64, KvDType::kF32});
    auto model = Model::create(c, weights->tensors(0), *backend, 512);
    if (!cache.is_ok() || !model.is_ok()) return die("cannot build the TP 1 model");
    ModelRunner runner(**model, *cache);
    if (Status st = greedy(runner, prompt, tokens, one); !st.is_ok()) return die(st.to_string());
    std::printf("TP 1: %d threads: decode %.2f tok/s (%.1f ms a step)\n", backend->threads(),
                one.decode_steps / one.decode_seconds, 1e3 * one.decode_seconds / one.decode_steps);
  }

  if (auto share = cpu_set_share(cpus, 0, tp); share.is_ok()) (void)cpu_set_pin(*share);
  if (Status st = created->register_rank(0); !st.is_ok()) return die(st.to_string());
  TpGroup group(std::move(*created), {.rank = 0});
  auto formed = group.form(std::chrono::seconds(60));
  if (!formed.is_ok() || !*formed) return die("the group did not form");
  std::vector<float> x;
  for (const Sizes& s : reduce_sizes(dim)) {
    x.assign(static_cast<size_t>(s.floats), 1.0f);
    for (int i = 0; i < 5; ++i) (void)group.communicator().all_reduce_sum(x.data(), s.floats);
    std::vector<double> each;
    for (int i = 0; i < s.iterations; ++i) {
      const double t0 = now_s();
      if (!group.communicator().all_reduce_sum(x.data(), s.floats).is_ok()) return die("all-reduce failed");
      each.push_back(now_s() - t0);
    }
    std::sort(each.begin(), each.end());
    const double bytes = static_cast<double>(s.floats) * sizeof(float);
    std::printf("all_reduce %lld floats (%s, %s): median %.1f us, p90 %.1f us, %.2f GB/s\n",
                static_cast<long long>(s.floats), human_bytes(static_cast<uint64_t>(bytes)).c_str(), s.what,
                1e6 * each[each.size() / 2], 1e6 * each[each.size() * 9 / 10], bytes / each[each.size() / 2] / 1e9);
  }

  if (!model_path.empty()) {
    auto weights = weights_attach(wn);
    const ModelConfig& c = weights->config;
    auto backend = make_cpu_backend({});
    TimedCommunicator comm(group.communicator());
    TimedSink sink(group);
    auto cache = KvCache::create(*backend, {c.n_layers, c.kv_dim() / tp, 16, 64, KvDType::kF32});
    auto model = Model::create(c, weights->tensors(0), *backend, 512, {.comm = &comm});
    if (!cache.is_ok() || !model.is_ok()) return die("cannot build the rank 0 model");
    ModelRunner runner(**model, *cache, &sink);
    Run many;
    // The prefill's collectives are not a decode step's: count from the second step.
    auto reset = [&] { comm.seconds = sink.seconds = 0; };
    if (Status st = greedy(runner, prompt, tokens, many, reset); !st.is_ok()) return die(st.to_string());
    double worst = 0;
    for (size_t s = 0; s < many.logits.size(); ++s) {
      float scale = 0;
      for (float v : one.logits[s]) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < one.logits[s].size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(one.logits[s][i] - many.logits[s][i]) / scale));
      }
    }
    int same = 0;
    while (same < tokens && one.ids[static_cast<size_t>(same)] == many.ids[static_cast<size_t>(same)]) ++same;
    const double per_step = many.decode_seconds / many.decode_steps;
    std::printf("TP %d: %d thread(s) per rank: decode %.2f tok/s (%.1f ms a step), %.2fx TP 1\n", tp,
                backend->threads(), many.decode_steps / many.decode_seconds, 1e3 * per_step,
                (many.decode_steps / many.decode_seconds) / (one.decode_steps / one.decode_seconds));
    std::printf("TP %d: all-reduces and step publishing take %.1f%% of a decode step (%.3f ms + %.3f ms of %.1f ms; "
                "waits for the slower rank included)\n",
                tp, 100.0 * (comm.seconds + sink.seconds) / many.decode_seconds, 1e3 * comm.seconds / many.decode_steps,
                1e3 * sink.seconds / many.decode_steps, 1e3 * per_step);
    std::printf("TP %d vs TP 1: largest logit difference %.2e of the row's largest over %d steps; greedy ids agree "
                "for %d of %d tokens\n",
                tp, worst, tokens, same, tokens);
    // Speculative decoding in the group: the ids TP N decodes plainly, drafted by prompt
    // lookup and by a draft model (the unsplit model, which rank 0 runs whole).
    auto draft_weights = weights_attach(w1);
    if (!draft_weights.is_ok()) return die(draft_weights.status().to_string());
    auto draft_model = Model::create(draft_weights->config, draft_weights->tensors(0), *backend, 512);
    auto draft_cache = KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 64, KvDType::kF32});
    if (!draft_model.is_ok() || !draft_cache.is_ok()) return die("cannot build the draft model");
    ModelRunner draft(**draft_model, *draft_cache);
    for (SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraft}) {
      DriverConfig dc{.scheduler = {.max_batch_size = 1, .max_batched_tokens = 512}, .max_sequence_tokens = 64 * 16};
      dc.spec = {.method = method, .max_tokens = 4};
      dc.draft = &draft;
      Driver driver(runner, dc);
      const auto added = driver.add(0, {.tokens = prompt, .n_prompt = static_cast<int32_t>(prompt.size()),
                                        .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = tokens,
                                                 .ignore_stop = true}});
      if (!added.is_ok()) return die(added.status().to_string());
      std::vector<TokenId> ids;
      double first = 0;
      const Status st = driver.run_until_idle([&](const StepEvent& e) {
        if (ids.empty()) first = now_s();
        ids.push_back(e.token.id);
        return true;
      });
      if (!st.is_ok()) return die(st.to_string());
      const double seconds = now_s() - first;
      int agree = 0;
      while (agree < tokens && agree < static_cast<int>(ids.size()) &&
             ids[static_cast<size_t>(agree)] == many.ids[static_cast<size_t>(agree)]) {
        ++agree;
      }
      std::printf("TP %d with --spec %s: greedy ids agree with TP %d's plain ones for %d of %d tokens; %llu of %llu "
                  "drafted tokens kept; decode %.2f tok/s\n",
                  tp, std::string(spec_method_name(method)).c_str(), tp, agree, tokens,
                  static_cast<unsigned long long>(driver.spec_stats().accepted),
                  static_cast<unsigned long long>(driver.spec_stats().draft_tokens),
                  static_cast<double>(ids.size() - 1) / seconds);
    }
  }
  std::fflush(stdout);
  group.leave(TpBreak::kStopped);
  reap();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace hearth

int main(int argc, char** argv) {
  (void)hearth::log_init("tp_bench", hearth::LogLevel::kWarn);
  return hearth::run(argc, argv);
}
