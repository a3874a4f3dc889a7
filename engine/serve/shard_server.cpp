#include "engine/serve/shard_server.h"

#include <chrono>
#include <thread>

#include "common/daemon.h"
#include "common/log.h"
#include "common/process.h"
#include "engine/backends.h"
#include "engine/core/backend.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/serve/loader_slab.h"
#include "engine/serve/resident_adapters.h"
#include "engine/serve/resident_cache.h"
#include "engine/tp/tp_group.h"
#include "ipc/broker.h"
#include "ipc/fd_store.h"
#include "ipc/futex.h"
#include "ipc/kv_segment.h"
#include "ipc/segment.h"
#include "ipc/tp_segment.h"
#include "kernels/attention_params.h"

namespace hearth {

struct ShardServer::Impl {
  EngineOptions options;
  RankStart start;
  std::unique_ptr<Backend> backend;
  std::vector<std::unique_ptr<FdStore>> stores;  // a CUDA backend's resident KV cache gives them its device memory
  std::filesystem::path tp_path;
  std::filesystem::path lora_path;  // the instance's resident adapters
  std::filesystem::path kv_path;        // this rank's resident KV segment
  std::optional<KvSegment> kv_segment;  // while the cache lives in it
  std::shared_ptr<void> device_kv;      // K and V on the GPU, while the cache lives in them
  std::string device_name;              // and their name in the fd stores
  std::atomic<bool> stopping{false};
  std::atomic<uint32_t> wake{0};  // futex: bumped by stop()
  std::string last_wait;          // the last reason logged for waiting
  uint64_t last_watchdog_ns = 0;

  void watchdog() {
    const uint64_t now = monotonic_ns();
    if (now - last_watchdog_ns > 500000000ull) {
      daemon_notify_watchdog();
      last_watchdog_ns = now;
    }
  }

  // Logs why this rank waits, once per reason, and sleeps a little.
  void wait_because(const std::string& why) {
    if (why != last_wait) HEARTH_LOG_INFO("rank {} waits: {}", options.rank, why);
    last_wait = why;
    watchdog();
    const uint32_t seen = wake.load(std::memory_order_acquire);
    if (!stopping.load(std::memory_order_acquire)) futex_wait(wake, seen, std::chrono::milliseconds(200));
  }

  // The segment rank 0 made, if this rank can be part of its group: nullopt (after a
  // wait) while there is none to join yet; an error when there never will be.
  Result<std::optional<TpSegment>> find_group() {
    auto seg = TpSegment::attach(tp_path);
    if (!seg.is_ok()) {
      wait_because(seg.status().code() == ErrorCode::kNotFound
                       ? "no group yet (rank 0 has not started)"
                       : fmt::format("{} (rank 0 replaces it when it starts)", seg.status().message()));
      return std::optional<TpSegment>();
    }
    const TpHeader& h = seg->header();
    const TpRankEntry& r0 = seg->rank(0);
    const int32_t pid0 = r0.pid.load(std::memory_order_acquire);
    const bool rank0_alive = pid0 != 0 && process_alive(pid0, r0.start_time.load(std::memory_order_relaxed));
    std::string mismatch;
    if (h.tp_size != static_cast<uint32_t>(options.tp)) {
      mismatch = fmt::format("the group has {} ranks, this rank was started with --tp {}", h.tp_size, options.tp);
    } else if (!(h.weights == start.weights.header->fingerprint)) {
      mismatch = fmt::format("rank 0 serves other weights (fingerprint {}) than this rank attached ({}): restart "
                             "this rank once the loader has published them",
                             h.weights.hex(), start.weights.header->fingerprint.hex());
    }
    if (!mismatch.empty()) {
      if (rank0_alive) return make_error(ErrorCode::kInvalidArgument, "{} (rank 0 is pid {})", mismatch, pid0);
      wait_because(fmt::format("a stale group's segment: {}; rank 0 replaces it when it starts", mismatch));
      return std::optional<TpSegment>();
    }
    return std::optional<TpSegment>(std::move(*seg));  // serve() registers this rank in it
  }

  // This rank's share of the KV cache: in its resident segment when it may outlive the
  // process (engine/serve/resident_cache.h), so that rank 0 can adopt its own tables after a
  // restart of any rank; else private (and the segment removed). `kv_id` says which
  // segment holds it (0: private).
  Result<KvCache> open_cache(const KvCacheConfig& kv, uint64_t& kv_id) {
    kv_segment.reset();
    kv_id = 0;
    RankCacheOptions o;
    // Used again when the segment still describes it, else let go of (a failed open keeps
    // the name, so that the next one lets go of it in the stores).
    o.device_memory = std::move(device_kv);
    o.device_name = device_name;
    o.path = kv_path;
    o.instance = options.instance;
    o.rank = options.rank;
    o.tp = options.tp;
    o.adopt = options.kv_adopt;
    o.weights = start.weights.header->fingerprint;
    HEARTH_ASSIGN_OR_RETURN(RankCache opened, open_rank_cache(*backend, kv, std::move(o), stores));
    device_kv = std::move(opened.device_memory);
    device_name = std::move(opened.device_name);
    if (opened.segment) {
      kv_id = opened.segment->header().id;
      kv_segment.emplace(std::move(*opened.segment));
    }
    return std::move(opened.cache);
  }

  // One segment's life: build the shard from its geometry, then serve epochs until the
  // segment is replaced or the server stops.
  Status serve(TpSegment segment) {
    const TpGeometry g = segment.header().geometry;
    const ModelConfig& c = start.weights.config;
    const int rank = options.rank;
    auto dtype = static_cast<KvDType>(g.kv_dtype);
    // The cache first: registering makes this rank one rank 0 may form an epoch with, and
    // a cache rebuilt from empty (a large file reserved) must not make it miss the join.
    uint64_t kv_id = 0;
    HEARTH_ASSIGN_OR_RETURN(KvCache cache,
                            open_cache({c.n_layers, c.kv_dim() / options.tp, g.block_size, g.kv_blocks, dtype}, kv_id));
    HEARTH_RETURN_IF_ERROR(segment.register_rank(rank));
    // Before this rank joins any epoch (rank 0 reads it once every rank has joined).
    segment.rank(rank).kv_id.store(kv_id, std::memory_order_relaxed);
    TpGroup group(std::move(segment), {.rank = rank,
                                       .collective_timeout = std::chrono::milliseconds(options.collective_timeout_ms),
                                       .rank_stale = std::chrono::milliseconds(options.rank_stale_ms),
                                       .cuda_device = tp_group_cuda_device(options.backend)});
    group.note_cpus(start.cpus.mask64(), static_cast<uint32_t>(start.cpus.cpus.size()),
                    static_cast<uint32_t>(backend->threads()));
    HEARTH_ASSIGN_OR_RETURN(ResidentAdapters adapters,
                            ResidentAdapters::attach(lora_path,
                                                     start.weights.header->fingerprint));
    HEARTH_ASSIGN_OR_RETURN(auto model, Model::create(c, start.weights.tensors(rank), *backend,
                                                           g.max_batch_tokens,
                                                           {.layout = start.weights.layout,
                                                            .comm = &group.communicator(),
                                                            .max_adapters = adapters.slots(),
                                                            .max_lora_rank = adapters.max_rank()}));
    ModelRunner runner(*model, cache);
    HEARTH_LOG_INFO("rank {} of {}: {} KV blocks of {} ({}, {} MiB), steps of up to {} tokens", rank, options.tp,
                    g.kv_blocks, g.block_size, kernels::kv_dtype_name(dtype), cache.bytes() >> 20, g.max_batch_tokens);
    ModelInput input;
    while (!stopping.load(std::memory_order_acquire)) {
      watchdog();
      if (group.epoch() == 0) {
        auto joined = group.join(std::chrono::milliseconds(200));
        if (!joined.is_ok()) {
          HEARTH_LOG_INFO("rank {}: {}; attaching again", rank, joined.status().message());
          return Status::ok();
        }
        if (!*joined) continue;
        const uint64_t rank0_lora = group.segment().header().lora_nonce.load(std::memory_order_acquire);
        if (rank0_lora != 0 && rank0_lora != adapters.nonce()) {  // 0: rank 0 runs no adapter
          // Rank 0 serves another adapter segment than the one this rank attached (a loader
          // replaced it in between): its steps would name other adapters' slots.
          HEARTH_LOG_WARN("rank {}: rank 0 serves another adapter segment than {} (a loader replaced it; rank 0 "
                          "restarts to attach the new one); attaching again", rank, lora_path.string());
          group.leave(TpBreak::kNone);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          return Status::ok();
        }
        HEARTH_LOG_INFO("rank {} joined group epoch {}", rank, group.epoch());
        last_wait.clear();
      }
      auto got = group.next_step(input, std::chrono::milliseconds(200));
      if (!got.is_ok()) {
        HEARTH_LOG_INFO("rank {}: {}", rank, got.status().message());
        if (group.segment().retired()) return Status::ok();
        continue;  // the epoch is over: join the next one
      }
      if (!*got) continue;
      Status st = adapters.sync(*model, input);  // the adapters rank 0 runs this step with
      if (st.is_ok()) st = runner.run_shard(input);
      if (!st.is_ok()) {
        if (group.epoch() != 0) {  // not the group's failure: this rank cannot follow rank 0
          HEARTH_LOG_ERROR("rank {}: step failed: {}", rank, st.to_string());
          group.leave(TpBreak::kNone);
        }
        continue;
      }
      group.note_step(runner.last_step_ns());
    }
    return Status::ok();
  }
};

Result<std::unique_ptr<ShardServer>> ShardServer::create(const EngineOptions& options) {
  if (options.rank < 1) {
    return make_error(ErrorCode::kInternal, "rank {} serves the broker: EngineServer, not ShardServer", options.rank);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  HEARTH_RETURN_IF_ERROR(tp_group_check_backend(options.backend, options.tp));
  HEARTH_ASSIGN_OR_RETURN(impl->start, engine_rank_start(options));
  HEARTH_ASSIGN_OR_RETURN(impl->backend, make_backend(options.backend, {.threads = options.threads}));
  if (impl->backend->name().starts_with("cuda")) impl->stores = fd_stores_from_environment();
  const auto dir = options.shm_dir.empty() ? shm_dir_default() : options.shm_dir;
  HEARTH_RETURN_IF_ERROR(
      backend_use_loader_slab(*impl->backend, impl->start.weights, options.rank, dir, options.instance));
  impl->tp_path = segment_path(dir, options.instance, "tp");
  impl->lora_path = segment_path(dir, options.instance, "lora");
  impl->kv_path = segment_path(dir, options.instance, fmt::format("kv-rank{}", options.rank));
  std::unique_ptr<ShardServer> server(new ShardServer());
  server->impl_ = std::move(impl);
  return server;
}

ShardServer::~ShardServer() = default;

std::string ShardServer::describe() const {
  const Impl& m = *impl_;
  return fmt::format("{} on {}: rank {} of {}, {} threads on CPUs {}", m.start.weights.model_name, m.backend->name(),
                     m.options.rank, m.options.tp, m.backend->threads(), m.start.cpus.describe());
}

void ShardServer::stop() {
  impl_->stopping.store(true, std::memory_order_release);
  futex_signal(impl_->wake);
}

Status ShardServer::run() {
  Impl& m = *impl_;
  while (!m.stopping.load(std::memory_order_acquire)) {
    HEARTH_ASSIGN_OR_RETURN(std::optional<TpSegment> segment, m.find_group());
    if (!segment) continue;
    HEARTH_RETURN_IF_ERROR(m.serve(std::move(*segment)));
  }
  return Status::ok();
}

}  // namespace hearth
