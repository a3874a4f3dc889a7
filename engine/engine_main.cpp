// hearth-engine: attaches to an instance's resident weights and serves the requests
// frontends put in its broker segment, until SIGTERM. Prints one JSON line to stdout when
// it is ready and notifies systemd.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <boost/json.hpp>

#include "common/args.h"
#include "common/daemon.h"
#include "common/log.h"
#include "engine/backend.h"
#include "engine/engine_server.h"

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
  --backend cpu|cpu-reference  the device kind the model runs on (default cpu)
  --wait-weights SECONDS   wait this long for the weights segment to appear (default 0)
  --static-batching MS     batch statically instead (full batch or MS of waiting), for comparisons
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth-engine: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth;
  daemon_block_signals();
  log_init("engine[0]");
  auto args = Args::parse({argv + 1, argv + argc},
                          {"instance", "shm-dir", "slots", "ctx", "kv-blocks", "max-batch-size", "max-batched-tokens",
                           "prefetch", "threads", "wait-weights", "static-batching", "kv-dtype", "backend"},
                          {"help"});
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  EngineOptions o;
  if (Status st = engine_options_from_env(o); !st.is_ok()) return usage_error(st.message());
  o.instance = args->get("instance").value_or("default");
  o.shm_dir = args->get("shm-dir").value_or("");
  struct IntFlag {
    const char* name;
    int64_t min, max;
    int32_t* target;
  };
  int32_t slots = static_cast<int32_t>(o.slots), wait_seconds = 0;
  for (const IntFlag& f : {IntFlag{"slots", 1, 65536, &slots}, IntFlag{"ctx", 16, 1 << 24, &o.context},
                           IntFlag{"kv-blocks", 1, 1 << 24, &o.kv_blocks},
                           IntFlag{"max-batch-size", 1, 4096, &o.scheduler.max_batch_size},
                           IntFlag{"max-batched-tokens", 1, 1 << 20, &o.scheduler.max_batched_tokens},
                           IntFlag{"prefetch", 1, 65536, &o.prefetch}, IntFlag{"threads", 1, 1024, &o.threads},
                           IntFlag{"wait-weights", 0, 86400, &wait_seconds},
                           IntFlag{"static-batching", 1, 600000, &o.scheduler.static_batch_timeout_ms}}) {
    auto v = args->get_int(f.name, f.min, f.max);
    if (!v.is_ok()) return usage_error(v.status().message());
    if (*v) *f.target = static_cast<int32_t>(**v);
  }
  o.slots = static_cast<uint32_t>(slots);
  o.backend = args->get("backend").value_or("cpu");
  if (Status st = backend_check_name(o.backend); !st.is_ok()) return usage_error(st.message());
  if (auto name = args->get("kv-dtype")) {
    auto dtype = kv_dtype_from_name(*name);
    if (!dtype.is_ok()) return usage_error(dtype.status().message());
    o.kv_dtype = *dtype;
  }

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_seconds);
  auto server = EngineServer::create(o);
  while (!server.is_ok() && server.status().code() != ErrorCode::kInvalidArgument &&
         std::chrono::steady_clock::now() < deadline) {
    if (daemon_wait_signal(std::chrono::milliseconds(200)) != 0) return 0;
    server = EngineServer::create(o);
  }
  if (!server.is_ok()) {
    std::fprintf(stderr, "hearth-engine: %s\n", server.status().to_string().c_str());
    return 1;
  }
  EngineServer& engine = **server;
  // Signals arrive on a thread of their own; the serving loop stops at its next iteration.
  std::atomic<bool> done{false};
  std::thread signals([&engine, &done] {
    while (!done.load()) {
      const int sig = daemon_wait_signal(std::chrono::milliseconds(200));
      if (sig == SIGTERM || sig == SIGINT) {
        daemon_notify_stopping();
        engine.stop();
        return;
      }
    }
  });
  HEARTH_LOG_INFO("{}", engine.describe());
  std::printf("%s\n", boost::json::serialize(boost::json::object{{"event", "ready"}}).c_str());
  std::fflush(stdout);
  daemon_notify_ready(engine.describe());
  const Status st = engine.run();
  done.store(true);
  signals.join();
  if (!st.is_ok()) {
    std::fprintf(stderr, "hearth-engine: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
