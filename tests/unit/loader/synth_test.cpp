// hearth synth's models against an independent numpy forward pass
// (../shared/tools/peer/ref_forward.py on make_model.py's files of the same shape and
// seed): teacher-forced argmax at every position of a fixed prompt.
#include "loader/synth.h"

#include <gtest/gtest.h>

#include "engine/core/model.h"
#include "engine/cpu/cpu_backend.h"
#include "loader/model.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

const std::vector<TokenId> kIds = {1, 287, 62, 346, 100, 200, 300, 5, 6, 7, 8, 9, 10, 400, 401, 402};

// ref_forward.py's next_ids and top-1/top-2 logit gaps for the tiny preset, seed 1234.
struct Oracle {
  std::vector<TokenId> next;
  std::vector<float> gap;
};
const Oracle kF16 = {{8, 331, 95, 79, 8, 8, 37, 440, 472, 175, 196, 436, 148, 365, 487, 8},
                     {0.2497f, 0.7248f, 0.5452f, 0.8313f, 2.7442f, 0.8083f, 0.8812f, 0.7022f, 0.2289f, 4.5999f, 0.5929f,
                      2.2244f, 0.0035f, 0.4293f, 1.8433f, 0.0531f}};
const Oracle kQ8 = {{8, 331, 95, 79, 8, 8, 37}, {0.2954f, 0.7113f, 0.4853f, 0.8365f, 2.7094f, 0.867f, 0.9314f}};
const Oracle kQ4 = {{61, 331, 266, 97, 8, 179, 37}, {0.7776f, 0.7964f, 0.3986f, 0.6786f, 0.9236f, 0.0664f, 1.522f}};

void check(const std::filesystem::path& path, const Oracle& oracle, const char* what) {
  auto model = model_open(path);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto backend = make_cpu_backend();
  auto llama = Model::create(model->config, model->tensors, *backend, 32);
  ASSERT_TRUE(llama.is_ok());
  auto cache = KvCache::create(*backend, {model->config.n_layers, model->config.kv_dim(), 16, 2});
  ASSERT_TRUE(cache.is_ok());
  const size_t n = oracle.next.size();
  const std::vector<TokenId> ids(kIds.begin(), kIds.begin() + static_cast<long>(n));
  KvSequence seq;
  ASSERT_TRUE(kv_sequence_reserve(*cache, seq, static_cast<int32_t>(n)).is_ok());
  ModelInput in;
  in.clear(cache->config().block_size);
  ASSERT_TRUE(in.add_sequence(ids, 0, seq.blocks, false).is_ok());
  in.want_every_row();
  std::vector<float> logits(n * static_cast<size_t>(model->config.vocab_size));
  ASSERT_TRUE((*llama)->forward(in, *cache, logits.data()).is_ok());
  int compared = 0;
  for (size_t t = 0; t < n; ++t) {
    const float* row = logits.data() + t * static_cast<size_t>(model->config.vocab_size);
    const auto best = static_cast<TokenId>(std::max_element(row, row + model->config.vocab_size) - row);
    if (oracle.gap[t] < 0.1f) continue;  // too close to call across implementations
    ++compared;
    EXPECT_EQ(best, oracle.next[t]) << what << " position " << t;
  }
  std::printf("%s: %d positions agree with the numpy reference\n", what, compared);
}

TEST(SynthTest, TinyModelsMatchTheNumpyReference) {
  TempDir dir;
  SynthOptions o;
  o.shape = synth_preset("tiny").value();
  o.gguf = dir.path() / "f16.gguf";
  o.hf = dir.path() / "hf";
  ASSERT_TRUE(synth_write(o).is_ok());
  check(o.gguf, kF16, "tiny f16 gguf");
  check(o.hf, kF16, "tiny hf");
  SynthOptions q = o;
  q.hf.clear();
  q.gguf = dir.path() / "q8.gguf";
  q.gguf_type = DType::kQ8_0;
  ASSERT_TRUE(synth_write(q).is_ok());
  check(q.gguf, kQ8, "tiny q8_0 gguf");
  q.gguf = dir.path() / "q4.gguf";
  q.gguf_type = DType::kQ4_0;
  ASSERT_TRUE(synth_write(q).is_ok());
  check(q.gguf, kQ4, "tiny q4_0 gguf");
  // Sizes as make_model.py writes them.
  EXPECT_EQ(std::filesystem::file_size(o.gguf), 763072u);
  EXPECT_EQ(std::filesystem::file_size(dir.path() / "q8.gguf"), 413632u);
  EXPECT_EQ(std::filesystem::file_size(dir.path() / "q4.gguf"), 227264u);
}

TEST(SynthTest, GeneratorIsMakeModelsSplitmix) {
  // make_model.py: key = splitmix64(fnv1a64(name) ^ seed); u = splitmix64(key + i) >> 40.
  const float a = synth_uniform("model.norm.weight", 1234, 0, 0.2);
  EXPECT_EQ(a, synth_uniform("model.norm.weight", 1234, 0, 0.2));
  EXPECT_NE(a, synth_uniform("model.norm.weight", 1235, 0, 0.2));
  EXPECT_LE(std::fabs(a), 0.2f);
  EXPECT_FALSE(synth_preset("13b").is_ok());
  SynthOptions bad;
  bad.shape.dim = 60;
  bad.gguf = "/nonexistent/x.gguf";
  EXPECT_FALSE(synth_write(bad).is_ok());
}

}  // namespace
}  // namespace hearth
