#include "engine/engine_server.h"

#include <algorithm>
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
#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "ipc/broker.h"
#include "ipc/futex.h"
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

struct Active {
  uint32_t slot = 0;
  uint32_t generation = 0;
  int owner = -1;
  int32_t owner_pid = 0;
  std::vector<TokenId> tokens;  // prompt, then produced
  int32_t n_prompt = 0;
  int32_t max_tokens = 0;
  int32_t top_logprobs = 0;
  bool ignore_stop = false;
  std::vector<TokenId> stop_ids;
  std::unique_ptr<Sampler> sampler;
  int32_t produced() const { return static_cast<int32_t>(tokens.size()) - n_prompt; }
};

}  // namespace

Status engine_options_from_env(EngineOptions& o) {
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_MAX_BATCH_SIZE", o.scheduler.max_batch_size, 1, 4096));
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_MAX_BATCHED_TOKENS", o.scheduler.max_batched_tokens, 1, 1 << 20));
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_PREFETCH_BUFFER", o.prefetch, 1, 65536));
  HEARTH_RETURN_IF_ERROR(env_int("HEARTH_KV_BLOCKS", o.kv_blocks, 1, 1 << 24));
  return Status::ok();
}

struct EngineServer::Impl {
  EngineOptions options;
  AttachedWeights weights;
  std::optional<Broker> broker;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::optional<KvCache> cache;
  std::unique_ptr<Scheduler> scheduler;
  std::unordered_map<uint64_t, Active> active;  // by sequence id
  std::vector<uint64_t> by_slot;                // slot -> sequence id (0: none)
  std::vector<uint64_t> filling_suspects;       // Broker::sweep_orphans' memory
  uint64_t epoch = 0;
  uint64_t next_seq = 1;
  int32_t context = 0;
  std::atomic<bool> stopping{false};
  std::vector<float> logits;
  std::vector<float> scratch;
  uint64_t last_scan_ns = 0;
  uint64_t orphans_freed = 0;  // slots of gone frontends returned to FREE
  std::map<uint64_t, uint64_t> ring_holes;  // unfilled ring position -> first seen (ns)
  std::vector<uint64_t> hole_scratch;
  uint64_t last_watchdog_ns = 0;
  // Half of what systemd asked for (WATCHDOG_USEC), at most a second.
  uint64_t watchdog_interval_ns = static_cast<uint64_t>(
      std::chrono::nanoseconds(daemon_watchdog_interval(std::chrono::milliseconds(1000))).count());

  void fail_slot(uint32_t slot, ErrorCode code, std::string_view message) {
    broker->slot_finish(slot, SlotState::kFailed, SlotFinish::kError, static_cast<int32_t>(code), message);
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
    const ModelConfig& c = model->config();
    auto request = broker->read_request(index, resume, context, c.vocab_size);
    if (!request.is_ok()) {
      fail_slot(index, request.status().code(), request.status().message());
      return;
    }
    SlotRequest& r = request.value();
    const SlotSampling& q = r.sampling;
    SamplingParams p{q.temperature,      q.top_k,          q.top_p, q.min_p, q.repetition_penalty,
                     q.presence_penalty, q.frequency_penalty, q.seed};
    if (Status st = sampling_params_validate(p); !st.is_ok()) {
      fail_slot(index, ErrorCode::kInvalidArgument, st.message());
      return;
    }
    const int32_t n_produced = r.n_produced();
    Active a;
    a.slot = index;
    a.generation = r.generation;
    a.owner = r.owner;
    a.owner_pid = r.owner_pid;
    a.n_prompt = r.n_prompt;
    a.max_tokens = r.max_tokens;
    a.top_logprobs = r.top_logprobs;
    a.ignore_stop = r.ignore_stop;
    a.stop_ids = std::move(r.stop_ids);
    a.tokens = std::move(r.tokens);
    // A predecessor may have died between publishing a final token and finishing.
    if (n_produced > 0 && !a.ignore_stop &&
        std::find(a.stop_ids.begin(), a.stop_ids.end(), a.tokens.back()) != a.stop_ids.end()) {
      broker->slot_finish(index, SlotState::kDone, SlotFinish::kStop);
      return;
    }
    if (n_produced >= a.max_tokens) {
      broker->slot_finish(index, SlotState::kDone, SlotFinish::kLength);
      return;
    }
    a.sampler = std::make_unique<Sampler>(p, c.vocab_size);
    a.sampler->set_position(static_cast<uint64_t>(n_produced));
    const uint64_t id = next_seq++;
    if (Status st = scheduler->add(id, static_cast<int32_t>(a.tokens.size())); !st.is_ok()) {
      fail_slot(index, st.code(), st.message());
      return;
    }
    by_slot[index] = id;
    active.emplace(id, std::move(a));
  }

  // Drops a sequence: from the scheduler and our tables.
  void forget(uint64_t id) {
    const auto it = active.find(id);
    if (it == active.end()) return;
    by_slot[it->second.slot] = 0;
    scheduler->remove(id);
    active.erase(it);
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
      broker->header().stat_cancelled.fetch_add(1, std::memory_order_relaxed);  // counted before the owner sees it
      broker->slot_finish(a.slot, SlotState::kCancelled, SlotFinish::kCancelled);
      HEARTH_TEST_POINT("engine.reap.cancelled");  // finished as CANCELLED, still in the scheduler
      if (orphan) {
        broker->slot_release(a.slot);  // nobody is left to read it
        broker->header().stat_reclaimed.fetch_add(1, std::memory_order_relaxed);
      }
    }
    for (uint64_t id : gone) forget(id);
  }

  // Slots the engine is not running whose frontend is gone go back to FREE, so a dead
  // frontend leaks no slot (Broker::sweep_orphans).
  void sweep_orphans(uint64_t now) {
    const uint32_t freed =
        broker->sweep_orphans(by_slot, filling_suspects, std::chrono::milliseconds(options.frontend_stale_ms), now);
    orphans_freed += freed;
    if (freed > 0) HEARTH_LOG_INFO("freed {} slots of frontends that are gone ({} in all)", freed, orphans_freed);
  }

  // One scheduler step through the model. Returns false when there was nothing to run.
  Status step(bool& ran) {
    StepPlan plan = scheduler->plan(static_cast<int64_t>(monotonic_ns() / 1000000));
    for (uint64_t id : plan.unschedulable) {
      const auto it = active.find(id);
      if (it == active.end()) continue;
      fail_slot(it->second.slot, ErrorCode::kResourceExhausted,
                "the request needs more KV cache than the engine has: lower max_tokens or raise --kv-blocks");
      by_slot[it->second.slot] = 0;
      active.erase(it);
    }
    ran = !plan.seqs.empty();
    if (!ran) return Status::ok();

    std::vector<TokenId> tokens;
    std::vector<int32_t> positions, rows;
    std::vector<BatchSequence> seqs;
    tokens.reserve(static_cast<size_t>(plan.tokens));
    for (const PlannedSeq& p : plan.seqs) {
      const Active& a = active.at(p.id);
      const auto begin = static_cast<int32_t>(tokens.size());
      for (int32_t i = 0; i < p.count; ++i) {
        tokens.push_back(a.tokens[static_cast<size_t>(p.begin + i)]);
        positions.push_back(p.begin + i);
      }
      seqs.push_back({begin, p.count, scheduler->kv(p.id)});
      if (p.sample) rows.push_back(begin + p.count - 1);
    }
    const size_t vocab = static_cast<size_t>(model->config().vocab_size);
    if (logits.size() < rows.size() * vocab) logits.resize(rows.size() * vocab);
    HEARTH_TEST_POINT("engine.step.planned");
    HEARTH_RETURN_IF_ERROR(model->forward({tokens, positions, seqs, rows}, *cache, logits.data()));
    HEARTH_TEST_POINT("engine.step.forwarded");  // KV written, nothing sampled yet

    std::vector<uint64_t> finished;
    std::vector<bool> wake(kMaxFrontends, false);
    size_t row = 0;
    for (const PlannedSeq& p : plan.seqs) {
      scheduler->advance(p);
      if (!p.sample) continue;
      Active& a = active.at(p.id);
      float* l = logits.data() + row++ * vocab;
      sample_into(a, l, vocab);
      if (a.owner >= 0 && a.owner < kMaxFrontends) wake[static_cast<size_t>(a.owner)] = true;
      const TokenId last = a.tokens.back();
      SlotFinish finish = SlotFinish::kNone;
      if (!a.ignore_stop && std::find(a.stop_ids.begin(), a.stop_ids.end(), last) != a.stop_ids.end()) {
        finish = SlotFinish::kStop;
      } else if (a.produced() >= a.max_tokens || static_cast<int32_t>(a.tokens.size()) >= context) {
        finish = SlotFinish::kLength;
      }
      if (finish != SlotFinish::kNone) {
        broker->slot_finish(a.slot, SlotState::kDone, finish);
        finished.push_back(p.id);
      }
    }
    HEARTH_TEST_POINT("engine.step.sampled");  // tokens published, owners not yet woken
    for (uint64_t id : finished) forget(id);
    for (int f = 0; f < kMaxFrontends; ++f) {
      if (wake[static_cast<size_t>(f)]) broker->wake_frontend(f);
    }
    BrokerHeader& h = broker->header();
    h.stat_steps.fetch_add(1, std::memory_order_relaxed);
    h.stat_tokens.fetch_add(static_cast<uint64_t>(plan.tokens), std::memory_order_relaxed);
    return Status::ok();
  }

  // Samples the next token of `a` from its logits row, records it with its log
  // probabilities in the slot and publishes it.
  void sample_into(Active& a, float* l, size_t vocab) {
    // Log-probabilities come from the model's own distribution, before any penalty.
    float max = l[0];
    for (size_t i = 1; i < vocab; ++i) max = std::max(max, l[i]);
    double sum = 0.0;
    for (size_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(l[i] - max));
    const float log_z = max + static_cast<float>(std::log(sum));
    ProducedToken out{};
    if (a.top_logprobs > 0) {
      std::vector<std::pair<float, int32_t>> top;
      top.reserve(static_cast<size_t>(a.top_logprobs) + 1);
      for (size_t i = 0; i < vocab; ++i) {
        if (top.size() < static_cast<size_t>(a.top_logprobs) || l[i] > top.back().first) {
          top.emplace_back(l[i], static_cast<int32_t>(i));
          std::sort(top.begin(), top.end(), [](const auto& x, const auto& y) {
            return x.first > y.first || (x.first == y.first && x.second < y.second);
          });
          if (top.size() > static_cast<size_t>(a.top_logprobs)) top.pop_back();
        }
      }
      for (size_t k = 0; k < top.size(); ++k) {
        out.top_ids[k] = top[k].second;
        out.top_logprobs[k] = top[k].first - log_z;
      }
    }
    const std::span<const TokenId> prompt(a.tokens.data(), static_cast<size_t>(a.n_prompt));
    const std::span<const TokenId> output(a.tokens.data() + a.n_prompt, static_cast<size_t>(a.produced()));
    std::vector<float>& row = scratch;
    row.assign(l, l + vocab);  // the sampler modifies its input
    const SampledToken t = a.sampler->sample(row, prompt, output);
    out.id = t.id;
    out.logprob = l[t.id] - log_z;
    const int32_t n = a.produced();
    broker->produced(a.slot)[n] = out;
    a.tokens.push_back(t.id);
    broker->slot_publish(a.slot, n + 1);
  }

  void publish_stats() {
    BrokerHeader& h = broker->header();
    h.stat_running.store(static_cast<uint32_t>(scheduler->n_running()), std::memory_order_relaxed);
    h.stat_waiting.store(static_cast<uint32_t>(scheduler->n_waiting()), std::memory_order_relaxed);
    h.stat_kv_blocks_total.store(static_cast<uint32_t>(cache->config().n_blocks), std::memory_order_relaxed);
    h.stat_kv_blocks_used.store(static_cast<uint32_t>(scheduler->blocks_used()), std::memory_order_relaxed);
  }
};

Result<std::unique_ptr<EngineServer>> EngineServer::create(const EngineOptions& options) {
  HEARTH_RETURN_IF_ERROR(instance_name_check(options.instance));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const auto dir = options.shm_dir.empty() ? shm_dir_default() : options.shm_dir;
  HEARTH_ASSIGN_OR_RETURN(impl->weights, weights_attach(segment_path(dir, options.instance, "weights")));
  if (impl->weights.header->tp_size != 1) {
    return make_error(ErrorCode::kUnsupported, "the weights are split for {} ranks; this engine runs tensor parallel 1",
                      impl->weights.header->tp_size);
  }
  const ModelConfig& c = impl->weights.config;
  impl->context = std::min(c.max_context, options.context > 0 ? options.context : 4096);
  if (options.block_size < 1 || options.slots < 1) {
    return make_error(ErrorCode::kInvalidArgument, "slots and block size must be positive");
  }
  int32_t blocks = options.kv_blocks;
  if (blocks <= 0) {
    const int32_t per_seq = (impl->context + options.block_size - 1) / options.block_size;
    blocks = std::max<int32_t>(4, per_seq * std::max<int32_t>(1, static_cast<int32_t>(options.slots) / 4));
  }
  impl->backend = make_cpu_backend({false, options.threads});
  HEARTH_ASSIGN_OR_RETURN(auto cache,
                          KvCache::create(*impl->backend, {c.n_layers, c.kv_dim(), options.block_size, blocks}));
  impl->cache.emplace(std::move(cache));
  HEARTH_ASSIGN_OR_RETURN(impl->model, LlamaModel::create(c, impl->weights.tensors(0), *impl->backend,
                                                          options.scheduler.max_batched_tokens));
  impl->scheduler = std::make_unique<Scheduler>(options.scheduler, impl->cache->blocks(), options.block_size);
  HEARTH_ASSIGN_OR_RETURN(Broker broker, Broker::open_or_create(segment_path(dir, options.instance, "broker"),
                                                                {options.slots, static_cast<uint32_t>(impl->context)}));
  impl->broker.emplace(std::move(broker));
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
  return fmt::format("{} on {}: context {}, {} slots, {} KV blocks of {}, batch {} sequences / {} tokens",
                     m.weights.model_name, m.backend->name(), m.context, m.broker->n_slots(), m.cache->config().n_blocks,
                     m.cache->config().block_size, m.options.scheduler.max_batch_size,
                     m.options.scheduler.max_batched_tokens);
}

void EngineServer::stop() {
  impl_->stopping.store(true, std::memory_order_release);
  futex_signal(impl_->broker->header().engine_wake);
}

Status EngineServer::run() {
  Impl& m = *impl_;
  m.epoch = m.broker->engine_start();
  m.scan_slots(/*resume_running=*/true);  // requests a previous engine left in flight
  HEARTH_LOG_INFO("engine epoch {}: {} requests in flight at start", m.epoch, m.active.size());
  while (!m.stopping.load(std::memory_order_acquire)) {
    const uint32_t seen = m.broker->header().engine_wake.load(std::memory_order_acquire);
    m.broker->engine_heartbeat();
    const uint64_t now = monotonic_ns();
    if (now - m.last_watchdog_ns > m.watchdog_interval_ns) {
      daemon_notify_watchdog();
      m.last_watchdog_ns = now;
    }
    m.take_new_requests(now);
    if (now - m.last_scan_ns > 200000000ull) {
      m.scan_slots(/*resume_running=*/false);
      m.sweep_orphans(now);
      m.age_ring_holes(now);
      m.last_scan_ns = now;
    }
    m.reap();
    bool ran = false;
    HEARTH_RETURN_IF_ERROR(m.step(ran));
    m.publish_stats();
    // Idle: sleep until a request comes (static batching also wakes to check its timeout).
    if (!ran) {
      const int wait_ms = m.options.scheduler.static_batch_timeout_ms > 0 ? 5 : 100;
      futex_wait(m.broker->header().engine_wake, seen, std::chrono::milliseconds(wait_ms));
    }
  }
  m.broker->engine_stop();
  return Status::ok();
}

}  // namespace hearth
