#include "engine/serve/engine_server.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include "common/daemon.h"
#include "common/log.h"
#include "common/process.h"
#include "common/test_point.h"
#include "engine/backends.h"
#include "engine/core/backend.h"
#include "engine/core/draft_proposer.h"
#include "engine/core/driver.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/serve/kv_adoption.h"
#include "engine/serve/resident_adapters.h"
#include "engine/serve/loader_slab.h"
#include "engine/serve/resident_cache.h"
#include "engine/tp/tp_group.h"
#include "ipc/broker.h"
#include "ipc/fd_store.h"
#include "ipc/futex.h"
#include "ipc/kv_segment.h"
#include "ipc/weights_segment.h"

namespace hearth {

namespace {

Status env_int(const char* name, int32_t& target, int32_t min, int32_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return Status::ok();
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < min || n > max) {
    return make_error(ErrorCode::kInvalidArgument, "{}={} is not an integer in {}..{}", name, v, min, max);
  }
  target = static_cast<int32_t>(n);
  return Status::ok();
}

// One request the engine is running.
// How long a ring position may stay claimed but unfilled before the engine skips it:
// far longer than any producer takes between its claim and its fill.
constexpr uint64_t kRingHoleGraceNs = 2000000000ull;

// One request the engine is running: where its tokens go. The sequence itself (tokens,
// sampler, limits) is the driver's, under the same id.
struct Active {
  uint32_t slot = 0;
  uint32_t generation = 0;
  int owner = -1;
  int32_t owner_pid = 0;
  std::string client_request_id;  // for log lines
  int32_t n_prompt = 0;
};

}  // namespace

Status engine_options_from_env(EngineOptions& o) {
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_MAX_BATCH_SIZE", o.scheduler.max_batch_size, 1, 4096));
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_MAX_BATCHED_TOKENS", o.scheduler.max_batched_tokens, 1, 1 << 20));
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_PREFETCH_BUFFER", o.prefetch, 1, 65536));
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_KV_BLOCKS", o.kv_blocks, 1, 1 << 24));
  int32_t tp = o.tp;
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_TENSOR_PARALLEL", tp, 1, kMaxTensorParallel));
  o.tp = tp;
  return Status::ok();
}

Result<RankStart> engine_rank_start(const EngineOptions& o) {
  HEARTH_RETURN_IF_ERROR(instance_name_check(o.instance));
  if (o.tp < 1 || o.tp > kMaxTensorParallel) {
    return make_error(ErrorCode::kInvalidArgument, "--tp {} is out of range 1..{}", o.tp, kMaxTensorParallel);
  }
  if (o.rank < 0 || o.rank >= o.tp) {
    return make_error(ErrorCode::kInvalidArgument, "--rank {} is not a rank of a group of {} (ranks 0..{})", o.rank,
                      o.tp, o.tp - 1);
  }
  RankStart start;
  start.cpus = cpu_set_current();
  if (!o.cpus.empty()) {
    CpuSet want;
    if (o.cpus == "auto") {
      HEARTH_ASSIGN_OR_RETURN(want, cpu_set_share(start.cpus, o.rank, o.tp));
    } else {
      HEARTH_ASSIGN_OR_RETURN(want, cpu_set_parse(o.cpus));
    }
    HEARTH_RETURN_IF_ERROR(cpu_set_pin(want));
    start.cpus = want;
  }
  const auto dir = o.shm_dir.empty() ? shm_dir_default() : o.shm_dir;
  HEARTH_ASSIGN_OR_RETURN(start.weights, weights_attach(segment_path(dir, o.instance, "weights")));
  if (o.backend == "cpu") {
    // The loader said so too, but its log may be long gone: decode on the CPU reads every
    // weight each step, and pays for 4 KiB pages (docs/operations.md).
    const WeightsHeader& h = *start.weights.header;
    const uint64_t whole = huge_page_floor(h.prologue.total_bytes);
    if (h.huge_page_bytes < whole) {
      HEARTH_LOG_WARN("only {} of the weights' {} are on 2 MiB pages: decode runs up to 20% slower than it could; "
                      "see the loader's log and docs/operations.md",
                      human_bytes(h.huge_page_bytes), human_bytes(whole));
    }
  }
  const uint32_t split = start.weights.header->tp_size;
  if (split != static_cast<uint32_t>(o.tp)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the weights are split for {} rank{} (hearth-loader --tp {}), this engine was started with "
                      "--tp {}: start every rank with --tp {}, or load the weights again with --tp {}",
                      split, split == 1 ? "" : "s", split, o.tp, split, o.tp);
  }
  HEARTH_RETURN_IF_ERROR(model_rank_config(start.weights.config, o.rank, o.tp).status());
  return start;
}

struct EngineServer::Impl {
  EngineOptions options;
  AttachedWeights weights;
  std::optional<Broker> broker;
  std::unique_ptr<Backend> backend;
  // The process's fd stores (a CUDA backend's resident KV cache gives them its device
  // memory), and that memory, which outlives everything that uses it.
  std::vector<std::unique_ptr<FdStore>> stores;
  std::shared_ptr<void> device_kv;
  std::unique_ptr<Model> model;
  ResidentAdapters adapters;  // the instance's resident LoRA adapters (hearth-loader --lora)
  std::optional<KvCache> cache;
  std::unique_ptr<ResidentKv> resident;  // the KV segment's tables; none: a private cache
  std::optional<KvAdoption> adoption;    // with `resident`: a restarted engine's candidates
  std::unique_ptr<ModelRunner> runner;
  // Speculative decoding's draft model (--spec draft): its resident weights, attached
  // whole on rank 0, and a private KV cache as large as the target's.
  AttachedWeights draft_weights;
  std::unique_ptr<Model> draft_model;
  std::optional<KvCache> draft_cache;
  std::unique_ptr<ModelRunner> draft_runner;
  std::unique_ptr<Driver> driver;
  std::unique_ptr<TpGroup> group;
  std::vector<StepEvent> events;
  std::unordered_map<uint64_t, Active> active;  // by sequence id
  std::vector<uint64_t> by_slot;                // slot -> sequence id (0: none)
  std::vector<uint64_t> filling_suspects;       // Broker::sweep_orphans' memory
  uint64_t epoch = 0;
  uint64_t next_seq = 1;
  int32_t context = 0;
  std::atomic<bool> stopping{false};
  uint64_t last_scan_ns = 0;
  uint64_t orphans_freed = 0;  // slots of gone frontends returned to FREE
  std::map<uint64_t, uint64_t> ring_holes;  // unfilled ring position -> first seen (ns)
  std::vector<uint64_t> hole_scratch;
  uint64_t last_watchdog_ns = 0;
  // Half of what systemd asked for (WATCHDOG_USEC), at most a second.
  uint64_t watchdog_interval_ns = static_cast<uint64_t>(
      std::chrono::nanoseconds(daemon_watchdog_interval(std::chrono::milliseconds(1000))).count());

  void fail_slot(uint32_t slot, ErrorCode code, std::string_view message) {
    broker->slot_finish(slot, SlotState::kFailed, FinishReason::kError, static_cast<int32_t>(code), message);
  }

  // One line per request that ends here, under the client's request id, so that the
  // frontend's access log and this one can be joined.
  void log_end(const Active& a, std::string_view how) {
    if (!spdlog::should_log(spdlog::level::info)) return;
    const SlotHeader& s = broker->slot(a.slot);
    const uint64_t now = monotonic_ns();
    const uint64_t admitted = s.admitted_ns.load(std::memory_order_relaxed);
    auto ms = [](uint64_t from, uint64_t to) { return from != 0 && to >= from ? static_cast<double>(to - from) / 1e6 : 0.0; };
    HEARTH_LOG_INFO("request {} (slot {}): {}, {} prompt + {} output tokens, queued {:.1f} ms, first token {:.1f} ms, "
                    "{:.1f} ms in all",
                    a.client_request_id.empty() ? "-" : a.client_request_id, a.slot, how, a.n_prompt,
                    s.n_produced.load(std::memory_order_relaxed), ms(s.enqueued_ns, admitted),
                    ms(s.enqueued_ns, s.first_token_ns), ms(s.enqueued_ns, now));
  }

  // Takes a QUEUED (or, on resume, RUNNING) slot into the scheduler.
  void admit(uint32_t index, bool resume) {
    SlotHeader& s = broker->slot(index);
    if (by_slot[index] != 0) return;  // already ours
    uint32_t expected = static_cast<uint32_t>(SlotState::kQueued);
    if (!resume && !s.state.compare_exchange_strong(expected, static_cast<uint32_t>(SlotState::kRunning),
                                                    std::memory_order_acq_rel)) {
      return;  // not queued (any more): cancelled, taken, or a stale ring entry
    }
    if (resume) s.state.store(static_cast<uint32_t>(SlotState::kRunning), std::memory_order_release);
    HEARTH_TEST_POINT("engine.admit.running");  // RUNNING, not yet in the scheduler
    s.admitted_epoch = epoch;
    if (!resume) s.admitted_ns.store(monotonic_ns(), std::memory_order_release);
    auto request = broker->read_request(index, resume, context, model->config().vocab_size);
    if (!request.is_ok()) {
      fail_slot(index, request.status().code(), request.status().message());
      return;
    }
    if (const RequestSpec& spec = request->spec; spec.adapter >= 0) {
      // Before the adoption check too: it recomputes a row with the request's adapter.
      if (Status st = adapters.use(*model, spec.adapter, spec.adapter_id); !st.is_ok()) {
        fail_slot(index, st.code(), st.message());
        return;
      }
    }
    if (resume && adoption && adoption->consider(index, s.request_id, *request)) return;  // checked by adopt()
    enter(index, std::move(request).value(), {});
  }

  // With tensor parallelism, once the group formed: the tables hold only if every rank
  // kept its share of the cache (KvAdoption::reconcile_ranks).
  void reconcile_ranks() {
    if (adoption && options.tp > 1) adoption->reconcile_ranks(group->segment(), broker->n_slots());
  }

  // The candidates scan_slots found are checked and continued (KvAdoption::adopt).
  Status adopt() {
    if (!adoption) return Status::ok();
    const KvAdoption::VerifyBatch batch{
        .rows = std::min(options.scheduler.max_batch_size, options.scheduler.max_batched_tokens),
        .vocab_size = model->config().vocab_size};
    return adoption->adopt(*runner, batch, broker->header(), [this](uint32_t slot, SlotRequest r, KvSequence kv) {
      enter(slot, std::move(r), std::move(kv));
    });
  }

  // Gives a read request to the driver (with the blocks of an adopted cache, if any) and
  // to our tables.
  void enter(uint32_t index, SlotRequest r, KvSequence adopted) {
    const uint64_t id = next_seq++;
    if (resident) {
      // A sequence that adopts nothing starts its table afresh: what it held before (a
      // torn commit, a failed check) must not be trusted while it writes new blocks.
      if (adopted.blocks.empty()) resident->void_table(index);
      resident->owners[id] = {index, broker->slot(index).request_id, r.generation};
    }
    if (r.spec.pooling != Pooling::kNone &&
        static_cast<size_t>(model->config().dim) > broker->embedding_capacity()) {
      // The vector goes where the tokens would (18 floats a position): a context shorter
      // than dim / 18 positions cannot hold it.
      if (resident) resident->owners.erase(id);
      fail_slot(index, ErrorCode::kUnsupported,
                fmt::format("embeddings of this model ({} values) do not fit a request slot of {} positions: start "
                            "hearth-engine with a longer --ctx",
                            model->config().dim, broker->slot_tokens()));
      return;
    }
    const int32_t adapter = r.spec.adapter;
    SequenceRequest sequence{
        .tokens = std::move(r.tokens), .n_prompt = r.n_prompt, .spec = std::move(r.spec), .adapter = adapter};
    auto added = adopted.blocks.empty() ? driver->add(id, std::move(sequence))
                                        : driver->add(id, std::move(sequence), std::move(adopted));
    if (!added.is_ok() || *added != FinishReason::kNone) {
      if (resident) resident->owners.erase(id);
    }
    if (!added.is_ok()) {
      fail_slot(index, added.status().code(), added.status().message());
      return;
    }
    if (*added != FinishReason::kNone) {  // over before it started (see Driver::add)
      broker->slot_finish(index, SlotState::kDone, *added);
      return;
    }
    by_slot[index] = id;
    active.emplace(id, Active{index, r.generation, r.owner, r.owner_pid, std::move(r.client_request_id), r.n_prompt});
  }

  // Drops a sequence: from the driver and our tables.
  void forget(uint64_t id) {
    const auto it = active.find(id);
    if (it == active.end()) return;
    by_slot[it->second.slot] = 0;
    driver->remove(id);
    active.erase(it);
    if (resident) resident->owners.erase(id);
  }

  void take_new_requests(uint64_t now) {
    Ring ring = broker->ring();
    for (int32_t i = 0; i < options.prefetch; ++i) {
      const auto v = ring.pop();
      if (!v) {
        // A head position taken by a producer that never filled it (one that died in the
        // middle of a push) hides everything behind it; once it has been unfilled far
        // longer than any push takes, skip it. The slot itself is found by scan_slots.
        const auto seen = ring_holes.find(ring.head_position());
        if (seen != ring_holes.end() && now - seen->second > kRingHoleGraceNs && ring.skip_stalled_head()) {
          HEARTH_LOG_WARN("skipped a request-ring entry left unfinished by a dead frontend");
          ring_holes.erase(seen);
          continue;
        }
        break;
      }
      if (*v < broker->n_slots()) admit(static_cast<uint32_t>(*v), /*resume=*/false);
    }
  }

  // Notes when each unfilled ring position was first seen, so that holes left by dead
  // producers age together instead of one after the other at the head.
  void age_ring_holes(uint64_t now) {
    Ring ring = broker->ring();
    hole_scratch.clear();
    ring.unfilled_positions(hole_scratch);
    std::erase_if(ring_holes, [&](const auto& h) {
      return std::find(hole_scratch.begin(), hole_scratch.end(), h.first) == hole_scratch.end();
    });
    for (uint64_t pos : hole_scratch) ring_holes.emplace(pos, now);
  }

  // The slot table is the truth: QUEUED slots the ring did not deliver (a full ring, a
  // producer that died mid-push) are admitted here.
  void scan_slots(bool resume_running) {
    for (uint32_t i = 0; i < broker->n_slots(); ++i) {
      const uint32_t state = broker->slot(i).state.load(std::memory_order_acquire);
      if (state == static_cast<uint32_t>(SlotState::kQueued)) admit(i, false);
      if (resume_running && state == static_cast<uint32_t>(SlotState::kRunning)) admit(i, true);
    }
  }

  // Cancelled requests stop here; requests of a dead frontend are dropped and freed.
  void reap() {
    std::vector<uint64_t> gone;
    const uint64_t now = monotonic_ns();
    const auto stale = std::chrono::milliseconds(options.frontend_stale_ms);
    for (auto& [id, a] : active) {
      SlotHeader& s = broker->slot(a.slot);
      const bool cancelled = s.cancel.load(std::memory_order_acquire) != 0;
      const bool orphan = !cancelled && broker->owner_state(a.owner, a.owner_pid, stale, now) != OwnerState::kAlive;
      if (!cancelled && !orphan) continue;
      gone.push_back(id);
      log_end(a, orphan ? "dropped (its frontend is gone)" : "cancelled");
      broker->header().stat_cancelled.fetch_add(1, std::memory_order_relaxed);  // counted before the owner sees it
      broker->slot_finish(a.slot, SlotState::kCancelled, FinishReason::kCancelled);
      HEARTH_TEST_POINT("engine.reap.cancelled");  // finished as CANCELLED, still in the scheduler
      if (orphan) {
        // Nobody is left to read it; a CAS, because an owner that was only stalled may
        // free it first, and a new claim then hold it.
        broker->slot_release_from(a.slot, SlotState::kCancelled);
        broker->header().stat_reclaimed.fetch_add(1, std::memory_order_relaxed);
      }
    }
    for (uint64_t id : gone) forget(id);
  }

  // Adapter slots being unloaded go free once nothing names them: no sequence here, and no
  // request a frontend is filling, has queued or the engine runs (the broker's table).
  // Admissions check the slot in this same thread, so none is admitted after the free.
  void release_adapters() {
    adapters.release_unloaded([this](int32_t slot, uint64_t id) {
      if (driver->uses_adapter(slot)) return true;
      for (uint32_t i = 0; i < broker->n_slots(); ++i) {
        const SlotHeader& s = broker->slot(i);
        const auto state = static_cast<SlotState>(s.state.load(std::memory_order_acquire));
        if (state != SlotState::kFilling && state != SlotState::kQueued && state != SlotState::kRunning) continue;
        if (s.adapter == slot && s.adapter_id == id) return true;
      }
      return false;
    });
  }

  // Slots the engine is not running whose frontend is gone go back to FREE, so a dead
  // frontend leaks no slot (Broker::sweep_orphans).
  void sweep_orphans(uint64_t now) {
    const uint32_t freed =
        broker->sweep_orphans(by_slot, filling_suspects, std::chrono::milliseconds(options.frontend_stale_ms), now);
    orphans_freed += freed;
    if (freed > 0) HEARTH_LOG_INFO("freed {} slots of frontends that are gone ({} in all)", freed, orphans_freed);
  }

  // One step of the driver; its tokens go to their slots, finished and failed
  // sequences end there.
  Status step(bool& ran) {
    HEARTH_RETURN_IF_ERROR(driver->step(events, ran, static_cast<int64_t>(monotonic_ns() / 1000000)));
    std::array<bool, kMaxFrontends> wake{};
    for (const StepEvent& e : events) {
      const auto it = active.find(e.id);
      if (it == active.end()) continue;
      const Active& a = it->second;
      if (e.finish == FinishReason::kError) {
        log_end(a, "failed: " + e.error.message());
        fail_slot(a.slot, e.error.code(), e.error.message());
        by_slot[a.slot] = 0;
        active.erase(it);
        if (resident) resident->owners.erase(e.id);
        continue;
      }
      if (!e.embedding.empty()) {  // a pooled sequence: its vector, then DONE
        std::copy(e.embedding.begin(), e.embedding.end(), broker->embedding(a.slot));
        SlotHeader& slot = broker->slot(a.slot);
        slot.cached_tokens = e.cached_tokens;
        slot.first_token_ns = monotonic_ns();
        broker->slot_finish(a.slot, SlotState::kDone, e.finish);
        log_end(a, "embedded");
        by_slot[a.slot] = 0;
        active.erase(it);
        if (resident) resident->owners.erase(e.id);
        continue;
      }
      ProducedToken out{};
      out.id = e.token.id;
      out.logprob = e.token.logprob;
      for (int32_t k = 0; k < kMaxTopLogprobs; ++k) {  // -1: no alternative (a token put in, not drawn)
        out.top_ids[k] = k < e.token.n_top ? e.token.top_ids[static_cast<size_t>(k)] : -1;
        out.top_logprobs[k] = k < e.token.n_top ? e.token.top_logprobs[static_cast<size_t>(k)] : 0.0f;
      }
      broker->produced(a.slot)[e.n_produced - 1] = out;
      SlotHeader& slot = broker->slot(a.slot);
      if (slot.first_token_ns == 0) slot.cached_tokens = e.cached_tokens;  // published with the first token
      broker->slot_publish(a.slot, e.n_produced);
      if (a.owner >= 0 && a.owner < kMaxFrontends) wake[static_cast<size_t>(a.owner)] = true;
      if (e.finish != FinishReason::kNone) {
        broker->slot_finish(a.slot, SlotState::kDone, e.finish);
        log_end(a, finish_reason_name(e.finish));
        by_slot[a.slot] = 0;
        active.erase(it);
        if (resident) resident->owners.erase(e.id);
      }
    }
    if (!ran) return Status::ok();
    HEARTH_TEST_POINT("engine.step.sampled");  // tokens published, owners not yet woken
    for (int f = 0; f < kMaxFrontends; ++f) {
      if (wake[static_cast<size_t>(f)]) broker->wake_frontend(f);
    }
    BrokerHeader& h = broker->header();
    h.stat_steps.fetch_add(1, std::memory_order_relaxed);
    h.stat_tokens.fetch_add(static_cast<uint64_t>(driver->last_step_tokens()), std::memory_order_relaxed);
    return Status::ok();
  }

  // The group broke: what ran is dropped (the broker keeps every request's tokens) and
  // the allocator starts empty; the requests resume when the group is back. A resident
  // cache keeps its tables and index: nothing is allocated before the group forms again,
  // and then they are adopted like a restarted engine's (reconcile_ranks, adopt), where
  // every rank kept its share.
  void drop_sequences() {
    publish_spec_stats();
    spec_published = {};
    preemptions_before += driver->scheduler().preemptions();
    prefix_queries_before += driver->scheduler().prefix_queries();
    prefix_hits_before += driver->scheduler().prefix_hits();
    driver.reset();
    active.clear();
    std::fill(by_slot.begin(), by_slot.end(), 0);
    if (resident) resident->owners.clear();
    if (adoption) adoption->drop();
    cache->blocks() = BlockAllocator(cache->config().n_blocks);
    if (resident) cache->blocks().set_observer(resident.get());
    driver = std::make_unique<Driver>(*runner, driver_config());
  }

  // The model's tokens as text, from the loader's table, built when a request first
  // needs them and kept across drivers.
  std::shared_ptr<const grammar::Vocabulary> vocabulary;
  uint64_t preemptions_before = 0;  // by earlier engines and drivers
  uint64_t prefix_queries_before = 0, prefix_hits_before = 0;
  DriverConfig driver_config() {
    DriverConfig c{options.scheduler, context};
    c.journal = resident.get();
    c.spec = options.spec;
    c.draft = draft_runner.get();
    c.vocabulary = [this]() -> Result<std::shared_ptr<const grammar::Vocabulary>> {
      if (vocabulary) return vocabulary;
      HEARTH_ASSIGN_OR_RETURN(std::vector<std::string> table, weights_token_table(weights, model->config().vocab_size));
      HEARTH_ASSIGN_OR_RETURN(grammar::Vocabulary v, grammar::Vocabulary::build(std::move(table)));
      vocabulary = std::make_shared<const grammar::Vocabulary>(std::move(v));
      return vocabulary;
    };
    return c;
  }

  // The draft model the loader keeps beside the target (hearth-loader --draft-model),
  // attached and checked before anything else is set up.
  Status attach_draft(const std::filesystem::path& dir) {
    const auto path = segment_path(dir, options.instance, "draft-weights");
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return make_error(ErrorCode::kNotFound,
                        "--spec draft needs a draft model, and {} has none: start hearth-loader with --draft-model PATH "
                        "(hearth serve --draft-model PATH)",
                        path.string());
    }
    HEARTH_ASSIGN_OR_RETURN(draft_weights, weights_attach(path));
    if (draft_weights.header->tp_size != 1) {
      return make_error(ErrorCode::kInvalidArgument, "the draft model {} is split for {} ranks; it runs whole on rank 0",
                        path.string(), draft_weights.header->tp_size);
    }
    HEARTH_RETURN_IF_ERROR(draft_model_check(weights.config, draft_weights.config, context));
    // The loader checked the tokens when it published the draft; a segment left by an
    // earlier run is checked here too.
    return weights_draft_check(weights, draft_weights).with_context(path.string());
  }

  // The attached draft model on the backend, with a private KV cache of `blocks` blocks.
  Status open_draft(int32_t blocks, int32_t max_tokens) {
    const ModelConfig& dc = draft_weights.config;
    auto made = KvCache::create(*backend, {dc.n_layers, dc.kv_dim(), cache->config().block_size, blocks,
                                           cache->config().dtype});
    if (!made.is_ok()) return made.status().with_context("the draft model's KV cache");
    draft_cache.emplace(std::move(made).value());
    auto model = Model::create(dc, draft_weights.tensors(0), *backend, max_tokens, {.layout = draft_weights.layout});
    if (!model.is_ok()) return model.status().with_context("the draft model");
    draft_model = std::move(model).value();
    draft_runner = std::make_unique<ModelRunner>(*draft_model, *draft_cache);
    HEARTH_LOG_INFO("draft model {} ({}): {} MiB of KV cache", draft_weights.model_name, model_config_summary(dc),
                    draft_cache->bytes() >> 20);
    return Status::ok();
  }

  // The KV cache: in the instance's KV segment, adopted when the one there matches
  // (engine/serve/resident_cache.h says where K and V live and when the cache is private).
  Status open_cache(const KvCacheConfig& kv, const std::filesystem::path& dir) {
    // Segments of ranks this group does not have (an earlier, larger --tp) hold memory
    // for nothing.
    for (int r = std::max(1, options.tp); r < kMaxTensorParallel; ++r) {
      remove_rank_cache(segment_path(dir, options.instance, fmt::format("kv-rank{}", r)), options.instance, r, stores);
    }
    RankCacheOptions o;
    o.path = segment_path(dir, options.instance, "kv");
    o.instance = options.instance;
    o.rank = 0;
    o.tp = options.tp;
    o.adopt = options.kv_adopt;
    o.weights = weights.header->fingerprint;
    o.owner_id = broker->id();
    o.n_slots = broker->n_slots();
    o.max_blocks = (context + kv.block_size - 1) / kv.block_size + 1;
    HEARTH_ASSIGN_OR_RETURN(RankCache opened, open_rank_cache(*backend, kv, std::move(o), stores));
    cache.emplace(std::move(opened.cache));
    device_kv = std::move(opened.device_memory);
    if (!opened.segment) return Status::ok();
    const uint64_t* seed = opened.segment->header().chain_seed;
    options.scheduler.chain_seed = BlockKey{seed[0], seed[1]};  // the keys its index was written under
    resident = std::make_unique<ResidentKv>(std::move(*opened.segment));
    cache->blocks().set_observer(resident.get());
    adoption.emplace(*resident, *cache);
    return Status::ok();
  }

  // What the driver's speculation did since the last call, added to the broker's counts
  // (which outlive drivers and engines).
  SpecStats spec_published;
  void publish_spec_stats() {
    static_assert(kMaxSpecTokens <= kSpecPositions);
    BrokerHeader& h = broker->header();
    const SpecStats& s = driver->spec_stats();
    h.stat_spec_drafts.fetch_add(s.drafts - spec_published.drafts, std::memory_order_relaxed);
    h.stat_spec_draft_tokens.fetch_add(s.draft_tokens - spec_published.draft_tokens, std::memory_order_relaxed);
    h.stat_spec_accepted.fetch_add(s.accepted - spec_published.accepted, std::memory_order_relaxed);
    for (size_t i = 0; i < s.accepted_at.size(); ++i) {
      h.stat_spec_accepted_at[i].fetch_add(s.accepted_at[i] - spec_published.accepted_at[i], std::memory_order_relaxed);
    }
    spec_published = s;
  }

  void publish_stats() {
    publish_spec_stats();
    BrokerHeader& h = broker->header();
    const Scheduler& sched = driver->scheduler();
    h.stat_running.store(static_cast<uint32_t>(sched.n_running()), std::memory_order_relaxed);
    h.stat_preemptions.store(preemptions_before + sched.preemptions(), std::memory_order_relaxed);
    h.stat_prefix_queries.store(prefix_queries_before + sched.prefix_queries(), std::memory_order_relaxed);
    h.stat_prefix_hits.store(prefix_hits_before + sched.prefix_hits(), std::memory_order_relaxed);
    h.stat_waiting.store(static_cast<uint32_t>(sched.n_waiting()), std::memory_order_relaxed);
    h.stat_kv_blocks_total.store(static_cast<uint32_t>(cache->config().n_blocks), std::memory_order_relaxed);
    h.stat_kv_blocks_used.store(static_cast<uint32_t>(sched.blocks_used()), std::memory_order_relaxed);
  }
};

Result<std::unique_ptr<EngineServer>> EngineServer::create(const EngineOptions& options) {
  if (options.rank != 0) {
    return make_error(ErrorCode::kInternal, "rank {} runs a ShardServer, not the serving loop", options.rank);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  HEARTH_ASSIGN_OR_RETURN(RankStart start, engine_rank_start(options));
  impl->weights = std::move(start.weights);
  const auto dir = options.shm_dir.empty() ? shm_dir_default() : options.shm_dir;
  const ModelConfig& c = impl->weights.config;
  impl->context = std::min(c.max_context, options.context > 0 ? options.context : 4096);
  if (options.block_size < 1 || options.slots < 1) {
    return make_error(ErrorCode::kInvalidArgument, "slots and block size must be positive");
  }
  if (options.spec.method == SpecMethod::kDraft) HEARTH_RETURN_IF_ERROR(impl->attach_draft(dir));
  HEARTH_ASSIGN_OR_RETURN(impl->adapters, ResidentAdapters::attach(segment_path(dir, options.instance, "lora"),
                                                                  impl->weights.header->fingerprint));
  int32_t blocks = options.kv_blocks;
  if (blocks <= 0) {
    const int32_t per_seq = (impl->context + options.block_size - 1) / options.block_size;
    blocks = std::max<int32_t>(4, per_seq * std::max<int32_t>(1, static_cast<int32_t>(options.slots) / 4));
  }
  // The group: this rank's entry in the instance's tp segment, with the geometry every
  // rank builds its share of the KV cache and activations from.
  const int32_t max_tokens = options.scheduler.max_batched_tokens;
  TpSegmentConfig tp{};
  tp.tp_size = static_cast<uint32_t>(options.tp);
  tp.weights = impl->weights.header->fingerprint;
  tp.geometry = {impl->context, blocks, options.block_size, static_cast<uint32_t>(options.kv_dtype), max_tokens,
                 c.n_heads, c.n_kv_heads, 0};
  tp.step_capacity = model_input_max_bytes(max_tokens, options.scheduler.max_batch_size,
                                           (impl->context + options.block_size - 1) / options.block_size + 1);
  tp.reduce_floats = options.tp > 1 ? static_cast<uint64_t>(max_tokens) * static_cast<uint64_t>(c.dim) : 1;
  HEARTH_RETURN_IF_ERROR(tp_group_check_backend(options.backend, options.tp));
  HEARTH_ASSIGN_OR_RETURN(TpSegment segment, TpSegment::open_or_create(segment_path(dir, options.instance, "tp"), tp));
  HEARTH_RETURN_IF_ERROR(segment.register_rank(0));
  segment.header().lora_nonce.store(impl->adapters.nonce(), std::memory_order_release);
  impl->group = std::make_unique<TpGroup>(std::move(segment), TpGroupOptions{
                                                                  .rank = 0,
                                                                  .collective_timeout = std::chrono::milliseconds(options.collective_timeout_ms),
                                                                  .rank_stale = std::chrono::milliseconds(options.rank_stale_ms),
                                                                  .cuda_device = tp_group_cuda_device(options.backend),
                                                              });
  HEARTH_ASSIGN_OR_RETURN(impl->backend, make_backend(options.backend, {.threads = options.threads}));
  if (impl->backend->name().starts_with("cuda")) impl->stores = fd_stores_from_environment();
  HEARTH_RETURN_IF_ERROR(backend_use_loader_slab(*impl->backend, impl->weights, 0, dir, options.instance));
  impl->group->note_cpus(start.cpus.mask64(), static_cast<uint32_t>(start.cpus.cpus.size()),
                         static_cast<uint32_t>(impl->backend->threads()));
  HEARTH_ASSIGN_OR_RETURN(Broker broker, Broker::open_or_create(segment_path(dir, options.instance, "broker"),
                                                                {options.slots, static_cast<uint32_t>(impl->context),
                                                                 options.grammar_bytes}));
  impl->broker.emplace(std::move(broker));
  // Before frontends can see this engine: the adapter segment requests may name.
  impl->broker->header().engine_lora_nonce.store(impl->adapters.nonce(), std::memory_order_release);
  const KvCacheConfig kv{c.n_layers, c.kv_dim() / options.tp, options.block_size, blocks, options.kv_dtype};
  HEARTH_RETURN_IF_ERROR(impl->open_cache(kv, dir));
  HEARTH_ASSIGN_OR_RETURN(impl->model, Model::create(c, impl->weights.tensors(0), *impl->backend, max_tokens,
                                                          {.layout = impl->weights.layout,
                                                           .comm = &impl->group->communicator(),
                                                           .max_adapters = impl->adapters.slots(),
                                                           .max_lora_rank = impl->adapters.max_rank()}));
  impl->runner = std::make_unique<ModelRunner>(*impl->model, *impl->cache,
                                               options.tp > 1 ? impl->group.get() : nullptr);
  if (options.spec.method == SpecMethod::kDraft) HEARTH_RETURN_IF_ERROR(impl->open_draft(blocks, max_tokens));
  impl->driver = std::make_unique<Driver>(*impl->runner, impl->driver_config());
  impl->preemptions_before = impl->broker->header().stat_preemptions.load();  // counted by engines before this one
  impl->prefix_queries_before = impl->broker->header().stat_prefix_queries.load();
  impl->prefix_hits_before = impl->broker->header().stat_prefix_hits.load();
  impl->by_slot.assign(impl->broker->n_slots(), 0);
  impl->filling_suspects.assign(impl->broker->n_slots(), 0);
  std::unique_ptr<EngineServer> server(new EngineServer());
  server->impl_ = std::move(impl);
  return server;
}

EngineServer::~EngineServer() {
  if (impl_ && impl_->broker) impl_->broker->engine_stop();
}

uint64_t EngineServer::epoch() const { return impl_->epoch; }

std::string EngineServer::describe() const {
  const Impl& m = *impl_;
  const SpecConfig& spec = m.options.spec;
  return fmt::format("{} on {}{}: context {}, {} slots, {} KV blocks of {} ({}, {} MiB), batch {} sequences / {} tokens{}",
                     m.weights.model_name, m.backend->name(),
                     m.options.tp > 1 ? fmt::format(" (rank 0 of {})", m.options.tp) : std::string(), m.context,
                     m.broker->n_slots(), m.cache->config().n_blocks,
                     m.cache->config().block_size, kernels::kv_dtype_name(m.cache->config().dtype),
                     m.cache->bytes() >> 20, m.options.scheduler.max_batch_size,
                     m.options.scheduler.max_batched_tokens,
                     spec.method == SpecMethod::kNone
                         ? std::string()
                         : fmt::format(", speculative {} (up to {} tokens)", spec_method_name(spec.method), spec.max_tokens));
}

void EngineServer::stop() {
  impl_->stopping.store(true, std::memory_order_release);
  futex_signal(impl_->broker->header().engine_wake);
}

Status EngineServer::run(const std::function<void()>& on_serving) {
  Impl& m = *impl_;
  TpGroup& group = *m.group;
  bool serving = false, announced = false;
  uint64_t waiting_since = 0;
  while (!m.stopping.load(std::memory_order_acquire)) {
    uint64_t now = monotonic_ns();
    if (now - m.last_watchdog_ns > m.watchdog_interval_ns) {
      daemon_notify_watchdog();
      m.last_watchdog_ns = now;
    }
    if (!group.active()) {
      if (serving) {  // the group broke: frontends see no engine until it is back
        m.broker->engine_stop();
        HEARTH_LOG_WARN("{}; {} requests wait for the group to form again", group.broken_message(), m.active.size());
        m.drop_sequences();
        serving = false;
        waiting_since = now;
      }
      HEARTH_ASSIGN_OR_RETURN(const bool formed, group.form(std::chrono::milliseconds(200)));
      if (!formed) {
        if (waiting_since == 0) waiting_since = now;
        if (now - waiting_since > 5000000000ull) {
          HEARTH_LOG_INFO("waiting for {} more rank(s) of the group to start", group.size() - 1);
          waiting_since = now;
        }
        continue;
      }
      waiting_since = 0;
      m.broker->header().engine_lora_nonce.store(m.adapters.nonce(), std::memory_order_release);
      m.epoch = m.broker->engine_start();
      m.reconcile_ranks();
      m.scan_slots(/*resume_running=*/true);  // requests a previous engine or epoch left in flight
      HEARTH_RETURN_IF_ERROR(m.adopt());        // those whose KV cache it left are checked and continued
      HEARTH_LOG_INFO("engine epoch {}, group epoch {} of {} rank(s): {} requests in flight at start", m.epoch,
                      group.epoch(), group.size(), m.active.size());
      serving = true;
      if (!announced && on_serving) on_serving();
      announced = true;
    }
    const uint32_t seen = m.broker->header().engine_wake.load(std::memory_order_acquire);
    m.broker->engine_heartbeat();
    group.heartbeat();
    now = monotonic_ns();
    m.take_new_requests(now);
    if (now - m.last_scan_ns > 200000000ull) {
      if (m.adapters.replaced()) {
        // Its slots are numbered in the old file; the new one may hold other adapters there.
        m.broker->engine_stop();
        group.leave(TpBreak::kStopped);
        return make_error(ErrorCode::kUnavailable,
                          "the adapter segment was replaced or removed (a loader started with other --max-loras, "
                          "--max-lora-rank or model): exiting, so that a new engine attaches the one there now");
      }
      m.scan_slots(/*resume_running=*/false);
      m.sweep_orphans(now);
      m.age_ring_holes(now);
      m.last_scan_ns = now;
    }
    m.reap();
    m.release_adapters();
    if (!group.check_members().is_ok()) continue;  // the top of the loop waits for the group again
    bool ran = false;
    if (Status st = m.step(ran); !st.is_ok()) {
      if (!group.active()) continue;
      return st;
    }
    if (ran) group.note_step(m.runner->last_step_ns());
    m.publish_stats();
    // Idle: sleep until a request comes (static batching also wakes to check its timeout).
    if (!ran) {
      const int wait_ms = m.options.scheduler.static_batch_timeout_ms > 0 ? 5 : 100;
      futex_wait(m.broker->header().engine_wake, seen, std::chrono::milliseconds(wait_ms));
    }
  }
  m.broker->engine_stop();
  group.leave(TpBreak::kStopped);
  return Status::ok();
}

}  // namespace hearth
