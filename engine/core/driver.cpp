#include "engine/core/driver.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/log.h"
#include "common/test_point.h"
#include "engine/core/draft_proposer.h"

namespace hearth {

Driver::Driver(ModelRunner& runner, const DriverConfig& config)
    : runner_(runner),
      config_(config),
      grammars_(config.vocabulary),
      scheduler_(config.scheduler, runner.cache().blocks(), runner.cache().config().block_size,
                 [this](uint64_t id) { return std::span<const TokenId>(seqs_.at(id).request.tokens); }) {
  scheduler_.set_journal(config.journal);
  if (config.spec.method == SpecMethod::kNgram) {
    proposer_ = std::make_unique<NgramProposer>(config_.spec);
  } else if (config.spec.method == SpecMethod::kDraft) {
    HEARTH_CHECK(config.draft != nullptr) << "speculative decoding with a draft model needs the draft model";
    // A draft model's catch-up adds at most a step's token budget to the step.
    proposer_ = std::make_unique<DraftProposer>(*config.draft, config.scheduler.max_batched_tokens);
  }
  if (proposer_) {
    config_.spec.max_tokens = std::clamp(config_.spec.max_tokens, 1, kMaxSpecTokens);
    scheduler_.set_drafts([this](uint64_t id, int32_t room) { return draft(id, room); });
  }
  scratch_.row.reserve(static_cast<size_t>(runner.vocab_size()));
  scratch_.top.reserve(kMaxTopLogprobs + 1);
}

int32_t Driver::blocks_total() const { return runner_.cache().config().n_blocks; }

Result<FinishReason> Driver::add(uint64_t id, SequenceRequest request) {
  KvSequence none;
  return add_sequence(id, std::move(request), none);
}

Result<FinishReason> Driver::add(uint64_t id, SequenceRequest request, KvSequence adopted) {
  auto added = add_sequence(id, std::move(request), adopted);
  if (!adopted.blocks.empty()) {  // not taken: the journal lets go of them first
    if (config_.journal != nullptr) config_.journal->released(id);
    kv_sequence_release(runner_.cache().blocks(), adopted);
  }
  return added;
}

Result<FinishReason> Driver::add_sequence(uint64_t id, SequenceRequest r, KvSequence& adopted) {
  const auto n_tokens = static_cast<int32_t>(r.tokens.size());
  if (r.n_prompt < 1 || r.n_prompt > n_tokens) {
    return make_error(ErrorCode::kInvalidArgument, "a sequence needs a prompt of 1..{} tokens, not {}", n_tokens,
                      r.n_prompt);
  }
  const int32_t vocab = runner_.vocab_size();
  HEARTH_RETURN_IF_ERROR(request_spec_validate(r.spec, {.vocab_size = vocab, .grammar_bytes = SIZE_MAX}));
  for (TokenId t : r.tokens) {
    if (t < 0 || t >= vocab) return make_error(ErrorCode::kOutOfRange, "token {} is outside the vocabulary", t);
  }
  if (seqs_.contains(id)) return make_error(ErrorCode::kInvalidArgument, "sequence {} is already running", id);
  if (r.adapter != -1 && !runner_.model().adapter_loaded(r.adapter)) {
    return make_error(ErrorCode::kInvalidArgument, "adapter slot {} holds no LoRA adapter", r.adapter);
  }
  const uint64_t salt = runner_.model().adapter_id(r.adapter);
  const int32_t produced = n_tokens - r.n_prompt;
  const bool pooled = r.spec.pooling != Pooling::kNone;
  if (pooled && produced != 0) {
    return make_error(ErrorCode::kInvalidArgument, "an embedding request produces no tokens, yet {} follow its prompt",
                      produced);
  }
  std::optional<grammar::GrammarMatcher> matcher;
  if (!r.spec.grammar.empty()) {
    HEARTH_ASSIGN_OR_RETURN(auto compiled, grammars_.get(r.spec.grammar));
    matcher.emplace(std::move(compiled), r.spec.stop_ids);
    // A resumed sequence: the grammar follows what it produced before.
    for (int32_t i = r.n_prompt; i < n_tokens; ++i) {
      if (Status st = matcher->accept(r.tokens[static_cast<size_t>(i)]); !st.is_ok()) {
        return make_error(ErrorCode::kInvalidArgument, "the tokens produced before do not follow the grammar: {}",
                          st.message());
      }
    }
    if (produced > 0 && matcher->terminated()) return FinishReason::kStop;
  }
  if (pooled && n_tokens >= config_.max_sequence_tokens) {
    return make_error(ErrorCode::kOutOfRange, "the input has {} tokens, but the context holds {}", n_tokens,
                      config_.max_sequence_tokens - 1);
  }
  if (produced == 0 && n_tokens >= config_.max_sequence_tokens) {
    return make_error(ErrorCode::kOutOfRange,
                      "the prompt has {} tokens, but the context holds {} (prompt plus at least one generated token)",
                      n_tokens, config_.max_sequence_tokens - 1);
  }
  // A predecessor may have stopped between producing a final token and saying so.
  if (produced > 0 && !r.spec.ignore_stop &&
      std::find(r.spec.stop_ids.begin(), r.spec.stop_ids.end(), r.tokens.back()) != r.spec.stop_ids.end()) {
    return FinishReason::kStop;
  }
  if (!pooled && (produced >= r.spec.max_tokens || n_tokens >= config_.max_sequence_tokens)) return FinishReason::kLength;
  // A mean or first-token pooling needs every position's state: nothing from the prefix
  // cache, nothing adopted.
  if (pooled) {
    HEARTH_RETURN_IF_ERROR(scheduler_.add(id, n_tokens, r.spec.pooling == Pooling::kLast, salt));
  } else {
    HEARTH_RETURN_IF_ERROR(adopted.blocks.empty() ? scheduler_.add(id, n_tokens, true, salt)
                                                  : scheduler_.add(id, n_tokens, adopted, salt));
  }
  Sampler sampler(r.spec.sampling, vocab);
  Seq seq{std::move(r), std::move(sampler), std::move(matcher), {}};
  // A resumed sequence's reasoning, as far as its output went. The token after a spent
  // budget was put in, not drawn, so the sampler skips it; an end still due when the
  // predecessor stopped comes after the next token.
  seq.in_reasoning = seq.request.spec.reasoning_open;
  int32_t forced = 0;
  for (int32_t i = seq.request.n_prompt; i < n_tokens; ++i) {
    if (reasoning_due(seq)) ++forced;
    track_reasoning(seq, seq.request.tokens[static_cast<size_t>(i)], i == seq.request.n_prompt);
  }
  seq.sampler.set_position(static_cast<uint64_t>(produced - forced));
  seqs_.emplace(id, std::move(seq));
  return FinishReason::kNone;
}

bool Driver::uses_adapter(int32_t slot) const {
  return std::any_of(seqs_.begin(), seqs_.end(), [slot](const auto& kv) { return kv.second.request.adapter == slot; });
}

void Driver::remove(uint64_t id) {
  scheduler_.remove(id);
  seqs_.erase(id);
  if (proposer_) proposer_->forget(id);
}

FinishReason Driver::finish_of(const Seq& s) const {
  const SequenceRequest& r = s.request;
  if (!r.spec.ignore_stop && std::find(r.spec.stop_ids.begin(), r.spec.stop_ids.end(), r.tokens.back()) != r.spec.stop_ids.end()) {
    return FinishReason::kStop;
  }
  if (s.matcher && s.matcher->terminated()) return FinishReason::kStop;  // the output is complete
  if (s.produced() >= r.spec.max_tokens || static_cast<int32_t>(r.tokens.size()) >= config_.max_sequence_tokens) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

// Samples the next token of `s` from its row of logits (shaped by its bias, min_tokens
// and grammar) and appends it.
Status Driver::sample(Seq& s, const float* l, TokenResult& out) {
  const SequenceRequest& r = s.request;
  const std::vector<TokenId>& tokens = r.tokens;
  const std::span<const TokenId> prompt(tokens.data(), static_cast<size_t>(r.n_prompt));
  const std::span<const TokenId> output(tokens.data() + r.n_prompt, static_cast<size_t>(s.produced()));
  RowShaping shaping;
  shaping.bias = r.spec.logit_bias;
  const bool too_early = s.produced() < r.spec.min_tokens;
  if (s.matcher) {
    const int32_t left = std::min(r.spec.max_tokens - s.produced(), config_.max_sequence_tokens - static_cast<int32_t>(tokens.size()));
    HEARTH_RETURN_IF_ERROR(s.matcher->fill_mask(s.mask, left));
    if (too_early) {  // no end before min_tokens, unless the grammar allows nothing else
      grammar::TokenMask without = s.mask;
      for (TokenId id : r.spec.stop_ids) {
        if (id >= 0 && id < runner_.vocab_size()) without.clear(id);
      }
      if (without.count() > 0) s.mask = std::move(without);
    }
    shaping.allowed = s.mask.words;
  } else if (too_early) {
    shaping.banned = r.spec.stop_ids;
  }
  out = sample_row(s.sampler, std::span(l, static_cast<size_t>(runner_.vocab_size())), r.spec.top_logprobs, prompt, output,
                   scratch_, shaping.empty() ? nullptr : &shaping);
  if (s.matcher) {
    if (Status st = s.matcher->accept(out.id); !st.is_ok()) {
      return make_error(ErrorCode::kInternal, "sampled token {} that the grammar does not allow: {}", out.id,
                        st.message());
    }
  }
  s.request.tokens.push_back(out.id);
  return Status::ok();
}

// The plan's step through the model: logits rows to sample on the host, or rows the
// backend sampled.
Status Driver::forward(const StepPlan& plan, std::span<const float>& logits, std::span<const SampledRow>& sampled) {
  // A row a request shapes (grammar, bias, min_tokens) is sampled on the host, and so is
  // the rest of its step.
  const bool host_sampling = !runner_.samples() || std::any_of(plan.seqs.begin(), plan.seqs.end(), [&](const PlannedSeq& p) {
    return samples(p) && seqs_.at(p.id).shaped();
  });
  input_.clear(runner_.cache().config().block_size);
  drafted_.clear();
  // Drafts join their sequences' tokens for the step's input and sampling rows, and leave
  // them again however the step ends: only what verify() keeps stays.
  struct Undraft {
    Driver& d;
    ~Undraft() {
      for (const auto& [id, known] : d.drafted_) d.seqs_.at(id).request.tokens.resize(known);
    }
  } undraft{*this};
  for (const PlannedSeq& p : plan.seqs) {
    Seq& s = seqs_.at(p.id);
    std::vector<TokenId>& tokens = s.request.tokens;
    if (p.draft > 0) {  // its drafts follow its known tokens until the step has run
      drafted_.emplace_back(p.id, tokens.size());
      tokens.insert(tokens.end(), s.draft.begin(), s.draft.begin() + p.draft);
    }
    const int32_t row0 = input_.n_tokens();
    HEARTH_RETURN_IF_ERROR(input_.add_sequence(
        std::span(tokens).subspan(static_cast<size_t>(p.begin), static_cast<size_t>(p.count)), p.begin,
        scheduler_.kv(p.id)->blocks, samples(p) ? 1 + p.draft : 0, s.request.adapter));
    if (s.pooled()) {
      const auto [first, count] = pooled_rows(s, p, row0);
      input_.want_hidden(first, count);
    }
  }
  HEARTH_TEST_POINT("engine.step.planned");
  if (!host_sampling) {
    sample_rows_.clear();
    for (const PlannedSeq& p : plan.seqs) {
      if (!samples(p)) continue;
      const Seq& s = seqs_.at(p.id);
      const std::vector<TokenId>& tokens = s.request.tokens;
      const auto produced = static_cast<size_t>(s.produced() - p.draft);
      for (int32_t i = 0; i <= p.draft; ++i) {  // a drafted row as if the drafts before it were sampled
        SampleRow& r = sample_rows_.emplace_back();
        r.sampling = s.request.spec.sampling;
        r.draw = s.sampler.position() + static_cast<uint64_t>(i);
        r.top_logprobs = s.request.spec.top_logprobs;
        r.prompt = std::span(tokens.data(), static_cast<size_t>(s.request.n_prompt));
        r.output = std::span(tokens.data() + s.request.n_prompt, produced + static_cast<size_t>(i));
      }
    }
    HEARTH_ASSIGN_OR_RETURN(sampled, runner_.run_sampled(input_, sample_rows_));
  } else {
    HEARTH_ASSIGN_OR_RETURN(logits, runner_.run(input_));
  }
  return Status::ok();
}

Status Driver::step(std::vector<StepEvent>& events, bool& ran, int64_t now_ms) {
  events.clear();
  if (proposer_) {  // what a drafted token must beat, from steps like the last one without its drafts
    const int32_t running = scheduler_.n_running();
    spec_threshold_ = spec_threshold(step_cost_.fit(), std::max(running, 1),
                                     std::max(last_step_tokens_ - last_step_drafts_, running), proposer_->token_ns());
    proposer_->begin_step();
  }
  const StepPlan plan = scheduler_.plan(now_ms);
  for (uint64_t id : plan.unschedulable) {
    if (seqs_.erase(id) == 0) continue;
    if (proposer_) proposer_->forget(id);
    StepEvent& e = events.emplace_back();
    e.id = id;
    e.finish = FinishReason::kError;
    e.error = make_error(ErrorCode::kResourceExhausted,
                         "the request needs more KV cache than the engine has: lower max_tokens or raise --kv-blocks");
  }
  ran = !plan.seqs.empty();
  last_step_tokens_ = plan.tokens;
  if (!ran) return Status::ok();

  std::span<const float> logits;
  std::span<const SampledRow> sampled;
  HEARTH_RETURN_IF_ERROR(forward(plan, logits, sampled));
  HEARTH_TEST_POINT("engine.step.forwarded");  // KV written, nothing sampled yet (on the host)
  if (proposer_) step_cost_.observe(plan.tokens, runner_.last_step_ns());

  const auto vocab = static_cast<size_t>(runner_.vocab_size());
  const auto dim = static_cast<size_t>(runner_.model().config().dim);
  const std::span<const float> hidden = runner_.hidden();
  size_t row = 0, hidden_row = 0;
  int32_t drafted = 0;
  finished_.clear();
  for (const PlannedSeq& p : plan.seqs) {
    Seq& s = seqs_.at(p.id);
    const bool token = samples(p);
    int32_t kept = 0;
    bool forced = false;
    if (token) kept = verify(s, p, logits, sampled, row, events, forced);
    drafted += p.draft;
    scheduler_.advance(p, kept);  // after the kept tokens joined the sequence: the prefix cache reads them
    if (config_.journal != nullptr) {
      // The fingerprint of the row its last token was sampled from: from the logits on the
      // host, from the sampled row where the backend sampled (the logits never left it).
      const size_t last = row + static_cast<size_t>(kept);
      RowCheck check;
      const bool checked = token && (!logits.empty() || (!sampled.empty() && sampled[last].top_id >= 0));
      if (checked) {
        check.pos = p.begin + p.count - p.draft - 1 + kept;
        if (!logits.empty()) {
          const float* l = logits.data() + last * vocab;
          check.token = static_cast<TokenId>(std::max_element(l, l + vocab) - l);
          check.logit = l[check.token];
        } else {
          check.token = sampled[last].top_id;
          check.logit = sampled[last].top_logit;
        }
      }
      config_.journal->committed(p.id, *scheduler_.kv(p.id), checked ? &check : nullptr);
    }
    if (token) row += 1 + static_cast<size_t>(p.draft);
    if (s.pooled()) {
      const auto n = static_cast<size_t>(pooled_rows(s, p, 0).second);
      std::vector<float> vector;
      pool(s, p, hidden.subspan(hidden_row * dim, n * dim), p.sample ? &vector : nullptr);
      hidden_row += n;
      if (!p.sample) continue;
      StepEvent& e = events.emplace_back();
      e.id = p.id;
      e.embedding = std::move(vector);
      e.cached_tokens = scheduler_.cached_tokens(p.id);
      e.finish = FinishReason::kStop;
      finished_.push_back(p.id);
      continue;
    }
    if (!forced) continue;
    // The thinking budget is spent: its end goes in as the next token (published like a
    // sampled one), and the answer is sampled after it.
    const TokenId end = s.request.spec.reasoning_end;
    s.request.tokens.push_back(end);
    track_reasoning(s, end, false);
    scheduler_.append(p.id, 1);
    StepEvent& e = events.emplace_back();
    e.id = p.id;
    e.token.id = end;
    e.n_produced = s.produced();
    e.cached_tokens = scheduler_.cached_tokens(p.id);
    e.finish = finish_of(s);
    if (e.finish != FinishReason::kNone) finished_.push_back(p.id);
  }
  last_step_drafts_ = drafted;
  for (uint64_t id : finished_) remove(id);
  return Status::ok();
}

int32_t Driver::draft(uint64_t id, int32_t room) {
  Seq& s = seqs_.at(id);
  s.draft.clear();
  if (s.pooled()) return 0;
  const auto known = static_cast<int32_t>(s.request.tokens.size());
  // Every drafted token kept, and the one sampled after them, must still fit.
  room = std::min({room, config_.spec.max_tokens, s.request.spec.max_tokens - s.produced() - 1,
                   config_.max_sequence_tokens - known - 1});
  if (room < 1) return 0;
  const int32_t k = config_.spec.adaptive ? spec_draft_length(s.spec, room, spec_threshold_, proposer_->costly()) : room;
  if (k < 1 || proposer_failed_) return 0;
  if (Status st = proposer_->propose(id, s.request.tokens, k, s.draft); !st.is_ok()) {
    // The target does not need it: decoding goes on without speculation, said once.
    HEARTH_LOG_ERROR("speculative decoding stops: the {} proposer failed: {}", spec_method_name(config_.spec.method),
                     st.to_string());
    proposer_failed_ = true;
    s.draft.clear();
  }
  return static_cast<int32_t>(s.draft.size());
}

int32_t Driver::verify(Seq& s, const PlannedSeq& p, std::span<const float> logits,
                       std::span<const SampledRow> sampled, size_t row, std::vector<StepEvent>& events, bool& forced) {
  const auto vocab = static_cast<size_t>(runner_.vocab_size());
  int32_t kept = 0;
  bool rejected = false;
  for (int32_t i = 0; i <= p.draft; ++i) {
    StepEvent& e = events.emplace_back();
    e.id = p.id;
    const size_t r = row + static_cast<size_t>(i);
    if (!sampled.empty()) {
      e.token = sampled[r];
      s.sampler.set_position(s.sampler.position() + 1);
      s.request.tokens.push_back(e.token.id);
    } else if (Status st = sample(s, logits.data() + r * vocab, e.token); !st.is_ok()) {
      e.finish = FinishReason::kError;
      e.error = st;
      finished_.push_back(p.id);
      break;
    }
    e.n_produced = s.produced();
    e.cached_tokens = scheduler_.cached_tokens(p.id);
    e.finish = finish_of(s);
    if (e.finish != FinishReason::kNone) {
      finished_.push_back(p.id);
      break;
    }
    track_reasoning(s, e.token.id, s.produced() == 1);
    forced = reasoning_due(s);
    // The next row was computed after draft[i]: it counts only when that is the token.
    if (forced || i == p.draft) break;
    if (e.token.id != s.draft[static_cast<size_t>(i)]) {
      rejected = true;
      break;
    }
    ++kept;
  }
  if (p.draft > 0) {
    // Its acceptance learns from the drafts compared: an end inside them is no rejection.
    s.spec.observe(kept + (rejected ? 1 : 0), kept);
    ++spec_stats_.drafts;
    spec_stats_.draft_tokens += static_cast<uint64_t>(p.draft);
    spec_stats_.accepted += static_cast<uint64_t>(kept);
    for (int32_t i = 0; i < kept; ++i) ++spec_stats_.accepted_at[static_cast<size_t>(i)];
  }
  return kept;
}

void Driver::track_reasoning(Seq& s, TokenId t, bool first) const {
  const RequestSpec& spec = s.request.spec;
  if (spec.reasoning_budget < 0 || s.reasoning_over) return;
  if (!s.in_reasoning) {
    // Entered only by the output's first token; any other first token is the answer.
    s.in_reasoning = first && t == spec.reasoning_start;
    s.reasoning_over = !s.in_reasoning;
    return;
  }
  if (t == spec.reasoning_end) {
    s.in_reasoning = false;
    s.reasoning_over = true;
    return;
  }
  ++s.reasoning_spent;
}

bool Driver::reasoning_due(const Seq& s) const {
  return s.in_reasoning && !s.matcher && s.reasoning_spent >= s.request.spec.reasoning_budget &&
         s.request.spec.reasoning_budget >= 0;
}

std::pair<int32_t, int32_t> Driver::pooled_rows(const Seq& s, const PlannedSeq& p, int32_t row0) const {
  switch (s.request.spec.pooling) {
    case Pooling::kMean: return {row0, p.count};
    case Pooling::kLast: return {row0 + p.count - 1, p.sample ? 1 : 0};
    case Pooling::kFirst: return {row0, p.begin == 0 ? 1 : 0};
    case Pooling::kNone: break;
  }
  return {row0, 0};
}

void Driver::pool(Seq& s, const PlannedSeq& p, std::span<const float> rows, std::vector<float>* done) const {
  const auto dim = static_cast<size_t>(runner_.model().config().dim);
  if (p.begin == 0 || s.pool_sum.size() != dim) {  // its first rows (again, after a preemption)
    s.pool_sum.assign(dim, 0.0);
    s.pool_rows = 0;
  }
  for (size_t r = 0; r < rows.size() / dim; ++r) {
    for (size_t i = 0; i < dim; ++i) s.pool_sum[i] += rows[r * dim + i];
    ++s.pool_rows;
  }
  if (done == nullptr) return;
  done->resize(dim);
  const double n = std::max(s.pool_rows, 1);
  for (size_t i = 0; i < dim; ++i) (*done)[i] = static_cast<float>(s.pool_sum[i] / n);
}

Status Driver::run_until_idle(const std::function<bool(const StepEvent&)>& on_event) {
  std::vector<StepEvent> events;
  std::vector<uint64_t> dropped;  // this step's sequences on_event gave up
  while (!idle()) {
    bool ran = false;
    HEARTH_RETURN_IF_ERROR(step(events, ran));
    if (!ran && events.empty()) {  // waiting for blocks nobody will give back
      return make_error(ErrorCode::kResourceExhausted, "{} sequences wait for KV blocks, {} of {} are free",
                        seqs_.size(), runner_.cache().blocks_free(), blocks_total());
    }
    dropped.clear();
    for (const StepEvent& e : events) {
      if (std::find(dropped.begin(), dropped.end(), e.id) != dropped.end()) continue;  // its later tokens
      if (!on_event(e)) {
        dropped.push_back(e.id);
        if (e.finish == FinishReason::kNone) remove(e.id);
      }
    }
  }
  return Status::ok();
}

}  // namespace hearth
