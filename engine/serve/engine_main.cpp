// hearth-engine: attaches to an instance's resident weights and serves the requests
// frontends put in its broker segment, until SIGTERM. Prints one JSON line to stdout when
// it is ready and notifies systemd.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <functional>
#include <thread>
#include <type_traits>

#include <boost/json.hpp>

#include "common/args.h"
#include "common/cpu_set.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/program.h"
#include "engine/backends.h"
#include "engine/core/backend.h"
#include "engine/serve/engine_server.h"
#include "engine/serve/shard_server.h"
#include "ipc/weights_layout.h"

namespace {

constexpr const char* kUsage = R"(usage: hearth-engine [options]

Serves the instance's requests on its resident weights (start hearth-loader first).

  --instance NAME          instance (default "default")
  --shm-dir DIR            shared-memory directory (default $HEARTH_SHM_DIR or /dev/shm)
  --slots N                requests in flight (default 128)
  --ctx N                  tokens per sequence (default: the model's, at most 4096)
  --kv-blocks N            KV cache blocks of 16 tokens (default: slots/4 full contexts; HEARTH_KV_BLOCKS)
  --max-batch-size N       sequences per step (default 32; HEARTH_MAX_BATCH_SIZE)
  --max-batched-tokens N   tokens per step, prefill chunks included (default 512; HEARTH_MAX_BATCHED_TOKENS)
  --prefetch N             queued requests taken per step (default 64; HEARTH_PREFETCH_BUFFER)
  --threads N              CPU threads (default: every core; HEARTH_THREADS)
  --kv-dtype f32|f16|bf16  how the KV cache stores keys and values (default f16)
  --backend cpu|cpu-reference|cuda[:N]  the device the model runs on (default cpu); "cuda" is
                           GPU R for rank R; on CUDA the weights come from hearth-loader
                           --device's slab where it serves one
  --wait-weights SECONDS   wait this long for the weights segment to appear (default 0)
  --rank R                 this process's rank in its tensor-parallel group (default 0); rank 0
                           serves the broker and samples, ranks 1..tp-1 run their shard of each step
  --tp N                   ranks in the group (default 1; HEARTH_TENSOR_PARALLEL); the weights must be
                           split for as many (hearth-loader --tp N)
  --cpus auto|LIST         pin this rank: "auto" takes its share of the CPUs it may use, LIST such as
                           0-3,8 names them (default: not pinned); threads default to their number
  --collective-timeout MS  a collective that waits longer ends the group's epoch (default 30000)
  --rank-timeout MS        a rank whose heartbeat is older is taken as hung (default 30000)
  --no-prefix-cache        turn off automatic prefix caching (later requests reusing the KV
                           blocks of earlier ones with the same leading tokens)
  --no-kv-adopt            a restarted engine recomputes the requests it resumes instead of
                           adopting the resident KV cache its predecessor left (hearth.<instance>.kv)
  --static-batching MS     batch statically instead (full batch or MS of waiting), for comparisons
  --spec ngram|draft|none  speculative decoding: each decoding sequence drafts tokens by prompt
                           lookup (what followed the last few tokens where they occurred before)
                           or with the draft model the loader keeps (hearth-loader --draft-model),
                           and one step checks them; the output is unchanged (default none)
  --spec-tokens K          drafted tokens per sequence and step at most, 1..16 (default 4)
  --max-grammar-bytes N    largest grammar a request's structured output or tool choice may compile
                           to (default 65536; each slot holds this much)
  --log-level LEVEL        trace, debug, info, warn, error or off (default info; $HEARTH_LOG_LEVEL)
  --log-format FMT         text or json, one object per line (default text; $HEARTH_LOG_FORMAT)
  --version                print the version and exit
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth-engine: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

// Runs `server` until SIGTERM / SIGINT, which arrive on a thread of their own; the
// serving loop stops at its next iteration.
template <typename Server>
int serve(Server& server, const std::function<void()>& on_serving) {
  using namespace hearth;
  std::atomic<bool> done{false};
  std::thread signals([&server, &done] {
    while (!done.load()) {
      const int sig = daemon_wait_signal(std::chrono::milliseconds(200));
      if (sig == SIGTERM || sig == SIGINT) {
        daemon_notify_stopping();
        server.stop();
        return;
      }
    }
  });
  HEARTH_LOG_INFO("{}", server.describe());
  Status st;
  if constexpr (std::is_same_v<Server, EngineServer>) {
    st = server.run(on_serving);
  } else {
    st = server.run();
  }
  done.store(true);
  signals.join();
  if (!st.is_ok()) {
    std::fprintf(stderr, "hearth-engine: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}

// The numbers and switches of the command line into `o` (after the environment's).
hearth::Status read_flags(const hearth::Args& args, hearth::EngineOptions& o, int32_t& wait_seconds) {
  using namespace hearth;
  struct IntFlag {
    const char* name;
    int64_t min, max;
    int32_t* target;
  };
  int32_t slots = static_cast<int32_t>(o.slots), rank = 0, tp = o.tp;
  int32_t collective_ms = o.collective_timeout_ms, stale_ms = o.rank_stale_ms;
  auto grammar_bytes = static_cast<int32_t>(o.grammar_bytes);
  for (const IntFlag& f : {IntFlag{"slots", 1, 65536, &slots}, IntFlag{"ctx", 16, 1 << 24, &o.context},
                           IntFlag{"kv-blocks", 1, 1 << 24, &o.kv_blocks},
                           IntFlag{"max-batch-size", 1, 4096, &o.scheduler.max_batch_size},
                           IntFlag{"max-batched-tokens", 1, 1 << 20, &o.scheduler.max_batched_tokens},
                           IntFlag{"prefetch", 1, 65536, &o.prefetch}, IntFlag{"threads", 1, 1024, &o.threads},
                           IntFlag{"wait-weights", 0, 86400, &wait_seconds},
                           IntFlag{"static-batching", 1, 600000, &o.scheduler.static_batch_timeout_ms},
                           IntFlag{"rank", 0, 1 << 20, &rank}, IntFlag{"tp", 1, 1 << 20, &tp},
                           IntFlag{"collective-timeout", 100, 3600000, &collective_ms},
                           IntFlag{"rank-timeout", 100, 3600000, &stale_ms},
                           IntFlag{"max-grammar-bytes", 0, 16 << 20, &grammar_bytes}}) {
    auto v = args.get_int(f.name, f.min, f.max);
    if (!v.is_ok()) return v.status();
    if (*v) *f.target = static_cast<int32_t>(**v);
  }
  o.slots = static_cast<uint32_t>(slots);
  o.grammar_bytes = static_cast<uint32_t>(grammar_bytes);
  o.rank = rank;
  o.tp = tp;
  o.collective_timeout_ms = collective_ms;
  o.rank_stale_ms = stale_ms;
  o.cpus = args.get("cpus").value_or("");
  o.scheduler.prefix_caching = !args.has("no-prefix-cache");
  if (auto method = args.get("spec")) {
    HEARTH_ASSIGN_OR_RETURN(o.spec.method, spec_method_from_name(*method));
  }
  HEARTH_ASSIGN_OR_RETURN(auto spec_tokens, args.get_int("spec-tokens", 1, kMaxSpecTokens));
  if (spec_tokens) o.spec.max_tokens = static_cast<int32_t>(*spec_tokens);
  HEARTH_RETURN_IF_ERROR(spec_config_validate(o.spec));
  o.kv_adopt = !args.has("no-kv-adopt");
  return Status::ok();
}

// The flags that need the others: the rank within the group, CPUs, backend, KV dtype.
hearth::Status check_flags(const hearth::Args& args, hearth::EngineOptions& o) {
  using namespace hearth;
  if (o.tp > kMaxTensorParallel) return make_error(ErrorCode::kInvalidArgument, "--tp {} is out of range 1..{}", o.tp, kMaxTensorParallel);
  if (o.rank >= o.tp) {
    return make_error(ErrorCode::kInvalidArgument, "--rank {} is not a rank of a group of {} (ranks 0..{})", o.rank, o.tp,
                      o.tp - 1);
  }
  if (!o.cpus.empty() && o.cpus != "auto") {
    if (auto cpus = cpu_set_parse(o.cpus); !cpus.is_ok()) return cpus.status();
  }
  o.backend = args.get("backend").value_or("cpu");
  HEARTH_RETURN_IF_ERROR(backend_check_name(o.backend));
  if (o.backend == "cuda") o.backend = fmt::format("cuda:{}", o.rank);  // rank r on GPU r
  if (auto name = args.get("kv-dtype")) {
    auto dtype = kv_dtype_from_name(*name);
    if (!dtype.is_ok()) return dtype.status();
    o.kv_dtype = *dtype;
  }
  return Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth;
  daemon_block_signals();
  auto args = Args::parse({argv + 1, argv + argc},
                          with_program_flags({"instance", "shm-dir", "slots", "ctx", "kv-blocks", "max-batch-size",
                                              "max-batched-tokens", "prefetch", "threads", "wait-weights",
                                              "static-batching", "kv-dtype", "backend", "rank", "tp", "cpus",
                                              "collective-timeout", "rank-timeout", "max-grammar-bytes", "spec", "spec-tokens"},
                                             kProgramValueFlags),
                          with_program_flags({"help", "no-prefix-cache", "no-kv-adopt"}, kProgramBoolFlags));
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  EngineOptions o;
  if (Status st = engine_options_from_env(o); !st.is_ok()) return usage_error(st.message());
  o.instance = args->get("instance").value_or("default");
  o.shm_dir = args->get("shm-dir").value_or("");
  int32_t wait_seconds = 0;
  if (Status st = read_flags(*args, o, wait_seconds); !st.is_ok()) return usage_error(st.message());
  const Status logging = log_init(fmt::format("engine[{}]", o.rank));
  if (auto exit = handle_program_flags(*args, "hearth-engine", logging)) return *exit;
  if (Status st = check_flags(*args, o); !st.is_ok()) return usage_error(st.message());

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_seconds);
  // Waits for the weights (a loader still publishing) as long as --wait-weights says.
  auto create = [&](auto make) {
    auto server = make(o);
    while (!server.is_ok() && server.status().code() != ErrorCode::kInvalidArgument &&
           std::chrono::steady_clock::now() < deadline) {
      if (daemon_wait_signal(std::chrono::milliseconds(200)) != 0) break;
      server = make(o);
    }
    return server;
  };
  if (o.rank == 0) {
    auto server = create([](const EngineOptions& options) { return EngineServer::create(options); });
    if (!server.is_ok()) {
      std::fprintf(stderr, "hearth-engine: %s\n", server.status().to_string().c_str());
      return 1;
    }
    return serve(**server, [&engine = **server] {
      std::printf("%s\n", boost::json::serialize(boost::json::object{{"event", "ready"}, {"rank", 0}}).c_str());
      std::fflush(stdout);
      daemon_notify_ready(engine.describe());
    });
  }
  auto server = create([](const EngineOptions& options) { return ShardServer::create(options); });
  if (!server.is_ok()) {
    std::fprintf(stderr, "hearth-engine: %s\n", server.status().to_string().c_str());
    return 1;
  }
  // A shard is ready once it has its weights: it waits for rank 0's group from there.
  std::printf("%s\n", boost::json::serialize(boost::json::object{{"event", "ready"}, {"rank", o.rank}}).c_str());
  std::fflush(stdout);
  daemon_notify_ready((*server)->describe());
  return serve(**server, [] {});
}
