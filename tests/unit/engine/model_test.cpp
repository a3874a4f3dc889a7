// The forward pass on the real stories260K model, in all three containers.
#include "engine/core/model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/core/generate.h"
#include "engine/cpu/cpu_backend.h"
#include "kernels/reference/reference.h"
#include "loader/gguf_export.h"
#include "loader/model.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;

const std::vector<TokenId> kPrompt = {1, 403, 407, 261, 378};  // BOS "Once upon a time"
const std::vector<TokenId> kFirstIds = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337};

struct Runner {
  LoadedModel model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> llama;
  std::optional<KvCache> cache;

  static Runner open(const std::filesystem::path& path, bool reference = false, int32_t max_batch = 64,
                     KvDType kv_dtype = KvDType::kF32) {
    Runner r;
    auto m = model_open(path);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    r.model = std::move(m).value();
    r.backend = make_cpu_backend({reference});
    auto l = Model::create(r.model.config, r.model.tensors, *r.backend, max_batch);
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    r.llama = std::move(l).value();
    auto c = KvCache::create(*r.backend, {r.model.config.n_layers, r.model.config.kv_dim(), 16, 32, kv_dtype});
    EXPECT_TRUE(c.is_ok());
    r.cache.emplace(std::move(c).value());
    return r;
  }

  // Logits at every position of `ids`, evaluated in one batch.
  std::vector<float> all_logits(const std::vector<TokenId>& ids) {
    KvSequence seq;
    EXPECT_TRUE(kv_sequence_reserve(*cache, seq, static_cast<int32_t>(ids.size())).is_ok());
    ModelInput in;
    in.clear(cache->config().block_size);
    EXPECT_TRUE(in.add_sequence(ids, 0, seq.blocks, false).is_ok());
    in.want_every_row();
    std::vector<float> logits(ids.size() * static_cast<size_t>(model.config.vocab_size));
    const Status st = llama->forward(in, *cache, logits.data());
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    kv_sequence_release(*cache, seq);
    return logits;
  }
};

std::vector<std::filesystem::path> containers() {
  return {shared_path("models/stories260K/stories260K.gguf"), shared_path("models/stories260K/stories260K.bin"),
          shared_path("models/stories260K-hf")};
}

TEST(ModelTest, GreedyFirstIdsMatchGroundTruthInEveryContainer) {
  for (const auto& path : containers()) {
    HEARTH_REQUIRE_SHARED(path);
    Runner r = Runner::open(path);
    GenerateOptions options;
    options.spec.max_tokens = static_cast<int32_t>(kFirstIds.size());
    options.spec.sampling.temperature = 0.0f;
    auto result = generate(*r.llama, *r.cache, kPrompt, options);
    ASSERT_TRUE(result.is_ok()) << result.status().to_string();
    EXPECT_EQ(result->tokens, kFirstIds) << path;
    EXPECT_EQ(r.cache->blocks_free(), 32) << "generate must release its blocks";
  }
}

// The default cache of hearth generate and hearth-engine stores keys and values as f16:
// the ground truth holds with it (and with bf16), in every container, on every path the
// reference and the CPU kernels take.
TEST(ModelTest, GreedyFirstIdsMatchGroundTruthWithHalfPrecisionKv) {
  for (const auto& path : containers()) {
    HEARTH_REQUIRE_SHARED(path);
    for (KvDType dtype : {KvDType::kF16, KvDType::kBF16}) {
      for (bool reference : {false, true}) {
        Runner r = Runner::open(path, reference, 64, dtype);
        EXPECT_EQ(r.cache->bytes(), 2u * 5 * 32 * 16 * r.model.config.kv_dim() * 2);  // half of f32's
        GenerateOptions options;
        options.spec.max_tokens = static_cast<int32_t>(kFirstIds.size());
        options.spec.sampling.temperature = 0.0f;
        auto result = generate(*r.llama, *r.cache, kPrompt, options);
        ASSERT_TRUE(result.is_ok()) << result.status().to_string();
        EXPECT_EQ(result->tokens, kFirstIds) << path << " " << kernels::kv_dtype_name(dtype) << (reference ? " reference" : "");
      }
    }
  }
}

TEST(ModelTest, GgufAndHfLogitsAgreeAtEveryPosition) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  const auto hf = shared_path("models/stories260K-hf");
  HEARTH_REQUIRE_SHARED(gguf);
  HEARTH_REQUIRE_SHARED(hf);
  std::vector<TokenId> ids = {1};
  for (int i = 1; i < 64; ++i) ids.push_back(3 + (i * 7919) % 509);
  Runner a = Runner::open(gguf), b = Runner::open(hf);
  const auto la = a.all_logits(ids), lb = b.all_logits(ids);
  ASSERT_EQ(la.size(), lb.size());
  const size_t vocab = 512;
  double worst = 0.0;
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    float scale = 0.0f;
    for (size_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(la[pos * vocab + v]));
    for (size_t v = 0; v < vocab; ++v) {
      const double rel = std::fabs(la[pos * vocab + v] - lb[pos * vocab + v]) / scale;
      worst = std::max(worst, rel);
      ASSERT_LE(rel, 1e-5) << "position " << pos << " token " << v << ": " << la[pos * vocab + v] << " vs "
                           << lb[pos * vocab + v];
    }
  }
  RecordProperty("worst_relative_difference", std::to_string(worst));
  std::printf("GGUF vs HF logits over 64 positions: worst difference %.3g of the row's largest logit\n", worst);
}

TEST(ModelTest, LlamaCContainerComputesTheSameLogitsAsGguf) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  const auto bin = shared_path("models/stories260K/stories260K.bin");
  HEARTH_REQUIRE_SHARED(gguf);
  HEARTH_REQUIRE_SHARED(bin);
  Runner a = Runner::open(gguf), b = Runner::open(bin);
  const std::vector<TokenId> ids = {1, 403, 407, 261, 378, 432, 383};
  const auto la = a.all_logits(ids), lb = b.all_logits(ids);
  for (size_t i = 0; i < la.size(); ++i) ASSERT_FLOAT_EQ(la[i], lb[i]) << i;  // same layout, same arithmetic
}

TEST(ModelTest, CpuKernelsMatchTheScalarReference) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(gguf);
  Runner fast = Runner::open(gguf), ref = Runner::open(gguf, /*reference=*/true);
  std::vector<TokenId> ids = {1};
  for (int i = 1; i < 40; ++i) ids.push_back(3 + (i * 31) % 509);
  const auto a = fast.all_logits(ids), b = ref.all_logits(ids);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f * (1.0f + std::fabs(b[i]))) << i;
}

TEST(ModelTest, BatchedPrefillEqualsTokenByToken) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(gguf);
  Runner r = Runner::open(gguf);
  const std::vector<TokenId> ids = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  const auto batched = r.all_logits(ids);
  KvSequence seq;
  ASSERT_TRUE(kv_sequence_reserve(*r.cache, seq, static_cast<int32_t>(ids.size())).is_ok());
  std::vector<float> logits(512);
  for (size_t i = 0; i < ids.size(); ++i) {
    ModelInput in;
    in.clear(r.cache->config().block_size);
    ASSERT_TRUE(in.add_sequence(std::span(&ids[i], 1), static_cast<int32_t>(i), seq.blocks, true).is_ok());
    ASSERT_TRUE(r.llama->forward(in, *r.cache, logits.data()).is_ok());
    for (size_t v = 0; v < 512; ++v) ASSERT_NEAR(logits[v], batched[i * 512 + v], 1e-4f) << i << " " << v;
  }
}

TEST(ModelTest, TwoSequencesInOneBatchMatchEachAlone) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(gguf);
  Runner r = Runner::open(gguf);
  const std::vector<TokenId> a = {1, 403, 407, 261, 378}, b = {1, 346, 306, 414};
  const auto la = r.all_logits(a), lb = r.all_logits(b);
  KvSequence sa, sb;
  ASSERT_TRUE(kv_sequence_reserve(*r.cache, sa, 5).is_ok());
  ASSERT_TRUE(kv_sequence_reserve(*r.cache, sb, 4).is_ok());
  ModelInput in;
  in.clear(r.cache->config().block_size);
  ASSERT_TRUE(in.add_sequence(a, 0, sa.blocks, true).is_ok());
  ASSERT_TRUE(in.add_sequence(b, 0, sb.blocks, true).is_ok());
  EXPECT_EQ(in.logit_rows, (std::vector<int32_t>{4, 8}));
  std::vector<float> logits(2 * 512);
  ASSERT_TRUE(r.llama->forward(in, *r.cache, logits.data()).is_ok());
  for (size_t v = 0; v < 512; ++v) {
    ASSERT_NEAR(logits[v], la[4 * 512 + v], 1e-4f);
    ASSERT_NEAR(logits[512 + v], lb[3 * 512 + v], 1e-4f);
  }
}

TEST(ModelTest, LayerAtATimeMatchesTheForwardPass) {
  // embed + run_layer over every layer, then the final norm and the (tied) LM head by
  // the reference kernels: the logits forward gives, on the reference backend.
  const auto path = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(path);
  Runner r = Runner::open(path, true);
  const std::vector<float> expected = r.all_logits(kPrompt);
  const ModelConfig& c = r.model.config;
  KvSequence seq;
  ASSERT_TRUE(kv_sequence_reserve(*r.cache, seq, static_cast<int32_t>(kPrompt.size())).is_ok());
  ModelInput in;
  in.clear(r.cache->config().block_size);
  ASSERT_TRUE(in.add_sequence(kPrompt, 0, seq.blocks, false).is_ok());
  std::vector<float> hidden(kPrompt.size() * static_cast<size_t>(c.dim));
  ASSERT_TRUE(r.llama->embed(in, *r.cache, hidden.data()).is_ok());
  for (int32_t l = 0; l < c.n_layers; ++l) ASSERT_TRUE(r.llama->run_layer(in, *r.cache, l, hidden.data()).is_ok());
  EXPECT_FALSE(r.llama->run_layer(in, *r.cache, c.n_layers, hidden.data()).is_ok());
  kv_sequence_release(*r.cache, seq);

  const auto n = static_cast<int64_t>(kPrompt.size());
  std::vector<float> norm(static_cast<size_t>(c.dim)), normed(hidden.size()), logits(expected.size());
  const TensorView* norm_t = r.model.find("output_norm.weight");
  kernels::ref::dequantize_row(norm_t->dtype, norm_t->data, norm.data(), c.dim);
  kernels::ref::rms_norm(hidden.data(), norm.data(), n, c.dim, c.norm_eps, normed.data());
  const TensorView* head = r.model.find("output.weight");
  if (head == nullptr) head = r.model.find("token_embd.weight");
  kernels::ref::matmul(head->dtype, head->data, c.vocab_size, c.dim, normed.data(), n, logits.data());
  for (size_t i = 0; i < logits.size(); ++i) ASSERT_NEAR(logits[i], expected[i], 1e-4f) << i;
}

TEST(ModelTest, MalformedBatchesAreRefused) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(gguf);
  Runner r = Runner::open(gguf, false, 8);
  KvSequence seq;
  ASSERT_TRUE(kv_sequence_reserve(*r.cache, seq, 16).is_ok());
  std::vector<float> logits(512);
  const TokenId bad = 512, good = 1;
  auto one = [&](TokenId id, int32_t pos) {
    ModelInput in;
    in.clear(r.cache->config().block_size);
    in.tokens = {id};
    in.positions = {pos};
    in.slots = {seq.blocks[0] * 16 + pos % 16};
    in.query_start = {0, 1};
    in.page_start = {0, 1};
    in.pages = {seq.blocks[0]};
    in.logit_rows = {0};
    return in;
  };
  EXPECT_EQ(r.llama->forward(one(bad, 0), *r.cache, logits.data()).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(r.llama->forward(one(good, 16), *r.cache, logits.data()).code(), ErrorCode::kInvalidArgument);  // no block
  ModelInput wrong_slot = one(good, 3);
  wrong_slot.slots[0] += 1;
  EXPECT_EQ(r.llama->forward(wrong_slot, *r.cache, logits.data()).code(), ErrorCode::kInvalidArgument);
  ModelInput uncovered = one(good, 0);
  uncovered.query_start = {0, 0};
  EXPECT_EQ(r.llama->forward(uncovered, *r.cache, logits.data()).code(), ErrorCode::kInvalidArgument);
  ModelInput too_many;
  too_many.clear(16);
  ASSERT_TRUE(too_many.add_sequence(std::vector<TokenId>(9, 1), 0, seq.blocks, false).is_ok());
  EXPECT_EQ(r.llama->forward(too_many, *r.cache, logits.data()).code(), ErrorCode::kInvalidArgument);
}

// Copies of the F32 GGUF with every matrix in another type: same file format paths the
// loader and kernels take for real quantized models.
TEST(ModelTest, ConvertedContainersStillTellTheStory) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(gguf);
  auto source = model_open(gguf);
  ASSERT_TRUE(source.is_ok());
  testing::TempDir dir;
  struct Case {
    DType type;
    size_t must_match;  // leading greedy ids that must equal the F32 ground truth
  };
  // Every type keeps the 16 ids of ", there was a little girl named Lily. She loved to
  // play" (measured on the scalar, AVX2 and AVX-512 paths: all 16 for each type).
  for (const Case& c : {Case{DType::kF16, 16}, Case{DType::kBF16, 16}, Case{DType::kQ8_0, 16}, Case{DType::kQ4_0, 16}}) {
    const auto path = dir.path() / (std::string(dtype_name(c.type)) + ".gguf");
    ASSERT_TRUE(gguf_export(*source, c.type, path).is_ok());
    Runner r = Runner::open(path);
    const TensorView* q = r.model.find("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->dtype, c.type);
    GenerateOptions options;
    options.spec.max_tokens = 16;
    options.spec.sampling.temperature = 0.0f;
    auto result = generate(*r.llama, *r.cache, kPrompt, options);
    ASSERT_TRUE(result.is_ok()) << result.status().to_string();
    ASSERT_EQ(result->tokens.size(), 16u);
    const std::vector<TokenId> head(result->tokens.begin(), result->tokens.begin() + static_cast<long>(c.must_match));
    EXPECT_EQ(head, std::vector<TokenId>(kFirstIds.begin(), kFirstIds.begin() + static_cast<long>(c.must_match)))
        << dtype_name(c.type);
    for (float lp : result->logprobs) EXPECT_TRUE(std::isfinite(lp)) << dtype_name(c.type);
  }
}

TEST(ModelTest, HfExportedToGgufComputesTheSameFunction) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  const auto hf = shared_path("models/stories260K-hf");
  HEARTH_REQUIRE_SHARED(gguf);
  HEARTH_REQUIRE_SHARED(hf);
  // The HF rows (rotate-half layout) written as a llama GGUF must be permuted back.
  auto source = model_open(hf);
  ASSERT_TRUE(source.is_ok());
  auto vocab_source = model_open(gguf);
  source->tokenizer = vocab_source->tokenizer;
  testing::TempDir dir;
  ASSERT_TRUE(gguf_export(*source, DType::kF32, dir.path() / "m.gguf").is_ok());
  Runner a = Runner::open(dir.path() / "m.gguf"), b = Runner::open(gguf);
  EXPECT_EQ(a.model.config.rope_style, RopeStyle::kInterleaved);
  const std::vector<TokenId> ids = {1, 403, 407, 261, 378, 432};
  const auto la = a.all_logits(ids), lb = b.all_logits(ids);
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-4f) << i;
}

TEST(ModelTest, RopeFrequenciesFollowTheConfig) {
  ModelConfig c;
  c.head_dim = 8;
  c.rope_theta = 10000.0f;
  auto base = rope_inv_freq(c, nullptr);
  ASSERT_EQ(base.size(), 4u);
  EXPECT_FLOAT_EQ(base[0], 1.0f);
  EXPECT_NEAR(base[1], 1.0 / std::pow(10000.0, 0.25), 1e-7);
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 4.0f;
  auto linear = rope_inv_freq(c, nullptr);
  for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(linear[i], base[i] / 4.0f);
  // Llama 3: high frequencies unchanged, low ones divided by the factor.
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  auto l3 = rope_inv_freq(c, nullptr);
  c.rope_scaling = {};
  auto plain = rope_inv_freq(c, nullptr);
  EXPECT_FLOAT_EQ(l3[0], plain[0]);
  EXPECT_FLOAT_EQ(l3[63], plain[63] / 8.0f);
  const float factors[4] = {1.0f, 2.0f, 4.0f, 8.0f};
  c.head_dim = 8;
  c.rope_theta = 10000.0f;
  auto divided = rope_inv_freq(c, factors);
  for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(divided[i], base[i] / factors[i]);
}

}  // namespace
}  // namespace hearth
