// EngineServer: the serving loop of hearth-engine's rank 0 (the only rank at tensor
// parallel size 1; ranks 1..tp-1 run ShardServer).
//
// It attaches to the instance's weights segment (read-only, no copy) and broker, then
// loops: take new requests from the ring (and, as a safety net, from a scan of the
// slot table), plan a step with the Scheduler, run it through the model, sample for
// every sequence that finished its known tokens, publish each token into its slot, and
// finish sequences at a stop id, their max_tokens or the context. Cancel flags are
// honoured at the next step; slots whose frontend died are reclaimed. On start it
// resumes every slot a previous engine left QUEUED or RUNNING by recomputing its prompt
// and the tokens already produced. Heartbeats go to the broker every iteration. Owned
// by one thread (run()); stop() may be called from another.
//
// Rank 0 always holds the instance's `tp` segment (TpGroup): with more ranks it forms
// the group before serving, publishes every step to the other ranks before running it,
// and when the group breaks (a rank died, fell silent or timed out) it stops
// heartbeating the broker (frontends see no engine), drops its sequences, waits for the
// group to form again and resumes every request in flight from the broker, exactly as a
// restarted engine does.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "common/cpu_set.h"
#include "common/status.h"
#include "engine/core/kv_cache.h"
#include "engine/core/scheduler.h"
#include "engine/core/speculation.h"
#include "ipc/weights_segment.h"

namespace hearth {

struct EngineOptions {
  std::string instance = "default";
  std::filesystem::path shm_dir;  // empty: shm_dir_default()
  uint32_t slots = 128;           // requests in flight (broker slots)
  int32_t context = 0;            // tokens per sequence; 0: the model's, at most 4096
  int32_t kv_blocks = 0;          // 0: enough for `slots / 4` full contexts, at least 4
  int32_t block_size = 16;
  KvDType kv_dtype = KvDType::kF16;  // how K and V are stored (--kv-dtype)
  SchedulerConfig scheduler;
  int32_t prefetch = 64;          // queued requests taken from the ring per iteration
  std::string backend = "cpu";    // make_backend's name (--backend)
  int threads = 0;                // CPU threads (0: every core)
  int frontend_stale_ms = 5000;   // a frontend whose heartbeat is older is gone
  uint32_t grammar_bytes = 65536; // GBNF text one request's constraint may take (broker slots hold it)
  // Tensor parallelism: this process's rank of `tp` (the weights must be split for as
  // many: hearth-loader --tp), where it computes ("": as started; "auto": its share of
  // the CPUs this process may use; else a list such as "0-3"), and how long a
  // collective may wait and a rank's heartbeat may be old before the group breaks.
  int rank = 0;
  int tp = 1;
  std::string cpus;
  int collective_timeout_ms = 30000;
  int rank_stale_ms = 30000;
  // The KV cache lives in hearth.<instance>.kv and a restarted engine adopts what its
  // predecessor computed for the requests it resumes (host-memory backends, one rank);
  // false: the cache is private and resumed requests are computed again.
  bool kv_adopt = true;
  SpecConfig spec;  // speculative decoding (--spec, --spec-tokens)
};

// Fills scheduler knobs from HEARTH_MAX_BATCH_SIZE, HEARTH_MAX_BATCHED_TOKENS,
// HEARTH_PREFETCH_BUFFER and HEARTH_KV_BLOCKS, and the group size from
// HEARTH_TENSOR_PARALLEL, when they are set.
Status engine_options_from_env(EngineOptions& options);

// What every rank does first: pins itself (options.cpus, recording the CPUs in `cpus`)
// and attaches the weights, refusing a rank outside [0, tp) and weights split for
// another group size, with messages that name the numbers and the flag to change.
struct RankStart {
  AttachedWeights weights;
  CpuSet cpus;
};
Result<RankStart> engine_rank_start(const EngineOptions& options);

class EngineServer {
 public:
  static Result<std::unique_ptr<EngineServer>> create(const EngineOptions& options);
  ~EngineServer();

  // Serves until stop(); returns an error only for failures of the engine itself.
  // `on_serving` runs once, when the group has formed and requests are served.
  Status run(const std::function<void()>& on_serving = {});
  void stop();

  // For status lines and tests.
  uint64_t epoch() const;
  std::string describe() const;

 private:
  EngineServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth
