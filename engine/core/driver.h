// Driver: the one generation loop. It holds the sequences (tokens, stop ids, limits,
// a sampler each), asks the Scheduler which run next, builds that step's ModelInput
// once, hands it to the ModelRunner, samples every sequence that completed its known
// tokens and decides whether it finished. The engine's serving loop (engine_server)
// and `hearth generate` (generate.h) both run on it: they differ only in where
// sequences come from and where their tokens go. Knows nothing of the broker.
// Not thread-safe (the step loop's).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/finish_reason.h"
#include "common/request_spec.h"
#include "common/sampling_params.h"
#include "common/status.h"
#include "common/token.h"
#include "engine/core/grammar_cache.h"
#include "engine/core/model_input.h"
#include "engine/core/model_runner.h"
#include "engine/core/sampler.h"
#include "engine/core/scheduler.h"
#include "engine/core/speculation.h"

namespace hearth {

// A sequence to run: a new request, or one resumed with the tokens it produced before.
struct SequenceRequest {
  std::vector<TokenId> tokens;  // the prompt, then any tokens produced before
  int32_t n_prompt = 0;
  RequestSpec spec;             // validated by Driver::add (common/request_spec.h)
  int32_t adapter = -1;         // the LoRA adapter slot it runs with (Model::set_adapter); -1: none
};

// One sampled token (engine/core/sampler.h). Log-probabilities are the model's own
// distribution (before penalties, temperature and filters), as the OpenAI API reports them.
using TokenResult = SampledRow;

// What one step did to one sequence: a token (finish says whether it was the last); an
// embedding's pooled vector (with kStop and no token); or, with kError and no token, a
// failure (`error`).
struct StepEvent {
  uint64_t id = 0;
  TokenResult token;
  std::vector<float> embedding;  // a pooled sequence's vector ([dim], not normalised)
  int32_t n_produced = 0;  // tokens produced so far, this one included
  int32_t cached_tokens = 0;  // prompt tokens its first admission found in the prefix cache
  FinishReason finish = FinishReason::kNone;
  Status error;
};

struct DriverConfig {
  SchedulerConfig scheduler;
  // Tokens a sequence may hold, prompt and output together: it finishes with kLength
  // when it has this many (the last one sampled is never run, so this may be one more
  // than the KV positions).
  int32_t max_sequence_tokens = 0;
  // The model's tokens as text, for sequences with a grammar (built on first use); none:
  // such sequences are refused.
  VocabularySource vocabulary;
  // Told what each step committed to the KV cache and what was released (a resident
  // cache's tables); none: nobody is.
  KvJournal* journal = nullptr;
  // Speculative decoding (engine/core/speculation.h); method kNone: none.
  SpecConfig spec;
  // With SpecMethod::kDraft: the draft model and its own KV cache (draft_model_check
  // passed; required). Should it fail, the driver says so and decodes on without drafts.
  ModelRunner* draft = nullptr;
};

// What speculative decoding did, since the driver was made.
struct SpecStats {
  uint64_t drafts = 0;        // sequence steps that drafted tokens
  uint64_t draft_tokens = 0;  // tokens drafted
  uint64_t accepted = 0;      // of those, kept
  std::array<uint64_t, kMaxSpecTokens> accepted_at{};  // kept at each draft position
};

class Driver {
 public:
  Driver(ModelRunner& runner, const DriverConfig& config);

  // Takes a sequence under `id`. A pooled one (spec.pooling, an embedding) runs its
  // prompt and ends with its pooled vector instead of tokens; it may fill every position
  // a generated token could. Returns kNone when it is queued, or the reason it is
  // already over (a predecessor produced its stop id, its max_tokens or the end of its
  // grammar before it could say so). Fails on bad sampling parameters
  // (sampling_params_validate), a logit bias outside the vocabulary, a grammar that does
  // not compile or that the tokens produced before do not follow, a sequence that does
  // not fit, an id in use or a full queue.
  Result<FinishReason> add(uint64_t id, SequenceRequest request);
  // add() for a resumed sequence whose first adopted.length positions are already in
  // `adopted`'s blocks (held for it in the cache's allocator): it continues from there
  // instead of computing them again. Where the sequence does not run (over, refused) or
  // cannot use them, the blocks are released.
  Result<FinishReason> add(uint64_t id, SequenceRequest request, KvSequence adopted);
  // Drops a sequence (cancelled, or its client is gone) and frees its KV blocks.
  void remove(uint64_t id);
  bool contains(uint64_t id) const { return seqs_.contains(id); }
  bool idle() const { return seqs_.empty(); }
  // Whether a sequence in flight runs with LoRA adapter slot `slot` (which must then not
  // change: Model::set_adapter).
  bool uses_adapter(int32_t slot) const;

  // Plans and runs one step; what happened to each sequence goes to `events` (cleared
  // first; finished and failed sequences are removed). A sequence that speculates may
  // get several tokens in one step, one event each, in order. `ran` is false when there was
  // nothing to run. `now_ms`: any monotonic clock (static batching's timeout).
  Status step(std::vector<StepEvent>& events, bool& ran, int64_t now_ms = 0);
  // Steps until no sequence is left, passing every event to `on_event`; one that
  // returns false removes its sequence.
  Status run_until_idle(const std::function<bool(const StepEvent&)>& on_event);

  const Scheduler& scheduler() const { return scheduler_; }
  int32_t last_step_tokens() const { return last_step_tokens_; }  // positions the last step computed
  int32_t blocks_total() const;
  const SpecStats& spec_stats() const { return spec_stats_; }

 private:
  struct Seq {
    SequenceRequest request;
    Sampler sampler;
    std::optional<grammar::GrammarMatcher> matcher;
    grammar::TokenMask mask;  // the matcher's tokens for this step
    bool in_reasoning = false;     // with a thinking budget: the output is inside its reasoning
    bool reasoning_over = false;   // ... and has left it (or never entered it)
    int32_t reasoning_spent = 0;   // tokens produced inside it
    std::vector<double> pool_sum;  // a pooled sequence's rows so far (summed for the mean)
    int32_t pool_rows = 0;
    std::vector<TokenId> draft;    // tokens drafted for this step (speculative decoding)
    SpecState spec;                // how its drafts have done
    bool pooled() const { return request.spec.pooling != Pooling::kNone; }
    int32_t produced() const { return static_cast<int32_t>(request.tokens.size()) - request.n_prompt; }
    // Whether sampling this sequence changes its row (then it samples on the host).
    bool shaped() const {
      return matcher.has_value() || !request.spec.logit_bias.empty() || produced() < request.spec.min_tokens;
    }
  };
  Result<FinishReason> add_sequence(uint64_t id, SequenceRequest request, KvSequence& adopted);
  Status sample(Seq& seq, const float* logits, TokenResult& out);
  Status forward(const StepPlan& plan, std::span<const float>& logits, std::span<const SampledRow>& sampled);
  FinishReason finish_of(const Seq& seq) const;
  // Follows a sequence's reasoning as its output token `t` (`first`: its first) comes
  // (RequestSpec::reasoning_budget).
  void track_reasoning(Seq& s, TokenId t, bool first) const;
  // Whether its thinking budget is spent while it still reasons: its reasoning_end is due.
  bool reasoning_due(const Seq& s) const;
  // Drafts tokens for sequence `id` (at most `room`): the scheduler's DraftOf.
  int32_t draft(uint64_t id, int32_t room);
  // Samples a planned sequence's rows from `row`: its next token, then each drafted one
  // while the token before matched its draft. Returns the drafts kept; `forced`: its
  // thinking budget ran out, so its reasoning's end is due next.
  int32_t verify(Seq& s, const PlannedSeq& p, std::span<const float> logits, std::span<const SampledRow> sampled,
                 size_t row, std::vector<StepEvent>& events, bool& forced);
  // Whether a planned sequence samples a token this step (a pooled one never does).
  bool samples(const PlannedSeq& p) const { return p.sample && !seqs_.at(p.id).pooled(); }
  // The hidden rows a pooled sequence asks of this step, first and count ([row0, ...) its
  // rows in the batch).
  std::pair<int32_t, int32_t> pooled_rows(const Seq& s, const PlannedSeq& p, int32_t row0) const;
  // Adds this step's hidden rows of a pooled sequence; at the end of its prompt, its vector.
  void pool(Seq& s, const PlannedSeq& p, std::span<const float> rows, std::vector<float>* done) const;

  ModelRunner& runner_;
  DriverConfig config_;
  GrammarCache grammars_;
  Scheduler scheduler_;
  std::unordered_map<uint64_t, Seq> seqs_;
  ModelInput input_;                    // reused every step
  SampleScratch scratch_;                // the host sampler's reused memory
  std::vector<SampleRow> sample_rows_;   // a step's rows, when the backend samples
  std::vector<uint64_t> finished_;
  int32_t last_step_tokens_ = 0;
  int32_t last_step_drafts_ = 0;  // of those, drafted tokens
  std::unique_ptr<Proposer> proposer_;  // none without speculation
  StepCost step_cost_;
  double spec_threshold_ = 0.0;    // the acceptance a drafted token must beat, this step
  std::vector<std::pair<uint64_t, size_t>> drafted_;  // this step's drafting sequences, known tokens
  SpecStats spec_stats_;
  bool proposer_failed_ = false;  // a proposer failed (logged): no more drafts from this driver
};

}  // namespace hearth
