// LoRA adapters on the forward pass: a synthetic base and three synthetic adapters (ranks
// 8, 16 and 64 on q, k, v, o, gate, up and down), each adapter's greedy text against the
// base with it merged into its weights (written by lora_merge_write), for an F32 and a
// F16 base, and at two ranks (tp_group_test); on Q8_0 and Q4_0 bases, whose products
// quantize their activations, the adapted logits against the merged model's within that
// rounding; many streams of different adapters in one batch against each alone; the
// prefix cache keeping adapters apart; and what is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/mapped_file.h"
#include "engine/core/driver.h"
#include "engine/core/generate.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/cpu/cpu_backend.h"
#include "loader/gguf_export.h"
#include "loader/gguf_writer.h"
#include "loader/lora.h"
#include "loader/model.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/synth.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

constexpr int32_t kRanks[] = {8, 16, 64};

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); }

class LoraTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SynthOptions s;
    s.gguf = dir_.path() / "base.gguf";
    s.gguf_type = GetParam();
    ASSERT_TRUE(synth_write(s).is_ok());
    auto base = model_open(s.gguf);
    ASSERT_TRUE(base.is_ok()) << base.status().to_string();
    base_ = std::move(base).value();
    for (int i = 0; i < 3; ++i) {
      LoraSynthOptions o{.rank = kRanks[i], .alpha = 2.0 * kRanks[i], .seed = static_cast<uint64_t>(i + 1)};
      const auto dir = dir_.path() / fmt::format("adapter{}", i);
      ASSERT_TRUE(lora_synth_write(base_, o, dir).is_ok());
      auto a = lora_open(dir, base_.config, base_.tensors);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      adapters_.push_back(std::move(a).value());
    }
    backend_ = make_cpu_backend({.threads = 2});
  }

  std::unique_ptr<Model> model(const LoadedModel& m, int32_t slots) {
    auto made = Model::create(m.config, m.tensors, *backend_, 256, {.max_adapters = slots, .max_lora_rank = slots ? 64 : 0});
    EXPECT_TRUE(made.is_ok()) << made.status().to_string();
    return std::move(made).value();
  }
  KvCache cache(const ModelConfig& c) {
    return std::move(KvCache::create(*backend_, {c.n_layers, c.kv_dim(), 16, 64, KvDType::kF32})).value();
  }
  std::unique_ptr<Model> with_adapters() {
    auto m = model(base_, 3);
    for (int i = 0; i < 3; ++i) { const Status set = m->set_adapter(i, adapters_[static_cast<size_t>(i)]); EXPECT_TRUE(set.is_ok()) << set.to_string(); }
    return m;
  }
  std::vector<TokenId> greedy(Model& m, const std::vector<TokenId>& prompt, int32_t adapter, int32_t n = 40) {
    KvCache kv = cache(m.config());
    GenerateOptions o;
    o.spec.sampling.temperature = 0.0f;
    o.spec.max_tokens = n;
    o.spec.ignore_stop = true;
    o.adapter = adapter;
    auto r = generate(m, kv, prompt, o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? r->tokens : std::vector<TokenId>{};
  }

  testing::TempDir dir_;
  LoadedModel base_;
  std::vector<LoraAdapter> adapters_;
  std::unique_ptr<Backend> backend_;
};

const std::vector<TokenId> kPrompt = {1, 17, 230, 41, 9, 300, 77, 12};

TEST_P(LoraTest, EachAdaptersGreedyTextIsTheMergedModels) {
  auto adapted = with_adapters();
  auto plain = model(base_, 0);
  const std::vector<TokenId> base_text = greedy(*plain, kPrompt, -1);
  EXPECT_EQ(greedy(*adapted, kPrompt, -1), base_text) << "no adapter: the base's text";
  for (int i = 0; i < 3; ++i) {
    const auto path = dir_.path() / fmt::format("merged{}.gguf", i);
    ASSERT_TRUE(lora_merge_write(base_, adapters_[static_cast<size_t>(i)], path).is_ok());
    auto merged_files = model_open(path);
    ASSERT_TRUE(merged_files.is_ok()) << merged_files.status().to_string();
    auto merged = model(*merged_files, 0);
    const std::vector<TokenId> want = greedy(*merged, kPrompt, -1);
    EXPECT_EQ(greedy(*adapted, kPrompt, i), want) << "rank " << kRanks[i];
    EXPECT_NE(want, base_text) << "the rank-" << kRanks[i] << " adapter changes the text";
  }
}

// 48 streams over three adapters and the base in the same steps, greedy and seeded: each
// stream's tokens are those it gets alone.
TEST_P(LoraTest, MixedAdaptersInOneBatchGiveEachStreamItsTextAlone) {
  auto m = with_adapters();
  std::mt19937 rng(5);
  struct Stream {
    std::vector<TokenId> prompt;
    int32_t adapter;
    SamplingParams sampling;
  };
  std::vector<Stream> streams;
  for (int i = 0; i < 48; ++i) {
    Stream s;
    s.prompt.push_back(1);
    const int len = 3 + static_cast<int>(rng() % 20);
    for (int j = 0; j < len; ++j) s.prompt.push_back(static_cast<TokenId>(2 + rng() % 500));
    s.adapter = i % 4 - 1;
    s.sampling = i % 3 == 0 ? SamplingParams{.temperature = 0.9f, .seed = static_cast<uint64_t>(i)}
                            : SamplingParams{.temperature = 0.0f};
    streams.push_back(std::move(s));
  }
  std::vector<std::vector<TokenId>> alone;
  for (const Stream& s : streams) {
    KvCache kv = cache(m->config());
    GenerateOptions o;
    o.spec.max_tokens = 12;
    o.spec.ignore_stop = true;
    o.spec.sampling = s.sampling;
    o.adapter = s.adapter;
    auto r = generate(*m, kv, s.prompt, o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    alone.push_back(r->tokens);
  }
  KvCache kv = std::move(KvCache::create(*backend_, {m->config().n_layers, m->config().kv_dim(), 16, 256,
                                                     KvDType::kF32})).value();
  ModelRunner runner(*m, kv);
  Driver driver(runner, {.scheduler = {.max_batch_size = 48, .max_batched_tokens = 256}, .max_sequence_tokens = 256});
  for (size_t i = 0; i < streams.size(); ++i) {
    const Stream& s = streams[i];
    auto added = driver.add(i, {.tokens = s.prompt,
                                .n_prompt = static_cast<int32_t>(s.prompt.size()),
                                .spec = {.sampling = s.sampling, .max_tokens = 12, .ignore_stop = true},
                                .adapter = s.adapter});
    ASSERT_TRUE(added.is_ok()) << added.status().to_string();
  }
  std::map<uint64_t, std::vector<TokenId>> got;
  const Status st = driver.run_until_idle([&](const StepEvent& e) {
    got[e.id].push_back(e.token.id);
    return true;
  });
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  for (size_t i = 0; i < streams.size(); ++i) EXPECT_EQ(got[i], alone[i]) << "stream " << i << " (adapter " << streams[i].adapter << ")";
}

// An F16 base's products take float activations, as the merged model's F32 ones do, so
// the texts agree token for token; a Q8_0 or Q4_0 base's take 8-bit activations (Q8Test
// below).
INSTANTIATE_TEST_SUITE_P(Bases, LoraTest, ::testing::Values(DType::kF32, DType::kF16),
                         dtype_param_name);

class LoraRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthOptions s;
    s.gguf = dir_.path() / "base.gguf";
    s.gguf_type = DType::kF32;
    ASSERT_TRUE(synth_write(s).is_ok());
    base_ = std::move(model_open(s.gguf)).value();
    ASSERT_TRUE(lora_synth_write(base_, {.rank = 4}, dir_.path() / "good").is_ok());
  }
  // A copy of the good adapter with its config's `key` set to `value` (JSON text).
  std::filesystem::path with_config(const std::string& key, const std::string& value) {
    const auto dir = dir_.path() / ("with-" + key);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(dir_.path() / "good" / "adapter_model.safetensors", dir / "adapter_model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    auto cfg = json_parse(*read_small_file(dir_.path() / "good" / "adapter_config.json", 1 << 20), "config");
    cfg->as_object()[key] = boost::json::parse(value);
    EXPECT_TRUE(write_file(dir / "adapter_config.json", boost::json::serialize(*cfg)).is_ok());
    return dir;
  }
  Status open(const std::filesystem::path& dir) { return lora_open(dir, base_.config, base_.tensors).status(); }

  testing::TempDir dir_;
  LoadedModel base_;
};

void expect_refused(const Status& st, std::string_view names) {
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(names), std::string::npos) << st.to_string();
}

TEST_F(LoraRefusalTest, WhatWouldChangeTheFunctionUnappliedIsRefusedByName) {
  ASSERT_TRUE(open(dir_.path() / "good").is_ok());
  expect_refused(open(with_config("use_dora", "true")), "use_dora");
  expect_refused(open(with_config("modules_to_save", "[\"lm_head\"]")), "modules_to_save");
  expect_refused(open(with_config("rank_pattern", "{\"q_proj\": 8}")), "rank_pattern");
  expect_refused(open(with_config("bias", "\"all\"")), "bias");
  expect_refused(open(with_config("fan_in_fan_out", "true")), "fan_in_fan_out");
  expect_refused(open(with_config("peft_type", "\"IA3\"")), "IA3");
  expect_refused(open(with_config("r", "8")), "the base needs [8, ");  // r disagrees with the factors' shapes
  expect_refused(open(dir_.path() / "missing"), "adapter_config.json");
  // An adapter made for another shape of base: its factors do not fit.
  SynthOptions other;
  other.shape.dim = 128;
  other.gguf = dir_.path() / "other.gguf";
  ASSERT_TRUE(synth_write(other).is_ok());
  const LoadedModel wide = std::move(model_open(other.gguf)).value();
  ASSERT_TRUE(lora_synth_write(wide, {.rank = 4}, dir_.path() / "wide").is_ok());
  expect_refused(open(dir_.path() / "wide"), "the base needs");
}

TEST_F(LoraRefusalTest, TensorsOfModulesTheBaseCannotAdaptOrHalfPairsAreRefused) {
  const MappedFile f = std::move(MappedFile::open(dir_.path() / "good" / "adapter_model.safetensors")).value();
  // A copy of every good tensor but the first B, then an LM-head factor.
  const auto parsed = safetensors_parse(f.bytes(), "good");
  ASSERT_TRUE(parsed.is_ok());
  const auto write = [&](const std::string& dir, bool drop_b, bool lm_head) {
    SafetensorsWriter w;
    bool dropped = false;
    for (const TensorView& t : parsed->tensors) {
      if (drop_b && !dropped && t.name.ends_with("lora_B.weight")) {
        dropped = true;
        continue;
      }
      const int64_t shape[] = {t.shape[0], t.shape[1]};
      EXPECT_TRUE(w.add(t.name, t.dtype, shape, std::span(t.data, t.bytes)).is_ok());
    }
    if (lm_head) {
      const std::vector<float> v(4 * 64, 0.0f);
      const int64_t shape[] = {4, 64};
      EXPECT_TRUE(w.add("base_model.model.lm_head.lora_A.weight", DType::kF32, shape, std::as_bytes(std::span(v))).is_ok());
    }
    const auto d = dir_.path() / dir;
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(dir_.path() / "good" / "adapter_config.json", d / "adapter_config.json");
    EXPECT_TRUE(w.write(d / "adapter_model.safetensors").is_ok());
    return d;
  };
  expect_refused(open(write("half", true, false)), "no lora_B");
  expect_refused(open(write("head", false, true)), "lm_head");
  // A name that is the prefix and the suffix alone, sharing the dot between them.
  SafetensorsWriter bare;
  const std::vector<float> v(4 * 64, 0.0f);
  const int64_t shape[] = {4, 64};
  ASSERT_TRUE(bare.add("base_model.model.lora_A.weight", DType::kF32, shape, std::as_bytes(std::span(v))).is_ok());
  const auto d = dir_.path() / "bare";
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(dir_.path() / "good" / "adapter_config.json", d / "adapter_config.json");
  ASSERT_TRUE(bare.write(d / "adapter_model.safetensors").is_ok());
  expect_refused(open(d), "is not a LoRA factor");
}

// One PEFT adapter on the same model as a GGUF (q/k rows kept for interleaved RoPE pairs:
// the adapter's B rows reordered to match) and as a Hugging Face checkpoint (kept as the
// adapter was trained): the same greedy text.
TEST(LoraContainerTest, ThePeftAdapterGivesOneTextOnTheGgufAndTheHfCheckpoint) {
  testing::TempDir dir;
  SynthOptions s;
  s.gguf = dir.path() / "base.gguf";
  s.gguf_type = DType::kF16;
  s.hf = dir.path() / "hf";
  ASSERT_TRUE(synth_write(s).is_ok());
  const LoadedModel gguf = std::move(model_open(s.gguf)).value();
  const LoadedModel hf = std::move(model_open(s.hf)).value();
  ASSERT_NE(gguf.config.rope_style, hf.config.rope_style);
  ASSERT_TRUE(lora_synth_write(hf, {.rank = 16, .alpha = 32, .seed = 4}, dir.path() / "a").is_ok());
  auto be = make_cpu_backend({.threads = 2});
  std::vector<std::vector<TokenId>> texts;
  for (const LoadedModel* m : {&gguf, &hf}) {
    const LoraAdapter a = std::move(lora_open(dir.path() / "a", m->config, m->tensors)).value();
    auto model = std::move(Model::create(m->config, m->tensors, *be, 64, {.max_adapters = 1, .max_lora_rank = 16})).value();
    ASSERT_TRUE(model->set_adapter(0, a).is_ok());
    for (int32_t adapter : {-1, 0}) {
      KvCache kv = std::move(KvCache::create(*be, {m->config.n_layers, m->config.kv_dim(), 16, 16, KvDType::kF32})).value();
      GenerateOptions o;
      o.spec.sampling.temperature = 0.0f;
      o.spec.max_tokens = 40;
      o.spec.ignore_stop = true;
      o.adapter = adapter;
      auto r = generate(*model, kv, kPrompt, o);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      texts.push_back(r->tokens);
    }
  }
  EXPECT_EQ(texts[0], texts[2]) << "the base alone";
  EXPECT_EQ(texts[1], texts[3]) << "with the adapter";
  EXPECT_NE(texts[1], texts[0]);
}

TEST_F(LoraRefusalTest, TheModelRefusesSlotsRanksAndShapesItCannotHold) {
  const LoraAdapter a = std::move(lora_open(dir_.path() / "good", base_.config, base_.tensors)).value();
  auto backend = make_cpu_backend({.threads = 1});
  auto none = Model::create(base_.config, base_.tensors, *backend, 64);
  ASSERT_TRUE(none.is_ok());
  expect_refused((*none)->set_adapter(0, a), "slot 0");
  EXPECT_FALSE(Model::create(base_.config, base_.tensors, *backend, 64, {.max_adapters = 2}).is_ok());
  auto low = Model::create(base_.config, base_.tensors, *backend, 64, {.max_adapters = 2, .max_lora_rank = 2});
  ASSERT_TRUE(low.is_ok());
  expect_refused((*low)->set_adapter(0, a), "above the limit of 2");
  EXPECT_FALSE((*low)->adapter_loaded(0));
  LoraAdapter bent = a;
  bent.matrices[0].layer = 99;
  auto m = Model::create(base_.config, base_.tensors, *backend, 64, {.max_adapters = 2, .max_lora_rank = 8});
  ASSERT_TRUE(m.is_ok());
  expect_refused((*m)->set_adapter(1, bent), "blk.99");
  { const Status set = (*m)->set_adapter(1, a); ASSERT_TRUE(set.is_ok()) << set.to_string(); }
  EXPECT_NE((*m)->adapter_id(1), 0u);
  EXPECT_EQ((*m)->adapter_id(0), 0u);
  // A step or a request naming an empty slot.
  KvCache kv = std::move(KvCache::create(*backend, {base_.config.n_layers, base_.config.kv_dim(), 16, 8,
                                                    KvDType::kF32})).value();
  ModelInput in;
  in.clear(16);
  const int32_t blocks[] = {0};
  ASSERT_TRUE(in.add_sequence(std::vector<TokenId>{1, 2, 3}, 0, blocks, 1, 0).is_ok());
  expect_refused((*m)->check(in, kv), "holds none");
  in.clear(16);
  ASSERT_TRUE(in.add_sequence(std::vector<TokenId>{1, 2, 3}, 0, blocks, 1, 2).is_ok());
  expect_refused((*m)->check(in, kv), "not one of the model's 2");
  ModelRunner runner(**m, kv);
  Driver driver(runner, {.scheduler = {.max_batch_size = 2, .max_batched_tokens = 64}, .max_sequence_tokens = 64});
  expect_refused(driver.add(7, {.tokens = {1, 2}, .n_prompt = 2, .spec = {.max_tokens = 4}, .adapter = 0}).status(),
                 "holds no LoRA adapter");
  EXPECT_FALSE(driver.uses_adapter(1));
  {
    const auto added = driver.add(8, {.tokens = {1, 2}, .n_prompt = 2, .spec = {.max_tokens = 4}, .adapter = 1});
    ASSERT_TRUE(added.is_ok()) << added.status().to_string();
  }
  EXPECT_TRUE(driver.uses_adapter(1));
  driver.remove(8);
  EXPECT_FALSE(driver.uses_adapter(1));
  (*m)->clear_adapter(1);
  EXPECT_FALSE((*m)->adapter_loaded(1));
}

// A GGUF LoRA (as llama.cpp's converter writes one: factors in the GGUF base's row
// order, adapter.lora.alpha) of the same factors is the same adapter; one for another
// family, or with a tensor the base cannot adapt, is refused.
TEST_F(LoraRefusalTest, AGgufLoraIsReadAsThePeftOneItWasConvertedFrom) {
  const LoraAdapter peft = std::move(lora_open(dir_.path() / "good", base_.config, base_.tensors)).value();
  const auto write = [&](const std::string& file, const std::string& arch, bool head, bool alora = false) {
    GgufWriter w;
    if (alora) {
      const int32_t tokens[] = {5, 6};
      w.add_i32s("adapter.alora.invocation_tokens", tokens);
    }
    w.add_string("general.architecture", arch);
    w.add_string("general.type", "adapter");
    w.add_string("adapter.type", "lora");
    w.add_f32("adapter.lora.alpha", peft.matrices[0].scale * 4.0f);  // rank 4
    for (const LoraMatrix& m : peft.matrices) {
      const std::string name = fmt::format("blk.{}.{}.weight", m.layer, lora_target_name(m.target));
      const int64_t a_shape[] = {m.rank, m.cols}, b_shape[] = {m.rows, m.rank};
      EXPECT_TRUE(w.add_tensor(name + ".lora_a", DType::kF32, a_shape, std::as_bytes(std::span(m.a))).is_ok());
      EXPECT_TRUE(w.add_tensor(name + ".lora_b", DType::kF32, b_shape, std::as_bytes(std::span(m.b))).is_ok());
    }
    if (head) {
      const std::vector<float> v(4 * 64, 0.0f);
      const int64_t shape[] = {4, 64};
      EXPECT_TRUE(w.add_tensor("output.weight.lora_a", DType::kF32, shape, std::as_bytes(std::span(v))).is_ok());
    }
    EXPECT_TRUE(w.write(dir_.path() / file).is_ok());
    return dir_.path() / file;
  };
  auto gguf = lora_open(write("a.gguf", "llama", false), base_.config, base_.tensors);
  ASSERT_TRUE(gguf.is_ok()) << gguf.status().to_string();
  EXPECT_EQ(gguf->name, "a");
  std::filesystem::create_directories(dir_.path() / "my.adapter");
  std::filesystem::copy(dir_.path() / "good", dir_.path() / "my.adapter");
  EXPECT_EQ(std::move(lora_open(dir_.path() / "my.adapter", base_.config, base_.tensors)).value().name, "my.adapter");
  ASSERT_EQ(gguf->matrices.size(), peft.matrices.size());
  for (const LoraMatrix& m : peft.matrices) {
    const auto same = std::find_if(gguf->matrices.begin(), gguf->matrices.end(), [&](const LoraMatrix& g) {
      return g.layer == m.layer && g.target == m.target;
    });
    ASSERT_NE(same, gguf->matrices.end());
    EXPECT_EQ(same->a, m.a);
    EXPECT_EQ(same->b, m.b);
    EXPECT_FLOAT_EQ(same->scale, m.scale);
  }
  expect_refused(open(write("q.gguf", "qwen2", false)), "for a qwen2 model");
  expect_refused(open(write("h.gguf", "llama", true)), "output.weight");
  expect_refused(open(write("al.gguf", "llama", false, true)), "adapter.alora.invocation_tokens");
  expect_refused(open(dir_.path() / "good" / "adapter_config.json"), "GGUF");
}

// The prefix cache keys blocks by adapter: the same prompt under another adapter (or
// none) finds nothing; under the same one it finds its blocks.
TEST_F(LoraRefusalTest, ThePrefixCacheKeepsAdaptersApart) {
  auto backend = make_cpu_backend({.threads = 1});
  const LoraAdapter a = std::move(lora_open(dir_.path() / "good", base_.config, base_.tensors)).value();
  auto m = std::move(Model::create(base_.config, base_.tensors, *backend, 64, {.max_adapters = 1, .max_lora_rank = 4})).value();
  { const Status set = m->set_adapter(0, a); ASSERT_TRUE(set.is_ok()) << set.to_string(); }
  KvCache kv = std::move(KvCache::create(*backend, {base_.config.n_layers, base_.config.kv_dim(), 16, 32,
                                                    KvDType::kF32})).value();
  ModelRunner runner(*m, kv);
  Driver driver(runner, {.scheduler = {.max_batch_size = 4, .max_batched_tokens = 64}, .max_sequence_tokens = 128});
  std::vector<TokenId> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(3 + i * 7 % 500);
  const auto run = [&](uint64_t id, int32_t adapter) {
    EXPECT_TRUE(driver.add(id, {.tokens = prompt, .n_prompt = 40, .spec = {.max_tokens = 2}, .adapter = adapter}).is_ok());
    int32_t cached = -1;
    EXPECT_TRUE(driver.run_until_idle([&](const StepEvent& e) {
      if (cached < 0) cached = e.cached_tokens;
      return true;
    }).is_ok());
    return cached;
  };
  EXPECT_EQ(run(1, 0), 0);
  EXPECT_EQ(run(2, -1), 0) << "the base found the adapter's blocks";
  EXPECT_EQ(run(3, 0), 32) << "the adapter's own blocks, two of 16";
  EXPECT_EQ(run(4, -1), 32);
}


// Logits of every row of `tokens` (one step), [tokens.size(), vocab].
std::vector<float> all_logits(Model& m, Backend& be, const std::vector<TokenId>& tokens, int32_t adapter) {
  KvCache kv = std::move(KvCache::create(be, {m.config().n_layers, m.config().kv_dim(), 16, 16, KvDType::kF32})).value();
  ModelRunner runner(m, kv);
  ModelInput in;
  in.clear(16);
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  EXPECT_TRUE(in.add_sequence(tokens, 0, blocks, 0, adapter).is_ok());
  in.want_every_row();
  auto out = runner.run(in);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return out.is_ok() ? std::vector<float>(out->begin(), out->end()) : std::vector<float>{};
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

// On a base whose products quantize their activations to 8 bits (Q8_0, Q4_0), the
// adapted logits differ from the merged model's by that rounding alone: no more than the
// base's own logits differ from its dequantized copy's, while the adapter moves them
// far more than that. Over a 60-token text (the merged model's greedy one), every row.
class LoraQuantizedTest : public ::testing::TestWithParam<DType> {};

TEST_P(LoraQuantizedTest, AdaptedLogitsAreTheMergedModelsWithinTheActivationRounding) {
  testing::TempDir dir;
  SynthOptions s;
  s.gguf = dir.path() / "base.gguf";
  s.gguf_type = GetParam();
  ASSERT_TRUE(synth_write(s).is_ok());
  const LoadedModel base = std::move(model_open(s.gguf)).value();
  ASSERT_TRUE(gguf_export(base, DType::kF32, dir.path() / "dequantized.gguf").is_ok());
  const LoadedModel dequantized = std::move(model_open(dir.path() / "dequantized.gguf")).value();
  auto be = make_cpu_backend({.threads = 2});
  auto plain = std::move(Model::create(base.config, base.tensors, *be, 64)).value();
  auto plain_f32 = std::move(Model::create(dequantized.config, dequantized.tensors, *be, 64)).value();
  for (int32_t rank : {8, 64}) {
    const auto adir = dir.path() / fmt::format("a{}", rank);
    ASSERT_TRUE(lora_synth_write(base, {.rank = rank, .alpha = 2.0 * rank, .seed = 9}, adir).is_ok());
    const LoraAdapter a = std::move(lora_open(adir, base.config, base.tensors)).value();
    ASSERT_TRUE(lora_merge_write(base, a, dir.path() / "merged.gguf").is_ok());
    const LoadedModel merged_files = std::move(model_open(dir.path() / "merged.gguf")).value();
    auto merged = std::move(Model::create(merged_files.config, merged_files.tensors, *be, 64)).value();
    auto adapted = std::move(Model::create(base.config, base.tensors, *be, 64, {.max_adapters = 1, .max_lora_rank = 64})).value();
    ASSERT_TRUE(adapted->set_adapter(0, a).is_ok());
    KvCache kv = std::move(KvCache::create(*be, {base.config.n_layers, base.config.kv_dim(), 16, 16, KvDType::kF32})).value();
    GenerateOptions o;
    o.spec.sampling.temperature = 0.0f;
    o.spec.max_tokens = 56;
    o.spec.ignore_stop = true;
    std::vector<TokenId> text = kPrompt;
    const auto greedy = generate(*merged, kv, kPrompt, o);
    ASSERT_TRUE(greedy.is_ok());
    text.insert(text.end(), greedy->tokens.begin(), greedy->tokens.end());
    text.resize(std::min<size_t>(text.size(), 64));
    const auto want = all_logits(*merged, *be, text, -1);
    const auto got = all_logits(*adapted, *be, text, 0);
    const double rounding = max_abs_diff(all_logits(*plain, *be, text, -1), all_logits(*plain_f32, *be, text, -1));
    const double adapted_error = max_abs_diff(got, want);
    const double adapter_effect = max_abs_diff(want, all_logits(*plain_f32, *be, text, -1));
    std::printf("%s rank %d: adapted vs merged %.4f, quantized vs dequantized base %.4f, the adapter's effect %.4f\n",
                std::string(dtype_name(GetParam())).c_str(), rank, adapted_error, rounding, adapter_effect);
    EXPECT_LE(adapted_error, 2.0 * rounding + 1e-4);
    EXPECT_GT(adapter_effect, 10.0 * adapted_error);
  }
}

INSTANTIATE_TEST_SUITE_P(Bases, LoraQuantizedTest, ::testing::Values(DType::kQ8_0, DType::kQ4_0),
                         dtype_param_name);

}  // namespace
}  // namespace hearth
