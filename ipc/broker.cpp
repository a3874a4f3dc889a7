#include "ipc/broker.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <random>

#include "common/process.h"
#include "common/test_point.h"
#include "ipc/futex.h"

namespace hearth {

std::string_view slot_state_name(uint32_t state) {
  switch (static_cast<SlotState>(state)) {
    case SlotState::kFree: return "FREE";
    case SlotState::kFilling: return "FILLING";
    case SlotState::kQueued: return "QUEUED";
    case SlotState::kRunning: return "RUNNING";
    case SlotState::kDone: return "DONE";
    case SlotState::kCancelled: return "CANCELLED";
    case SlotState::kFailed: return "FAILED";
  }
  return "INVALID";
}

namespace {

uint64_t align64(uint64_t v) { return (v + 63) / 64 * 64; }

uint64_t ring_capacity_for(uint32_t n_slots) {
  uint64_t c = 1;
  while (c < 2ull * n_slots) c <<= 1;
  return c;
}

uint64_t slot_stride_for(uint32_t slot_tokens, uint32_t grammar_bytes) {
  return align64(sizeof(SlotHeader) + uint64_t{slot_tokens} * sizeof(int32_t) +
                 uint64_t{slot_tokens} * sizeof(ProducedToken) + uint64_t{kMaxLogitBias} * sizeof(LogitBias) +
                 grammar_bytes);
}

constexpr uint32_t kMaxGrammarBytes = 16u << 20;

}  // namespace

uint64_t broker_bytes(const BrokerConfig& c) {
  return kBrokerHeaderBytes + align64(ring_bytes(ring_capacity_for(c.n_slots))) +
         uint64_t{c.n_slots} * slot_stride_for(c.slot_tokens, c.grammar_bytes);
}

SlotHeader& Broker::slot(uint32_t index) const {
  return *reinterpret_cast<SlotHeader*>(segment_.data() + header_->slots_offset + index * header_->slot_stride);
}

int32_t* Broker::prompt(uint32_t index) const {
  return reinterpret_cast<int32_t*>(reinterpret_cast<std::byte*>(&slot(index)) + sizeof(SlotHeader));
}

ProducedToken* Broker::produced(uint32_t index) const {
  return reinterpret_cast<ProducedToken*>(prompt(index) + header_->slot_tokens);
}

LogitBias* Broker::logit_bias(uint32_t index) const {
  return reinterpret_cast<LogitBias*>(produced(index) + header_->slot_tokens);
}

char* Broker::grammar(uint32_t index) const { return reinterpret_cast<char*>(logit_bias(index) + kMaxLogitBias); }

Status Broker::validate(uint64_t file_bytes) const {
  const std::string p = segment_.path().string();
  const BrokerHeader& h = *header_;
  HEARTH_RETURN_IF_ERROR(segment_prologue_check(h.prologue, kBrokerSegment, file_bytes, segment_.path()));
  BrokerConfig c{h.n_slots, h.slot_tokens, h.slot_grammar_bytes};
  if (h.n_slots < 1 || h.n_slots > 65536 ||
      h.slot_tokens < 16 || h.slot_tokens > (1u << 24) || h.slot_grammar_bytes > kMaxGrammarBytes ||
      broker_bytes(c) != file_bytes || h.slot_stride != slot_stride_for(h.slot_tokens, h.slot_grammar_bytes) ||
      h.ring_offset != kBrokerHeaderBytes ||
      h.slots_offset != kBrokerHeaderBytes + align64(ring_bytes(ring_capacity_for(h.n_slots)))) {
    return make_error(ErrorCode::kFormat, "{} has an inconsistent header (sizes do not match): remove it", p);
  }
  const auto* ring = reinterpret_cast<const RingHeader*>(segment_.data() + h.ring_offset);
  if (ring->capacity != ring_capacity_for(h.n_slots) || ring->mask != ring->capacity - 1) {
    return make_error(ErrorCode::kFormat, "{} has a corrupt request ring: remove it", p);
  }
  return Status::ok();
}

Result<Broker> Broker::attach(const std::filesystem::path& path) {
  auto seg = ShmSegment::attach(path, /*writable=*/true);
  if (!seg.is_ok()) {
    if (seg.status().code() == ErrorCode::kNotFound) {
      return make_error(ErrorCode::kUnavailable, "no broker segment at {}: is hearth-engine running?", path.string());
    }
    return seg.status();
  }
  Broker b;
  b.segment_ = std::move(seg).value();
  if (b.segment_.size() < kBrokerHeaderBytes) {
    return make_error(ErrorCode::kFormat, "{} is too small to be a broker segment", path.string());
  }
  b.header_ = reinterpret_cast<BrokerHeader*>(b.segment_.data());
  HEARTH_RETURN_IF_ERROR(b.validate(b.segment_.size()));
  return b;
}

Result<Broker> Broker::open_or_create(const std::filesystem::path& path, const BrokerConfig& config) {
  if (std::filesystem::exists(path)) {
    auto existing = attach(path);
    if (existing.is_ok()) {
      if (existing->n_slots() == config.n_slots && existing->slot_tokens() == config.slot_tokens &&
          existing->grammar_capacity() == config.grammar_bytes) {
        return existing;
      }
      // Other dimensions: requests in it cannot be resumed by this engine anyway.
    }
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  if (config.n_slots < 1 || config.n_slots > 65536 || config.slot_tokens < 16 || config.slot_tokens > (1u << 24)) {
    return make_error(ErrorCode::kInvalidArgument, "broker needs 1..65536 slots of 16..16M tokens");
  }
  if (config.grammar_bytes > kMaxGrammarBytes) {
    return make_error(ErrorCode::kInvalidArgument, "--max-grammar-bytes must be at most {}", kMaxGrammarBytes);
  }
  HEARTH_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::create(path, broker_bytes(config)));
  Broker b;
  b.header_ = new (seg.data()) BrokerHeader{};
  BrokerHeader& h = *b.header_;
  segment_prologue_init(h.prologue, kBrokerSegment, broker_bytes(config));
  h.n_slots = config.n_slots;
  h.slot_tokens = config.slot_tokens;
  h.slot_grammar_bytes = config.grammar_bytes;
  h.slot_stride = slot_stride_for(config.slot_tokens, config.grammar_bytes);
  h.ring_offset = kBrokerHeaderBytes;
  h.slots_offset = kBrokerHeaderBytes + align64(ring_bytes(ring_capacity_for(config.n_slots)));
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  h.created_unix_ms = static_cast<uint64_t>(now.tv_sec) * 1000 + static_cast<uint64_t>(now.tv_nsec) / 1000000;
  h.nonce = static_cast<uint32_t>(std::random_device{}());
  ring_init(seg.data() + h.ring_offset, ring_capacity_for(config.n_slots));
  for (uint32_t i = 0; i < config.n_slots; ++i) {
    auto* s = new (seg.data() + h.slots_offset + i * h.slot_stride) SlotHeader{};
    s->owner.store(-1, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
  seg.publish();
  b.segment_ = std::move(seg);
  return b;
}

Result<int> Broker::frontend_register() {
  const int32_t me = ::getpid();
  const uint64_t start = process_start_time(me);
  for (int i = 0; i < kMaxFrontends; ++i) {
    FrontendEntry& e = header_->frontends[i];
    int32_t pid = e.pid.load(std::memory_order_acquire);
    const bool free = pid == 0 || !process_alive(pid, e.start_time.load(std::memory_order_relaxed));
    if (free && e.pid.compare_exchange_strong(pid, me, std::memory_order_acq_rel)) {
      e.start_time.store(start, std::memory_order_relaxed);
      e.draining.store(0, std::memory_order_relaxed);
      e.heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
      return i;
    }
  }
  return make_error(ErrorCode::kResourceExhausted, "all {} frontend entries of {} are held by running frontends",
                    kMaxFrontends, path().string());
}

void Broker::frontend_heartbeat(int frontend) const {
  header_->frontends[frontend].heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
}

void Broker::frontend_unregister(int frontend) const {
  FrontendEntry& e = header_->frontends[frontend];
  e.heartbeat_ns.store(0, std::memory_order_relaxed);
  e.pid.store(0, std::memory_order_release);
}

std::optional<uint32_t> Broker::slot_claim(int frontend, uint32_t* generation) const {
  for (uint32_t i = 0; i < n_slots(); ++i) {
    SlotHeader& s = slot(i);
    uint32_t expected = static_cast<uint32_t>(SlotState::kFree);
    if (s.state.load(std::memory_order_relaxed) != expected) continue;
    if (s.state.compare_exchange_strong(expected, static_cast<uint32_t>(SlotState::kFilling),
                                        std::memory_order_acq_rel)) {
      HEARTH_TEST_POINT("broker.claim.filling");  // FILLING, owner not yet written
      const uint32_t mine = s.generation.fetch_add(1, std::memory_order_relaxed) + 1;
      // A reader that sees any field this claim resets sees the new claim count too (the
      // frontend's second look at its claim, after reading a round's tokens and fields).
      std::atomic_thread_fence(std::memory_order_release);
      if (generation != nullptr) *generation = mine;
      s.cancel.store(0, std::memory_order_relaxed);
      s.n_produced.store(0, std::memory_order_relaxed);
      s.owner.store(frontend, std::memory_order_relaxed);
      s.owner_pid.store(::getpid(), std::memory_order_relaxed);
      s.request_id = header_->next_request_id.fetch_add(1, std::memory_order_relaxed);
      s.finish = static_cast<uint32_t>(FinishReason::kNone);
      s.error_code = 0;
      s.error[0] = '\0';
      s.enqueued_ns = s.first_token_ns = s.finished_ns = 0;
      s.cached_tokens = 0;
      s.admitted_ns.store(0, std::memory_order_relaxed);
      std::memset(s.client_request_id, 0, sizeof(s.client_request_id));
      return i;
    }
  }
  return std::nullopt;
}

void Broker::slot_submit(uint32_t index) const {
  SlotHeader& s = slot(index);
  s.enqueued_ns = monotonic_ns();
  s.state.store(static_cast<uint32_t>(SlotState::kQueued), std::memory_order_release);
  HEARTH_TEST_POINT("broker.submit.queued");  // QUEUED, not yet in the ring
  // The ring is the doorbell and keeps arrival order; a full ring is harmless because the
  // engine also finds QUEUED slots by scanning.
  ring().push(index);
  HEARTH_TEST_POINT("broker.submit.pushed");  // in the ring, the engine not yet woken
  futex_signal(header_->engine_wake);
}

void Broker::slot_cancel(uint32_t index) const {
  slot(index).cancel.store(1, std::memory_order_release);
  futex_signal(header_->engine_wake);
}

void Broker::slot_release(uint32_t index) const {
  HEARTH_TEST_POINT("broker.release");
  SlotHeader& s = slot(index);
  s.owner.store(-1, std::memory_order_relaxed);
  s.owner_pid.store(0, std::memory_order_relaxed);
  s.state.store(static_cast<uint32_t>(SlotState::kFree), std::memory_order_release);
}

bool Broker::slot_release_from(uint32_t index, SlotState from) const {
  SlotHeader& s = slot(index);
  auto expected = static_cast<uint32_t>(from);
  if (!s.state.compare_exchange_strong(expected, static_cast<uint32_t>(SlotState::kFilling), std::memory_order_acq_rel)) {
    return false;
  }
  slot_release(index);
  return true;
}

bool Broker::slot_withdraw(uint32_t index) const {
  SlotHeader& s = slot(index);
  auto expected = static_cast<uint32_t>(SlotState::kQueued);
  if (!s.state.compare_exchange_strong(expected, static_cast<uint32_t>(SlotState::kFilling), std::memory_order_acq_rel)) {
    return false;  // the engine took it first
  }
  slot_release(index);
  return true;
}

bool Broker::engine_alive(std::chrono::milliseconds max_age) const {
  const uint64_t beat = header_->engine_heartbeat_ns.load(std::memory_order_acquire);
  if (beat == 0) return false;
  const uint64_t now = monotonic_ns();
  return now < beat || now - beat <= static_cast<uint64_t>(max_age.count()) * 1000000ull;
}

uint64_t Broker::engine_start() const {
  const uint64_t epoch = header_->engine_epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  HEARTH_TEST_POINT("broker.engine_start");  // a new epoch, the ring not yet repaired
  header_->engine_pid.store(::getpid(), std::memory_order_relaxed);
  header_->engine_start_time.store(process_start_time(::getpid()), std::memory_order_relaxed);
  // Cells a dead predecessor claimed but never released would block producers forever.
  ring().release_claimed();
  engine_heartbeat();
  return epoch;
}

void Broker::engine_heartbeat() const {
  header_->engine_heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
}

void Broker::engine_stop() const { header_->engine_heartbeat_ns.store(0, std::memory_order_release); }

void Broker::slot_publish(uint32_t index, int32_t n_produced) const {
  SlotHeader& s = slot(index);
  if (s.first_token_ns == 0) s.first_token_ns = monotonic_ns();
  HEARTH_TEST_POINT("broker.publish");  // the token written, not yet published
  s.n_produced.store(n_produced, std::memory_order_release);
}

void Broker::slot_finish(uint32_t index, SlotState state, FinishReason finish, int32_t error_code,
                         std::string_view error) const {
  SlotHeader& s = slot(index);
  s.finish = static_cast<uint32_t>(finish);
  s.error_code = error_code;
  const size_t n = std::min(error.size(), sizeof(s.error) - 1);
  if (n > 0) std::memcpy(s.error, error.data(), n);  // an empty view may have no data
  s.error[n] = '\0';
  s.finished_ns = monotonic_ns();
  HEARTH_TEST_POINT("broker.finish");  // the outcome written, the state not yet terminal
  s.state.store(static_cast<uint32_t>(state), std::memory_order_release);
  wake_frontend(s.owner.load(std::memory_order_relaxed));
}

void Broker::wake_frontend(int frontend) const {
  if (frontend < 0 || frontend >= kMaxFrontends) return;
  futex_signal(header_->frontends[frontend].wake);
}

Result<SlotRequest> Broker::read_request(uint32_t index, bool resume, int32_t context, int32_t vocab_size) const {
  const SlotHeader& s = slot(index);
  SlotRequest r;
  r.generation = s.generation.load(std::memory_order_acquire);
  r.owner = s.owner.load(std::memory_order_relaxed);
  r.owner_pid = s.owner_pid.load(std::memory_order_relaxed);
  const int64_t n_prompt = s.n_prompt;
  const int64_t n_produced = resume ? s.n_produced.load(std::memory_order_acquire) : 0;
  const int64_t room = std::min<int64_t>(context, slot_tokens());
  if (n_prompt < 1 || n_produced < 0 || n_prompt + n_produced >= room) {
    return make_error(ErrorCode::kOutOfRange, "the prompt has {} tokens; the context holds {} (prompt plus output)",
                      n_prompt, room);
  }
  if (s.n_stop_ids < 0 || s.n_stop_ids > kMaxStopIds || (s.flags & ~kSlotFlags) != 0 || s.n_logit_bias < 0 ||
      s.n_logit_bias > kMaxLogitBias || s.grammar_bytes > header_->slot_grammar_bytes) {
    return make_error(ErrorCode::kInvalidArgument, "the request in the slot is malformed");
  }
  const LogitBias* bias = logit_bias(index);
  r.n_prompt = static_cast<int32_t>(n_prompt);
  r.spec = {.sampling = s.sampling,
            .max_tokens = s.max_tokens,
            .min_tokens = s.min_tokens,
            .top_logprobs = s.top_logprobs,
            .ignore_stop = (s.flags & kSlotIgnoreStop) != 0,
            .stop_ids = {s.stop_ids, s.stop_ids + s.n_stop_ids},
            .logit_bias = {bias, bias + s.n_logit_bias},
            .grammar = {grammar(index), s.grammar_bytes},
            .pooling = static_cast<Pooling>((s.flags & kSlotPoolingMask) >> kSlotPoolingShift),
            .reasoning_budget = (s.flags & kSlotThinkingBudget) != 0 ? s.reasoning_budget : -1,
            .reasoning_start = (s.flags & kSlotThinkingBudget) != 0 ? s.reasoning_start : -1,
            .reasoning_end = (s.flags & kSlotThinkingBudget) != 0 ? s.reasoning_end : -1,
            .reasoning_open = (s.flags & kSlotReasoningOpen) != 0,
            .adapter = s.adapter_id != 0 ? s.adapter : -1,  // no load has id 0
            .adapter_id = s.adapter_id};
  // The engine's trust boundary: another process wrote every value.
  HEARTH_RETURN_IF_ERROR(request_spec_validate(r.spec, {.vocab_size = vocab_size, .grammar_bytes = header_->slot_grammar_bytes}));
  // Only for log lines: anything but printable ASCII becomes '?'.
  r.client_request_id.assign(s.client_request_id, ::strnlen(s.client_request_id, sizeof(s.client_request_id)));
  for (char& c : r.client_request_id) {
    if (c <= 0x20 || c >= 0x7F) c = '?';
  }
  r.tokens.assign(prompt(index), prompt(index) + n_prompt);
  const ProducedToken* out = produced(index);
  for (int64_t i = 0; i < n_produced; ++i) r.tokens.push_back(out[i].id);
  for (const int32_t t : r.tokens) {
    if (t < 0 || t >= vocab_size) return make_error(ErrorCode::kOutOfRange, "token id {} is outside the vocabulary", t);
  }
  return r;
}

OwnerState Broker::owner_state(int index, int32_t owner_pid, std::chrono::milliseconds stale, uint64_t now) const {
  if (index < 0 || index >= kMaxFrontends) return OwnerState::kExited;
  const FrontendEntry& f = header_->frontends[index];
  const int32_t pid = f.pid.load(std::memory_order_acquire);
  if (pid == 0 || pid != owner_pid || !process_alive(pid, f.start_time.load(std::memory_order_relaxed))) {
    return OwnerState::kExited;
  }
  const uint64_t beat = f.heartbeat_ns.load(std::memory_order_acquire);
  const bool fresh = now < beat || now - beat <= static_cast<uint64_t>(stale.count()) * 1000000ull;
  return fresh ? OwnerState::kAlive : OwnerState::kSilent;
}

uint32_t Broker::sweep_orphans(std::span<const uint64_t> engine_holds, std::span<uint64_t> filling_suspects,
                               std::chrono::milliseconds stale, uint64_t now) const {
  uint32_t freed = 0;
  for (uint32_t i = 0; i < n_slots(); ++i) {
    uint64_t no_suspect = 0;
    uint64_t& suspect = i < filling_suspects.size() ? filling_suspects[i] : no_suspect;
    const uint64_t seen = suspect;
    suspect = 0;
    if (i < engine_holds.size() && engine_holds[i] != 0) continue;  // the engine's own to finish
    SlotHeader& s = slot(i);
    uint32_t state = s.state.load(std::memory_order_acquire);
    if (state == static_cast<uint32_t>(SlotState::kFree) || state == static_cast<uint32_t>(SlotState::kRunning)) {
      continue;
    }
    const OwnerState owner =
        owner_state(s.owner.load(std::memory_order_relaxed), s.owner_pid.load(std::memory_order_relaxed), stale, now);
    if (owner == OwnerState::kAlive) continue;
    if (state == static_cast<uint32_t>(SlotState::kFilling)) {
      // A silent owner might still be writing. An exited one (or none yet: a claimer
      // writes its name just after the claim) must look so twice, a sweep apart, with
      // the same generation: a live claimer names itself long before that.
      if (owner != OwnerState::kExited) continue;
      const uint64_t mark = (uint64_t{1} << 32) | s.generation.load(std::memory_order_relaxed);
      if (seen != mark) {
        suspect = mark;
        continue;
      }
    }
    if (s.state.compare_exchange_strong(state, static_cast<uint32_t>(SlotState::kFree), std::memory_order_acq_rel)) {
      ++freed;
    }
  }
  if (freed > 0) header_->stat_reclaimed.fetch_add(freed, std::memory_order_relaxed);
  return freed;
}

}  // namespace hearth
