// What each family's config says, read from both containers, and the refusals: a field
// or key that changes the math and is not implemented is named, never approximated.
#include <gtest/gtest.h>

#include <fstream>

#include <boost/json.hpp>

#include "common/mapped_file.h"
#include "common/model_tensors.h"
#include "loader/gguf_writer.h"
#include "loader/model.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/synth.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

// A tiny synthetic model of `arch` in both containers under `dir`.
void synth(const std::string& arch, const std::filesystem::path& dir) {
  SynthOptions o;
  o.arch = arch;
  o.shape = synth_preset("tiny").value();
  if (arch == "gptneox" || arch == "gptj") o.shape.kv_heads = o.shape.heads;
  o.hf = dir / "hf";
  o.gguf = dir / "model.gguf";
  ASSERT_TRUE(synth_write(o).is_ok());
}

// config.json of `dir` with `key` set to `value`.
void set_config(const std::filesystem::path& dir, const std::string& key, boost::json::value value) {
  std::ifstream in(dir / "config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  boost::json::object cfg = boost::json::parse(text).as_object();
  cfg[key] = std::move(value);
  std::ofstream(dir / "config.json") << boost::json::serialize(cfg);
}

TEST(FamilyConfigTest, EachFamilyReadsTheSameConfigFromBothContainers) {
  struct Want {
    std::string arch;
    NormKind norm;
    Residual residual;
    Activation activation;
    bool gated, qk_norm, qkv_bias, output_bias;
    int32_t rotary_dim;
    int32_t experts = 0;
  };
  const Want wants[] = {
      {"llama", NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false, false, false, 0},
      {"qwen3", NormKind::kRms, Residual::kSequential, Activation::kSilu, true, true, false, false, 0},
      {"gptneox", NormKind::kLayer, Residual::kParallel, Activation::kGelu, false, false, true, false, 4},
      {"gptj", NormKind::kLayer, Residual::kParallelSharedNorm, Activation::kGeluTanh, false, false, false, true, 4},
      {"qwen3moe", NormKind::kRms, Residual::kSequential, Activation::kSilu, true, true, false, false, 0, 8},
      {"mixtral", NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false, false, false, 0, 8},
      {"qwen2moe", NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false, true, false, 0, 8},
      {"glm4moe", NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false, true, false, 8, 8},
      {"gemma2", NormKind::kRms, Residual::kSequential, Activation::kGeluTanh, true, false, false, false, 0},
      {"gemma3", NormKind::kRms, Residual::kSequential, Activation::kGeluTanh, true, true, false, false, 0},
  };
  for (const Want& w : wants) {
    TempDir dir;
    synth(w.arch, dir.path());
    for (const auto& path : {dir.path() / "hf", dir.path() / "model.gguf"}) {
      auto m = model_open(path);
      ASSERT_TRUE(m.is_ok()) << path << ": " << m.status().to_string();
      const ModelConfig& c = m->config;
      EXPECT_EQ(c.architecture, w.arch) << path;
      EXPECT_EQ(c.norm, w.norm) << path;
      EXPECT_EQ(c.residual, w.residual) << path;
      EXPECT_EQ(c.activation, w.activation) << path;
      EXPECT_EQ(c.gated_ffn, w.gated) << path;
      EXPECT_EQ(c.qk_norm, w.qk_norm) << path;
      EXPECT_EQ(c.qkv_bias, w.qkv_bias) << path;
      EXPECT_EQ(c.output_bias, w.output_bias) << path;
      EXPECT_EQ(c.rotary_dim, w.rotary_dim) << path;
      EXPECT_EQ(c.n_experts, w.experts) << path;
      EXPECT_EQ(c.n_experts_used, w.experts > 0 ? 2 : 0) << path;
      if (w.arch == "gemma3") {
        EXPECT_TRUE(c.sandwich_norm) << path;
        EXPECT_EQ(c.sliding_window_pattern, 6) << path;
        EXPECT_EQ(c.sliding_window, 512) << path;
        EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f) << path;
        EXPECT_FLOAT_EQ(c.rope_local_theta, 10000.0f) << path;
        EXPECT_FLOAT_EQ(c.attention_scale, 0.25f) << path;  // 1 / sqrt(head_dim 16)
        EXPECT_TRUE(c.tied_embeddings) << path;
        EXPECT_EQ(c.attn_softcap, 0.0f) << path;
      }
      if (w.arch == "gemma2") {  // one RoPE base, every other layer windowed, the soft-caps
        EXPECT_TRUE(c.sandwich_norm) << path;
        EXPECT_EQ(c.sliding_window_pattern, 2) << path;
        EXPECT_TRUE(c.windowed(0) && !c.windowed(1) && c.windowed(2)) << path;
        EXPECT_FLOAT_EQ(c.rope_local_theta, 0.0f) << path;
        EXPECT_FLOAT_EQ(c.attn_softcap, 50.0f) << path;
        EXPECT_FLOAT_EQ(c.final_softcap, 30.0f) << path;
        EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f) << path;
      }
      if (w.arch == "qwen2moe") {  // the gated shared expert, top-k weights as the softmax gave them
        EXPECT_EQ(c.shared_expert_dim, 512) << path;
        EXPECT_TRUE(c.shared_expert_gate) << path;
        EXPECT_FALSE(c.moe_normalize) << path;
      } else if (w.arch == "glm4moe") {  // DeepSeek V3's router, a dense first layer, an ungated shared expert
        EXPECT_EQ(c.shared_expert_dim, 256) << path;
        EXPECT_FALSE(c.shared_expert_gate) << path;
        EXPECT_TRUE(c.router_sigmoid && c.router_bias && c.moe_normalize) << path;
        EXPECT_FLOAT_EQ(c.routed_scale, 2.5f) << path;
        EXPECT_EQ(c.n_dense_layers, 1) << path;
        EXPECT_EQ(c.dense_hidden_dim, 512) << path;
        EXPECT_TRUE(!c.expert_layer(0) && c.expert_layer(1)) << path;
      } else {
        EXPECT_EQ(c.shared_expert_dim, 0) << path;
      }
      // The config survives the weights segment's JSON.
      auto back = model_config_from_json(model_config_to_json(c));
      ASSERT_TRUE(back.is_ok()) << back.status().to_string();
      EXPECT_EQ(model_config_summary(*back), model_config_summary(c));
    }
  }
}

TEST(FamilyConfigTest, AFieldThatChangesTheMathAndIsNotImplementedIsRefusedByName) {
  TempDir dir;
  synth("qwen3", dir.path());
  const auto hf = dir.path() / "hf";
  struct Case {
    std::string key;
    boost::json::value value;
    std::string named;
  };
  const Case cases[] = {
      {"attn_logit_softcapping", 50.0, "attn_logit_softcapping"},
      {"final_logit_softcapping", 30.0, "final_logit_softcapping"},
      {"num_experts", 8, "num_experts"},
      {"rope_scaling", boost::json::object{{"rope_type", "yarn"}, {"factor", 4.0}}, "yarn"},
      {"hidden_act", "relu", "relu"},
      {"architectures", boost::json::array{"DeepseekV3ForCausalLM"}, "DeepseekV3ForCausalLM"},
      {"shared_expert_intermediate_size", 256, "shared_expert_intermediate_size"},
  };
  for (const Case& k : cases) {
    TempDir copy;
    std::filesystem::copy(hf, copy.path(), std::filesystem::copy_options::recursive);
    set_config(copy.path(), k.key, k.value);
    auto m = model_open(copy.path());
    ASSERT_FALSE(m.is_ok()) << k.key;
    EXPECT_EQ(m.status().code(), ErrorCode::kUnsupported) << k.key;
    EXPECT_NE(m.status().message().find(k.named), std::string::npos) << m.status().to_string();
  }
  // Absent in effect (null, false, 0) is no feature.
  TempDir copy;
  std::filesystem::copy(hf, copy.path(), std::filesystem::copy_options::recursive);
  set_config(copy.path(), "attn_logit_softcapping", nullptr);
  set_config(copy.path(), "num_experts", 0);
  EXPECT_TRUE(model_open(copy.path()).is_ok());
}

// Gemma 2's soft-caps and Qwen2-MoE's shared expert, as hostile or inconsistent files
// give them: an error naming what is wrong, and a null soft-cap is none.
TEST(FamilyConfigTest, BadSoftCapsAndSharedExpertsAreErrorsNamingThem) {
  TempDir dir;
  synth("gemma2", dir.path());
  struct Case {
    std::string key;
    boost::json::value value;
    std::string named;
  };
  const Case gemma[] = {
      {"attn_logit_softcapping", -50.0, "attn_logit_softcapping"},
      {"final_logit_softcapping", "30", "final_logit_softcapping"},
      {"query_pre_attn_scalar", 0, "query_pre_attn_scalar"},
  };
  for (const Case& k : gemma) {
    TempDir copy;
    std::filesystem::copy(dir.path() / "hf", copy.path(), std::filesystem::copy_options::recursive);
    set_config(copy.path(), k.key, k.value);
    auto m = model_open(copy.path());
    ASSERT_FALSE(m.is_ok()) << k.key;
    EXPECT_NE(m.status().message().find(k.named), std::string::npos) << m.status().to_string();
  }
  {
    TempDir copy;
    std::filesystem::copy(dir.path() / "hf", copy.path(), std::filesystem::copy_options::recursive);
    set_config(copy.path(), "attn_logit_softcapping", nullptr);
    auto m = model_open(copy.path());
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_EQ(m->config.attn_softcap, 0.0f);
    EXPECT_FLOAT_EQ(m->config.final_softcap, 30.0f);
  }
  TempDir moe;
  synth("qwen2moe", moe.path());
  TempDir copy;
  std::filesystem::copy(moe.path() / "hf", copy.path(), std::filesystem::copy_options::recursive);
  set_config(copy.path(), "shared_expert_intermediate_size", 256);  // the tensors hold 512
  auto m = model_open(copy.path());
  const Status shapes = m.is_ok() ? model_check_tensors(m->config, m->tensors) : m.status();
  ASSERT_FALSE(shapes.is_ok());
  EXPECT_NE(shapes.message().find("ffn_gate_shexp"), std::string::npos) << shapes.to_string();
}

// GLM-4.5 checkpoints carry multi-token-prediction layers past num_hidden_layers (a draft
// head hearth does not run): skipped when num_nextn_predict_layers says so, refused as
// unknown tensors when nothing does.
TEST(FamilyConfigTest, GlmMultiTokenPredictionLayersAreSkippedOnlyWhenTheConfigHasThem) {
  TempDir dir;
  synth("glm4moe", dir.path());
  const auto hf = dir.path() / "hf";
  auto plain = model_open(hf);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  // A second shard with a layer past the five, and the index that names both.
  const std::vector<float> zeros(64 * 128);
  SafetensorsWriter extra;
  const int64_t eh[] = {64, 128}, q[] = {64, 64};
  ASSERT_TRUE(extra.add("model.layers.5.eh_proj.weight", DType::kF32, eh, std::as_bytes(std::span(zeros))).is_ok());
  ASSERT_TRUE(extra.add("model.layers.5.self_attn.q_proj.weight", DType::kF32, q,
                        std::as_bytes(std::span(zeros).first(64 * 64))).is_ok());
  ASSERT_TRUE(extra.write(hf / "mtp.safetensors").is_ok());
  auto mapped = MappedFile::open(hf / "model.safetensors");
  ASSERT_TRUE(mapped.is_ok());
  auto parsed = safetensors_parse(mapped->bytes(), "model.safetensors", false);
  ASSERT_TRUE(parsed.is_ok());
  boost::json::object map{{"model.layers.5.eh_proj.weight", "mtp.safetensors"},
                          {"model.layers.5.self_attn.q_proj.weight", "mtp.safetensors"}};
  for (const TensorView& t : parsed->tensors) map[t.name] = "model.safetensors";
  std::ofstream(hf / "model.safetensors.index.json") << boost::json::serialize(boost::json::object{{"weight_map", map}});
  auto refused = model_open(hf);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("eh_proj"), std::string::npos) << refused.status().to_string();
  set_config(hf, "num_nextn_predict_layers", 1);
  auto skipped = model_open(hf);
  ASSERT_TRUE(skipped.is_ok()) << skipped.status().to_string();
  EXPECT_EQ(skipped->tensors.size(), plain->tensors.size());
  EXPECT_TRUE(model_check_tensors(skipped->config, skipped->tensors).is_ok());
}

TEST(FamilyConfigTest, AGgufKeyThatChangesTheMathAndIsNotImplementedIsRefusedByName) {
  TempDir dir;
  synth("llama", dir.path());
  auto real = model_open(dir.path() / "model.gguf");
  ASSERT_TRUE(real.is_ok());
  for (const char* key : {"llama.expert_shared_count", "llama.final_logit_softcapping"}) {
    GgufWriter w;
    const ModelConfig& c = real->config;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.embedding_length", static_cast<uint32_t>(c.dim));
    w.add_u32("llama.feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
    w.add_u32("llama.block_count", static_cast<uint32_t>(c.n_layers));
    w.add_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
    w.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
    w.add_u32("llama.context_length", static_cast<uint32_t>(c.max_context));
    w.add_u32(key, 8);
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_strings("tokenizer.ggml.tokens", real->tokenizer.gguf.tokens);
    for (const TensorView& t : real->tensors) {
      ASSERT_TRUE(w.add_tensor(t.name, t.dtype, std::span(t.shape.data(), static_cast<size_t>(t.n_dims)),
                               {t.data, t.bytes})
                      .is_ok());
    }
    ASSERT_TRUE(w.write(dir.path() / "keyed.gguf").is_ok());
    auto m = model_open(dir.path() / "keyed.gguf");
    ASSERT_FALSE(m.is_ok()) << key;
    EXPECT_EQ(m.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(m.status().message().find(key), std::string::npos) << m.status().to_string();
  }
}

TEST(FamilyConfigTest, AFusedQkvOfTheWrongShapeIsAFormatErrorNamingIt) {
  TempDir dir;
  synth("gptneox", dir.path());
  auto real = model_open(dir.path() / "model.gguf");
  ASSERT_TRUE(real.is_ok());
  // A NeoX GGUF whose head count no longer matches its fused rows.
  GgufWriter w;
  w.add_string("general.architecture", "gptneox");
  const ModelConfig& c = real->config;
  w.add_u32("gptneox.embedding_length", static_cast<uint32_t>(c.dim));
  w.add_u32("gptneox.feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
  w.add_u32("gptneox.block_count", static_cast<uint32_t>(c.n_layers));
  w.add_u32("gptneox.attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.add_u32("gptneox.context_length", static_cast<uint32_t>(c.max_context));
  w.add_u32("gptneox.rope.dimension_count", 4);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", real->tokenizer.gguf.tokens);
  const int64_t bad[] = {c.dim, c.dim};  // one third of the rows
  std::vector<float> zeros(static_cast<size_t>(c.dim * c.dim));
  ASSERT_TRUE(w.add_tensor("blk.0.attn_qkv.weight", DType::kF32, bad, std::as_bytes(std::span(zeros))).is_ok());
  ASSERT_TRUE(w.write(dir.path() / "bad.gguf").is_ok());
  auto m = model_open(dir.path() / "bad.gguf");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kFormat);
  EXPECT_NE(m.status().message().find("blk.0.attn_qkv.weight"), std::string::npos) << m.status().to_string();
}

}  // namespace
}  // namespace hearth
