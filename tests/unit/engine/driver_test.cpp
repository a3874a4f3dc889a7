// The Driver: the one generation loop, shared by the engine and `hearth generate`.
#include "engine/cuda/cuda_backend.h"
#include "engine/core/driver.h"

#include <map>

#include <gtest/gtest.h>

#include "engine/backends.h"
#include "engine/core/generate.h"
#include "loader/model.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

using testing::shared_path;

struct Fixture {
  LoadedModel model;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<Model> llama;
  std::optional<KvCache> cache;
  std::unique_ptr<ModelRunner> runner;

  Fixture() {
    model = std::move(model_open(shared_path("models/stories260K/stories260K.gguf"))).value();
    llama = std::move(Model::create(model.config, model.tensors, *backend, 64)).value();
    cache.emplace(std::move(KvCache::create(*backend, {model.config.n_layers, model.config.kv_dim(), 16, 64})).value());
    runner = std::make_unique<ModelRunner>(*llama, *cache);
  }

  std::vector<TokenId> alone(const std::vector<TokenId>& prompt, int max_tokens, const SamplingParams& sampling) {
    GenerateOptions o;
    o.spec.max_tokens = max_tokens;
    o.spec.sampling = sampling;
    return generate(*llama, *cache, prompt, o)->tokens;
  }
};

#define REQUIRE_STORIES() HEARTH_REQUIRE_SHARED(shared_path("models/stories260K/stories260K.gguf"))

// Sequences batched together get what each gets alone, and one resumed with tokens it
// produced before continues exactly where it stopped (its sampler's draws included).
TEST(DriverTest, BatchedAndResumedSequencesGetTheTokensOfAnUninterruptedRun) {
  REQUIRE_STORIES();
  Fixture f;
  const std::vector<TokenId> p1 = {1, 403, 407, 261, 378}, p2 = {1, 346, 306, 414};
  const SamplingParams seeded{.temperature = 0.9f, .top_p = 0.95f, .seed = 77};
  const auto want1 = f.alone(p1, 30, {.temperature = 0.0f});
  const auto want2 = f.alone(p2, 30, seeded);
  ASSERT_EQ(want2.size(), 30u);

  Driver driver(*f.runner, {.scheduler = {.max_batch_size = 8, .max_batched_tokens = 64}, .max_sequence_tokens = 512});
  std::vector<TokenId> resumed(p2);
  resumed.insert(resumed.end(), want2.begin(), want2.begin() + 12);  // 12 produced before a restart
  ASSERT_EQ(*driver.add(1, {.tokens = p1, .n_prompt = 5, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 30}}),
            FinishReason::kNone);
  ASSERT_EQ(*driver.add(2, {.tokens = resumed, .n_prompt = 4, .spec = {.sampling = seeded, .max_tokens = 30}}),
            FinishReason::kNone);
  std::vector<TokenId> got1, got2(want2.begin(), want2.begin() + 12);
  std::vector<FinishReason> finished;
  ASSERT_TRUE(driver
                  .run_until_idle([&](const StepEvent& e) {
                    (e.id == 1 ? got1 : got2).push_back(e.token.id);
                    if (e.finish != FinishReason::kNone) finished.push_back(e.finish);
                    return true;
                  })
                  .is_ok());
  EXPECT_EQ(got1, want1);
  EXPECT_EQ(got2, want2);
  EXPECT_EQ(finished, (std::vector<FinishReason>{FinishReason::kLength, FinishReason::kLength}));
  EXPECT_EQ(f.cache->blocks_free(), 64);
}

TEST(DriverTest, ASequenceAlreadyOverOrMalformedIsAnsweredAtOnce) {
  REQUIRE_STORIES();
  Fixture f;
  Driver driver(*f.runner, {.max_sequence_tokens = 16});
  // A predecessor produced the stop id (or max_tokens) and died before saying so.
  EXPECT_EQ(*driver.add(1, {.tokens = {1, 403, 2}, .n_prompt = 2, .spec = {.max_tokens = 9, .stop_ids = {2}}}),
            FinishReason::kStop);
  EXPECT_EQ(*driver.add(2, {.tokens = {1, 403, 7}, .n_prompt = 2, .spec = {.max_tokens = 1}}), FinishReason::kLength);
  EXPECT_EQ(*driver.add(3, {.tokens = std::vector<TokenId>(16, 1), .n_prompt = 8, .spec = {.max_tokens = 99}}),
            FinishReason::kLength);  // the context is full
  EXPECT_TRUE(driver.idle());
  const auto hot = driver.add(4, {.tokens = {1}, .n_prompt = 1, .spec = {.sampling = {.temperature = 3.0f}, .max_tokens = 4}});
  EXPECT_EQ(hot.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(hot.status().message().find("temperature"), std::string::npos) << hot.status().message();
  EXPECT_EQ(driver.add(5, {.tokens = {1, 600}, .n_prompt = 2, .spec = {.max_tokens = 4}}).status().code(),
            ErrorCode::kOutOfRange);  // outside the vocabulary
  EXPECT_EQ(driver.add(6, {.tokens = std::vector<TokenId>(16, 1), .n_prompt = 16, .spec = {.max_tokens = 4}}).status().code(),
            ErrorCode::kOutOfRange);  // no room for one token
  EXPECT_EQ(driver.add(7, {.tokens = {1}, .n_prompt = 1, .spec = {.max_tokens = 4, .top_logprobs = kMaxTopLogprobs + 1}})
                .status()
                .code(),
            ErrorCode::kOutOfRange);  // request_spec_validate: a value outside its range
  EXPECT_EQ(driver.add(8, {.tokens = {1}, .n_prompt = 1, .spec = {.max_tokens = 4, .logit_bias = {{.id = 1, .bias = 200}}}})
                .status()
                .code(),
            ErrorCode::kOutOfRange);
  EXPECT_TRUE(driver.idle());
}

// Embeddings: a pooled sequence ends with its prompt's final hidden states pooled (last,
// mean, first), the same however its prompt is cut into chunks and whatever runs beside
// it; the hidden state is the one the LM head sees (its product with the head's rows is
// the logits), and the generation beside it gets the tokens it gets alone.
TEST(DriverTest, PooledSequencesGiveTheHiddenStatesTheLmHeadSees) {
  REQUIRE_STORIES();
  Fixture f;
  const ModelConfig& c = f.model.config;
  const auto dim = static_cast<size_t>(c.dim), vocab = static_cast<size_t>(c.vocab_size);
  std::vector<TokenId> prompt = {1};
  for (int i = 0; i < 22; ++i) prompt.push_back(static_cast<TokenId>(260 + 7 * i));
  const auto n = prompt.size();

  // Every row's hidden state and logits, in one step.
  ModelInput in;
  in.clear(16);
  ASSERT_TRUE(in.add_sequence(prompt, 0, std::vector<int32_t>{0, 1}, false).is_ok());
  in.want_every_row();
  in.want_hidden(0, static_cast<int32_t>(n));
  std::vector<float> logits(n * vocab), hidden(n * dim);
  ASSERT_TRUE(f.llama->forward(in, *f.cache, logits.data(), hidden.data()).is_ok());
  const TensorView* head = nullptr;
  for (const TensorView& t : f.model.tensors) {
    if (t.name == "output.weight" || (head == nullptr && t.name == "token_embd.weight")) head = &t;
  }
  ASSERT_NE(head, nullptr);
  ASSERT_EQ(head->dtype, DType::kF32);
  const auto* w = reinterpret_cast<const float*>(head->data);
  for (size_t r = 0; r < n; r += 5) {
    for (size_t v = 0; v < vocab; v += 37) {
      double dot = 0;
      for (size_t i = 0; i < dim; ++i) dot += static_cast<double>(w[v * dim + i]) * hidden[r * dim + i];
      EXPECT_NEAR(dot, logits[r * vocab + v], 1e-3 * (1.0 + std::abs(dot))) << "row " << r << " token " << v;
    }
  }
  std::vector<float> mean(dim, 0.0f);
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < dim; ++i) mean[i] += hidden[r * dim + i] / static_cast<float>(n);
  }
  const std::vector<float> last(hidden.end() - static_cast<long>(dim), hidden.end());
  const std::vector<float> first(hidden.begin(), hidden.begin() + static_cast<long>(dim));

  const std::vector<TokenId> other = {1, 403, 407, 261, 378};
  const auto want_other = f.alone(other, 12, {.temperature = 0.0f});
  for (const int32_t chunk : {64, 7}) {
    SCOPED_TRACE(chunk);
    Driver driver(*f.runner, {.scheduler = {.max_batch_size = 8, .max_batched_tokens = chunk}, .max_sequence_tokens = 512});
    ASSERT_EQ(*driver.add(9, {.tokens = other, .n_prompt = 5, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 12}}),
              FinishReason::kNone);
    const Pooling kinds[] = {Pooling::kLast, Pooling::kMean, Pooling::kFirst};
    for (uint64_t k = 0; k < 3; ++k) {
      ASSERT_EQ(*driver.add(k + 1, {.tokens = prompt, .n_prompt = static_cast<int32_t>(n), .spec = {.max_tokens = 1, .pooling = kinds[k]}}),
                FinishReason::kNone);
    }
    std::map<uint64_t, std::vector<float>> got;
    std::vector<TokenId> got_other;
    ASSERT_TRUE(driver
                    .run_until_idle([&](const StepEvent& e) {
                      if (e.id == 9) {
                        got_other.push_back(e.token.id);
                        return true;
                      }
                      EXPECT_EQ(e.finish, FinishReason::kStop);
                      EXPECT_EQ(e.n_produced, 0);
                      got[e.id] = e.embedding;
                      return true;
                    })
                    .is_ok());
    EXPECT_EQ(got_other, want_other);
    ASSERT_EQ(got.size(), 3u);
    for (const auto& [id, want] : {std::pair{uint64_t{1}, last}, std::pair{uint64_t{2}, mean}, std::pair{uint64_t{3}, first}}) {
      ASSERT_EQ(got[id].size(), dim) << id;
      for (size_t i = 0; i < dim; ++i) EXPECT_NEAR(got[id][i], want[i], 1e-4f * (1.0f + std::abs(want[i]))) << id << " " << i;
    }
    EXPECT_EQ(f.cache->blocks_free(), 64);
  }
  // A pooled sequence produces nothing: it cannot resume with output, and must fit the context.
  Driver driver(*f.runner, {.max_sequence_tokens = 16});
  EXPECT_EQ(driver.add(1, {.tokens = {1, 2, 3}, .n_prompt = 2, .spec = {.max_tokens = 1, .pooling = Pooling::kMean}})
                .status()
                .code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver.add(2, {.tokens = std::vector<TokenId>(16, 1), .n_prompt = 16, .spec = {.max_tokens = 1, .pooling = Pooling::kLast}})
                .status()
                .code(),
            ErrorCode::kOutOfRange);
  EXPECT_EQ(driver.add(3, {.tokens = {1, 2}, .n_prompt = 2, .spec = {.max_tokens = 1, .top_logprobs = 2, .pooling = Pooling::kLast}})
                .status()
                .code(),
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(driver.idle());
}

// A thinking budget: once the output has spent it inside its reasoning, the reasoning's
// end goes in as the next token (an event like a sampled one) and the answer is sampled
// after it, as if the model had written it there; a sequence resumed mid-reasoning keeps
// its count, and one whose first token does not open the reasoning has none.
TEST(DriverTest, AThinkingBudgetClosesTheReasoningAndTheAnswerFollows) {
  REQUIRE_STORIES();
  Fixture f;
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  const SamplingParams greedy{.temperature = 0.0f};
  const auto free_run = f.alone(prompt, 20, greedy);
  constexpr TokenId kEnd = 13;
  auto run = [&](std::vector<TokenId> tokens, int32_t n_prompt, RequestSpec spec) {
    Driver driver(*f.runner, {.max_sequence_tokens = 512});
    std::vector<TokenId> out(tokens.begin() + n_prompt, tokens.end());
    EXPECT_EQ(*driver.add(1, {.tokens = std::move(tokens), .n_prompt = n_prompt, .spec = spec}), FinishReason::kNone);
    std::vector<int32_t> produced;
    EXPECT_TRUE(driver.run_until_idle([&](const StepEvent& e) {
                        out.push_back(e.token.id);
                        produced.push_back(e.n_produced);
                        return true;
                      }).is_ok());
    for (size_t i = 1; i < produced.size(); ++i) EXPECT_EQ(produced[i], produced[i - 1] + 1);
    return out;
  };
  // The prompt opened the reasoning: 5 tokens of it, then the end, then the answer.
  RequestSpec opened{.sampling = greedy, .max_tokens = 20, .reasoning_budget = 5, .reasoning_start = -1,
                     .reasoning_end = kEnd, .reasoning_open = true};
  const auto got = run(prompt, 5, opened);
  ASSERT_EQ(got.size(), 20u);
  EXPECT_EQ(std::vector<TokenId>(got.begin(), got.begin() + 5), std::vector<TokenId>(free_run.begin(), free_run.begin() + 5));
  EXPECT_EQ(got[5], kEnd);
  std::vector<TokenId> with_end(prompt);
  with_end.insert(with_end.end(), got.begin(), got.begin() + 6);
  const auto answer = f.alone(with_end, 14, greedy);
  EXPECT_EQ(std::vector<TokenId>(got.begin() + 6, got.end()), answer);
  // Resumed after 3 reasoning tokens: the same output.
  std::vector<TokenId> resumed(prompt);
  resumed.insert(resumed.end(), got.begin(), got.begin() + 3);
  EXPECT_EQ(run(resumed, 5, opened), got);
  // Seeded sampling resumed after the end was put in: the same draws (the end was not one).
  RequestSpec seeded = opened;
  seeded.sampling = {.temperature = 0.9f, .seed = 5};
  const auto sampled = run(prompt, 5, seeded);
  ASSERT_EQ(sampled[5], kEnd);
  std::vector<TokenId> after_end(prompt);
  after_end.insert(after_end.end(), sampled.begin(), sampled.begin() + 8);
  EXPECT_EQ(run(after_end, 5, seeded), sampled);
  // Entered by its first token: that one is not counted.
  RequestSpec entered = opened;
  entered.reasoning_open = false;
  entered.reasoning_start = free_run[0];
  entered.reasoning_budget = 2;
  const auto got2 = run(prompt, 5, entered);
  EXPECT_EQ(std::vector<TokenId>(got2.begin(), got2.begin() + 3), std::vector<TokenId>(free_run.begin(), free_run.begin() + 3));
  EXPECT_EQ(got2[3], kEnd);
  // A first token other than the start: no reasoning, no end put in.
  entered.reasoning_start = free_run[0] + 1;
  EXPECT_EQ(run(prompt, 5, entered), free_run);
}

TEST(DriverTest, TopLogprobsAreTheModelsOwnMostLikelyTokens) {
  REQUIRE_STORIES();
  Fixture f;
  Driver driver(*f.runner, {.max_sequence_tokens = 64});
  ASSERT_TRUE(driver.add(1, {.tokens = {1, 403, 407}, .n_prompt = 3, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 3, .top_logprobs = 4}})
                  .is_ok());
  int events = 0;
  ASSERT_TRUE(driver
                  .run_until_idle([&](const StepEvent& e) {
                    ++events;
                    EXPECT_EQ(e.token.n_top, 4);
                    EXPECT_EQ(e.token.top_ids[0], e.token.id);  // greedy: the best is the one taken
                    EXPECT_FLOAT_EQ(e.token.top_logprobs[0], e.token.logprob);
                    for (int k = 1; k < 4; ++k) EXPECT_LE(e.token.top_logprobs[k], e.token.top_logprobs[k - 1]);
                    EXPECT_LT(e.token.logprob, 0.0f);
                    return true;
                  })
                  .is_ok());
  EXPECT_EQ(events, 3);
}

// A CPU backend that says it samples, and does it as a device would be asked to: one
// call per chunk of logit rows, from the parameters, draw index and tokens the driver
// passes (Backend::sample). The driver's path for GPU backends, run on the host.
class SamplingCpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu (sampling)"; }
  int threads() const override { return cpu_->threads(); }
  bool supports(BackendOp op, DType type) const override { return cpu_->supports(op, type); }
  Result<std::unique_ptr<BoundWeights>> bind_weights(std::span<const TensorView> t, std::string_view l) override {
    return cpu_->bind_weights(t, l);
  }
  StepInput upload(const ModelInput& input) override { return cpu_->upload(input); }
  bool samples() const override { return true; }
  void sample(const float* logits, int64_t vocab, std::span<const SampleRow> rows, std::span<SampledRow> out) override {
    ++calls;
    for (size_t i = 0; i < rows.size(); ++i) {
      Sampler sampler(rows[i].sampling, static_cast<int32_t>(vocab));
      sampler.set_position(rows[i].draw);
      out[i] = sample_row(sampler, std::span(logits + static_cast<int64_t>(i) * vocab, static_cast<size_t>(vocab)),
                          rows[i].top_logprobs, rows[i].prompt, rows[i].output, scratch_);
    }
  }
  Result<BackendBuffer> alloc(size_t bytes) override { return cpu_->alloc(bytes); }
  void write(const BackendBuffer& d, size_t o, const void* s, size_t b) override { cpu_->write(d, o, s, b); }
  void read(const BackendBuffer& s, size_t o, void* d, size_t b) override { cpu_->read(s, o, d, b); }
  void embedding(const TensorView& t, const TokenId* ids, int64_t n, float* out) override { cpu_->embedding(t, ids, n, out); }
  void matmul(const TensorView& w, const float* x, int64_t n, float* y) override { cpu_->matmul(w, x, n, y); }
  void rms_norm(const float* x, const float* w, int64_t n, int64_t dim, float eps, float* out) override {
    cpu_->rms_norm(x, w, n, dim, eps, out);
  }
  void layer_norm(const float* x, const float* w, const float* b, int64_t n, int64_t dim, float eps,
                  float* out) override {
    cpu_->layer_norm(x, w, b, n, dim, eps, out);
  }
  void rope(float* x, int64_t n, int64_t heads, int64_t hd, int64_t rd, const int32_t* pos, const float* f,
            RopeStyle st) override {
    cpu_->rope(x, n, heads, hd, rd, pos, f, st);
  }
  void kv_store(const kernels::KvStoreParams& p) override { cpu_->kv_store(p); }
  void attention(const kernels::AttentionStep& p) override { cpu_->attention(p); }
  void swiglu(const float* g, const float* u, int64_t n, float* out) override { cpu_->swiglu(g, u, n, out); }
  void gelu(const float* x, const float* u, int64_t n, bool t, float* out) override { cpu_->gelu(x, u, n, t, out); }
  void add(float* y, const float* x, int64_t n) override { cpu_->add(y, x, n); }
  void scale(float* x, int64_t n, float s) override { cpu_->scale(x, n, s); }
  void softcap(float* x, int64_t n, float cap) override { cpu_->softcap(x, n, cap); }
  void lora(const kernels::LoraProduct& p) override { cpu_->lora(p); }
  void sigmoid_gate_rows(float* x, const float* g, int64_t n, int64_t dim) override {
    cpu_->sigmoid_gate_rows(x, g, n, dim);
  }
  void add_bias(float* x, const float* b, int64_t n, int64_t dim) override { cpu_->add_bias(x, b, n, dim); }
  void gather_rows(const float* x, const int32_t* r, int64_t n, int64_t dim, float* out) override {
    cpu_->gather_rows(x, r, n, dim, out);
  }
  void permute_columns(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out) override {
    cpu_->permute_columns(x, n, cols, perm, out);
  }
  void moe_route(const float* l, int64_t n, const kernels::MoeRouting& r, int32_t* ids, float* w) override {
    cpu_->moe_route(l, n, r, ids, w);
  }
  void moe_combine(const float* r, const int32_t* p, const float* w, int64_t n, int32_t k, int64_t dim,
                   float* out) override {
    cpu_->moe_combine(r, p, w, n, k, dim, out);
  }

  int calls = 0;

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  SampleScratch scratch_;
};

// The row checks a resident KV cache would record: (sequence, position) -> (token, logit).
struct CheckJournal final : KvJournal {
  std::map<std::pair<uint64_t, int32_t>, std::pair<TokenId, float>> checks;
  int unchecked = 0;  // commits without a check
  void released(uint64_t) override {}
  void committed(uint64_t id, const KvSequence&, const RowCheck* check) override {
    if (check == nullptr) {
      ++unchecked;
      return;
    }
    checks[{id, check->pos}] = {check->token, check->logit};
  }
};

// Twenty sequences in one step (two chunks of logit rows) with every sampling parameter,
// one resumed: sampling on the backend gives the host's tokens and logprobs, and the
// resident KV cache's row checks (the raw row's top token and logit) as well.
TEST(DriverTest, SamplingOnTheBackendGivesTheHostsTokensAndLogprobs) {
  REQUIRE_STORIES();
  Fixture host;
  auto sampling = std::make_unique<SamplingCpuBackend>();
  SamplingCpuBackend& backend = *sampling;
  Fixture device;
  device.backend = std::move(sampling);
  device.llama = std::move(Model::create(device.model.config, device.model.tensors, *device.backend, 64)).value();
  device.cache.emplace(
      std::move(KvCache::create(*device.backend, {device.model.config.n_layers, device.model.config.kv_dim(), 16, 256}))
          .value());
  host.cache.emplace(
      std::move(KvCache::create(*host.backend, {host.model.config.n_layers, host.model.config.kv_dim(), 16, 256})).value());
  host.runner = std::make_unique<ModelRunner>(*host.llama, *host.cache);
  device.runner = std::make_unique<ModelRunner>(*device.llama, *device.cache);
  ASSERT_TRUE(device.runner->samples());
  ASSERT_FALSE(host.runner->samples());

  auto run = [](Fixture& f, CheckJournal& journal) {
    Driver driver(*f.runner, {.scheduler = {.max_batch_size = 32, .max_batched_tokens = 64},
                              .max_sequence_tokens = 256,
                              .journal = &journal});
    for (uint64_t id = 0; id < 20; ++id) {
      SequenceRequest r;
      r.tokens = {1, static_cast<TokenId>(300 + id), 407, 261};
      r.n_prompt = 4;
      if (id == 19) {  // resumed with tokens produced before
        r.tokens.insert(r.tokens.end(), {378, 306});
      }
      r.spec.max_tokens = 12;
      r.spec.top_logprobs = static_cast<int32_t>(id % 5);
      r.spec.sampling = {.temperature = id % 4 == 0 ? 0.0f : 0.7f + 0.05f * static_cast<float>(id % 3),
                    .top_p = id % 3 == 0 ? 0.9f : 1.0f,
                    .min_p = id % 5 == 1 ? 0.05f : 0.0f,
                    .repetition_penalty = id % 2 == 0 ? 1.3f : 1.0f,
                    .presence_penalty = id % 7 == 2 ? 0.5f : 0.0f,
                    .frequency_penalty = id % 6 == 3 ? 0.4f : 0.0f,
                    .top_k = id % 4 == 1 ? 20 : 0,
                    .seed = 1000 + id};
      EXPECT_EQ(*driver.add(id, std::move(r)), FinishReason::kNone);
    }
    std::vector<std::vector<TokenResult>> out(20);
    const Status st = driver.run_until_idle([&](const StepEvent& e) {
      out[e.id].push_back(e.token);
      return true;
    });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
  };
  CheckJournal host_checks, device_checks;
  const auto want = run(host, host_checks);
  const auto got = run(device, device_checks);
  EXPECT_GE(backend.calls, 2);
  EXPECT_EQ(device_checks.checks, host_checks.checks);
  EXPECT_EQ(device_checks.unchecked, host_checks.unchecked);
  size_t tokens = 0;
  for (const auto& w : want) tokens += w.size();
  EXPECT_EQ(device_checks.checks.size(), tokens) << "every sampled row is checked";
  for (size_t id = 0; id < want.size(); ++id) {
    ASSERT_EQ(got[id].size(), want[id].size()) << "sequence " << id;
    for (size_t t = 0; t < want[id].size(); ++t) {
      const TokenResult& a = want[id][t];
      const TokenResult& b = got[id][t];
      EXPECT_EQ(b.id, a.id) << "sequence " << id << " token " << t;
      EXPECT_EQ(b.logprob, a.logprob) << "sequence " << id << " token " << t;
      EXPECT_EQ(b.n_top, a.n_top);
      EXPECT_EQ(b.top_ids, a.top_ids);
      EXPECT_EQ(b.top_logprobs, a.top_logprobs);
    }
  }
}

// Rows a request shapes (logit bias, min_tokens, a grammar) are sampled on the host even
// when the backend samples; the tokens are the host's, and rows of other steps still go
// to the backend.
TEST(DriverTest, ShapedRowsSampleOnTheHostWhereTheBackendSamples) {
  REQUIRE_STORIES();
  auto make = [](bool sampling_backend, SamplingCpuBackend** out) {
    auto f = std::make_unique<Fixture>();
    if (sampling_backend) {
      auto b = std::make_unique<SamplingCpuBackend>();
      *out = b.get();
      f->backend = std::move(b);
      f->llama = std::move(Model::create(f->model.config, f->model.tensors, *f->backend, 64)).value();
    }
    f->cache.emplace(
        std::move(KvCache::create(*f->backend, {f->model.config.n_layers, f->model.config.kv_dim(), 16, 256})).value());
    f->runner = std::make_unique<ModelRunner>(*f->llama, *f->cache);
    return f;
  };
  auto tokenizer = std::move(tokenizer_load(Fixture().model.tokenizer)).value();
  std::vector<std::string> bytes;
  for (TokenId id = 0; id < tokenizer->vocab_size(); ++id) bytes.emplace_back(tokenizer->token_bytes(id));
  auto vocab = std::make_shared<const grammar::Vocabulary>(std::move(grammar::Vocabulary::build(bytes)).value());
  auto run = [&](Fixture& f) {
    DriverConfig config{.scheduler = {.max_batch_size = 32, .max_batched_tokens = 64}, .max_sequence_tokens = 256};
    config.vocabulary = [vocab]() -> Result<std::shared_ptr<const grammar::Vocabulary>> { return vocab; };
    Driver driver(*f.runner, config);
    for (uint64_t id = 0; id < 6; ++id) {
      SequenceRequest r;
      r.tokens = {1, static_cast<TokenId>(300 + id), 407, 261};
      r.n_prompt = 4;
      r.spec.max_tokens = id < 3 ? 6 : 14;  // the shaped ones end first
      r.spec.stop_ids = {2};
      r.spec.sampling = {.temperature = 0.8f, .seed = 50 + id};
      if (id == 0) r.spec.logit_bias = {{.id = 400, .bias = 5.0f}, {.id = 306, .bias = -100.0f}};
      if (id == 1) r.spec.min_tokens = 5;
      if (id == 2) r.spec.grammar = "root ::= [a-z ]+";
      EXPECT_EQ(*driver.add(id, std::move(r)), FinishReason::kNone);
    }
    std::vector<std::vector<TokenResult>> out(6);
    EXPECT_TRUE(driver.run_until_idle([&](const StepEvent& e) {
                        out[e.id].push_back(e.token);
                        return true;
                      })
                    .is_ok());
    return out;
  };
  SamplingCpuBackend* backend = nullptr;
  auto host = make(false, nullptr);
  auto device = make(true, &backend);
  const auto want = run(*host);
  const auto got = run(*device);
  EXPECT_GT(backend->calls, 0);  // steps without shaped rows still sample on the backend
  for (size_t id = 0; id < want.size(); ++id) {
    ASSERT_EQ(got[id].size(), want[id].size()) << id;
    for (size_t t = 0; t < want[id].size(); ++t) {
      EXPECT_EQ(got[id][t].id, want[id][t].id) << id << " " << t;
      EXPECT_EQ(got[id][t].logprob, want[id][t].logprob) << id << " " << t;
    }
  }
  for (const TokenResult& t : want[2]) {
    for (const char c : tokenizer->token_bytes(t.id)) EXPECT_TRUE(c == ' ' || (c >= 'a' && c <= 'z')) << t.id;
  }
}

TEST(ModelRankConfigTest, EachRankTakesItsShareOrTheSplitIsRefused) {
  ModelConfig c;
  c.dim = 2048;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 64;
  c.hidden_dim = 8192;
  auto r = model_rank_config(c, 1, 4);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->n_heads, 8);
  EXPECT_EQ(r->n_kv_heads, 2);
  EXPECT_EQ(r->hidden_dim, 2048);
  EXPECT_EQ(r->dim, 2048);
  EXPECT_EQ(model_rank_config(c, 0, 3).status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(model_rank_config(c, 4, 4).status().code(), ErrorCode::kInvalidArgument);
  auto one = make_single_rank_communicator();
  EXPECT_EQ(one->rank(), 0);
  EXPECT_EQ(one->size(), 1);
  float x[2] = {1.5f, -2.0f};
  ASSERT_TRUE(one->all_reduce_sum(x, 2).is_ok());  // the sum over one rank is itself
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(x[1], -2.0f);
}

TEST(BindWeightsTest, ALayoutTheBackendCannotReadIsRefusedNamingTheLoaderFlag) {
  auto backend = make_cpu_backend();
  auto bound = backend->bind_weights({}, "cuda-tiles");
  EXPECT_EQ(bound.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bound.status().message().find("--layout"), std::string::npos) << bound.status().message();
  TensorView r16;
  r16.name = "blk.0.attn_q.weight";
  r16.dtype = DType::kQ8_0R16;
  EXPECT_EQ(backend->bind_weights(std::span(&r16, 1), kLayoutPlain).status().code(), ErrorCode::kFormat);
  EXPECT_TRUE(backend->bind_weights(std::span(&r16, 1), kLayoutCpuR16).is_ok());
  EXPECT_TRUE(make_backend("cpu").is_ok());
  auto reference = make_backend("cpu-reference");
  ASSERT_TRUE(reference.is_ok());
  EXPECT_EQ((*reference)->name(), "cpu-reference");
  EXPECT_EQ(make_backend("cuda:x").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(make_backend("cuda:").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(make_backend("tpu").status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(cuda_device_from_name("cuda:3").value(), 3);
  EXPECT_EQ(cuda_device_from_name("cuda").value(), 0);
  EXPECT_FALSE(cuda_device_from_name("cuda:-1").is_ok());
  const auto cuda = make_backend("cuda");
#if HEARTH_HAVE_CUDA
  // Built with the CUDA backend: a device, or a clear "none visible".
  if (!cuda.is_ok()) {
    EXPECT_EQ(cuda.status().code(), ErrorCode::kUnavailable) << cuda.status().message();
    EXPECT_NE(cuda.status().message().find("no CUDA device"), std::string::npos) << cuda.status().message();
  }
#else
  EXPECT_EQ(cuda.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(cuda.status().message().find("-DHEARTH_CUDA=ON"), std::string::npos) << cuda.status().message();
#endif
}

}  // namespace
}  // namespace hearth
