// Architecture features (Qwen2 qkv bias, Llama 3 rope scaling, Mistral sliding window,
// tied embeddings, GQA, F16/BF16 weights, sharded checkpoints) checked against a
// textbook forward pass written here in double precision from the Hugging Face
// definitions, on synthetic checkpoints written as real HF directories.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <numbers>
#include <random>

#include "common/half.h"
#include "engine/core/model.h"
#include "engine/cpu/cpu_backend.h"
#include "loader/model.h"
#include "loader/safetensors_writer.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;
using testing::TempDir;

struct Spec {
  std::string architecture = "LlamaForCausalLM";
  int dim = 64, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 512, context = 128;
  double theta = 10000.0;
  bool qkv_bias = false;
  bool tied = false;
  int sliding_window = 0;
  bool llama3_scaling = false;
  DType dtype = DType::kF32;
  bool sharded = false;
};

using Weights = std::map<std::string, std::vector<float>>;  // HF names, values after dtype rounding

float round_to(DType type, float v) {
  if (type == DType::kF16) return fp16_to_f32(f32_to_fp16(v));
  if (type == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

// Writes an HF directory for `spec` with random weights; returns the weights.
Weights write_model(const Spec& s, const std::filesystem::path& dir) {
  std::mt19937 rng(77);
  Weights w;
  std::map<std::string, std::vector<int64_t>> shapes;
  auto make = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = round_to(s.dtype, offset + dist(rng));
    w[name] = std::move(v);
    shapes[name] = std::move(shape);
  };
  const int hd = s.dim / s.heads, kv = s.kv_heads * hd;
  const float lin = std::sqrt(3.0f / static_cast<float>(s.dim));
  make("model.embed_tokens.weight", {s.vocab, s.dim}, 1.0f);
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    make(p + "input_layernorm.weight", {s.dim}, 0.2f, 1.0f);
    make(p + "self_attn.q_proj.weight", {s.dim, s.dim}, lin);
    make(p + "self_attn.k_proj.weight", {kv, s.dim}, lin);
    make(p + "self_attn.v_proj.weight", {kv, s.dim}, lin);
    if (s.qkv_bias) {
      make(p + "self_attn.q_proj.bias", {s.dim}, 0.5f);
      make(p + "self_attn.k_proj.bias", {kv}, 0.5f);
      make(p + "self_attn.v_proj.bias", {kv}, 0.5f);
    }
    make(p + "self_attn.o_proj.weight", {s.dim, s.dim}, lin);
    make(p + "post_attention_layernorm.weight", {s.dim}, 0.2f, 1.0f);
    make(p + "mlp.gate_proj.weight", {s.hidden, s.dim}, lin);
    make(p + "mlp.up_proj.weight", {s.hidden, s.dim}, lin);
    make(p + "mlp.down_proj.weight", {s.dim, s.hidden}, std::sqrt(3.0f / static_cast<float>(s.hidden)));
  }
  make("model.norm.weight", {s.dim}, 0.2f, 1.0f);
  if (!s.tied) make("lm_head.weight", {s.vocab, s.dim}, 4.0f * lin);

  // Two shards (alternating tensors) with an index, or one file.
  SafetensorsWriter shard[2];
  std::string index = R"({"metadata":{},"weight_map":{)";
  int k = 0;
  for (const auto& [name, values] : w) {
    std::vector<std::byte> bytes(*dtype_bytes(s.dtype, static_cast<int64_t>(values.size())));
    for (size_t i = 0; i < values.size(); ++i) {
      if (s.dtype == DType::kF32) {
        std::memcpy(bytes.data() + 4 * i, &values[i], 4);
      } else {
        const uint16_t h = s.dtype == DType::kF16 ? f32_to_fp16(values[i]) : f32_to_bf16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    const int which = s.sharded ? k % 2 : 0;
    EXPECT_TRUE(shard[which].add(name, s.dtype, shapes[name], bytes).is_ok());
    index += (k ? "," : "") + ("\"" + name + "\":\"model-0000" + std::to_string(which + 1) + "-of-00002.safetensors\"");
    ++k;
  }
  index += "}}";
  if (s.sharded) {
    EXPECT_TRUE(shard[0].write(dir / "model-00001-of-00002.safetensors").is_ok());
    EXPECT_TRUE(shard[1].write(dir / "model-00002-of-00002.safetensors").is_ok());
    std::ofstream(dir / "model.safetensors.index.json") << index;
  } else {
    EXPECT_TRUE(shard[0].write(dir / "model.safetensors").is_ok());
  }
  std::ofstream cfg(dir / "config.json");
  cfg << "{\"architectures\": [\"" << s.architecture << "\"], \"hidden_size\": " << s.dim
      << ", \"intermediate_size\": " << s.hidden << ", \"num_hidden_layers\": " << s.layers
      << ", \"num_attention_heads\": " << s.heads << ", \"num_key_value_heads\": " << s.kv_heads
      << ", \"vocab_size\": " << s.vocab << ", \"max_position_embeddings\": " << s.context
      << ", \"rms_norm_eps\": 1e-06, \"rope_theta\": " << s.theta
      << ", \"tie_word_embeddings\": " << (s.tied ? "true" : "false") << ", \"hidden_act\": \"silu\"";
  if (s.sliding_window) cfg << ", \"sliding_window\": " << s.sliding_window;
  if (s.llama3_scaling) {
    cfg << ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
           "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 32}";
  }
  cfg << "}";
  cfg.close();
  std::filesystem::copy(shared_path("models/stories260K-hf/tokenizer.model"), dir);
  return w;
}

// The Hugging Face definition, in double precision. Returns logits [n, vocab].
std::vector<double> oracle_logits(const Spec& s, const Weights& w, const std::vector<TokenId>& ids) {
  const int hd = s.dim / s.heads, kv = s.kv_heads * hd, n = static_cast<int>(ids.size());
  auto at = [&](const std::string& name) -> const std::vector<float>& { return w.at(name); };
  auto linear = [](const std::vector<float>& W, const std::vector<double>& x, int rows) {
    const size_t cols = x.size();
    std::vector<double> y(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      double acc = 0.0;
      for (size_t c = 0; c < cols; ++c) acc += static_cast<double>(W[r * cols + c]) * x[c];
      y[static_cast<size_t>(r)] = acc;
    }
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-6);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * g[i];
    return y;
  };
  std::vector<double> inv_freq(static_cast<size_t>(hd / 2));
  for (int i = 0; i < hd / 2; ++i) {
    double f = 1.0 / std::pow(s.theta, 2.0 * i / hd);
    if (s.llama3_scaling) {  // transformers' _compute_llama3_parameters
      const double factor = 8.0, low = 1.0, high = 4.0, old = 32.0;
      const double wavelen = 2 * std::numbers::pi / f;
      const double scaled = wavelen > old / low ? f / factor : f;
      const double smooth = (old / wavelen - low) / (high - low);
      const bool medium = !(wavelen < old / high) && !(wavelen > old / low);
      f = medium ? (1 - smooth) * scaled / factor + smooth * scaled : scaled;
    }
    inv_freq[static_cast<size_t>(i)] = f;
  }
  auto rotate = [&](std::vector<double>& x, int n_heads, int pos) {  // rotate_half
    for (int h = 0; h < n_heads; ++h) {
      for (int i = 0; i < hd / 2; ++i) {
        const double a = pos * inv_freq[static_cast<size_t>(i)];
        double& x0 = x[static_cast<size_t>(h * hd + i)];
        double& x1 = x[static_cast<size_t>(h * hd + i + hd / 2)];
        const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x1 * std::cos(a) + x0 * std::sin(a);
        x0 = r0;
        x1 = r1;
      }
    }
  };
  std::vector<std::vector<double>> x(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {
    const auto& e = at("model.embed_tokens.weight");
    x[static_cast<size_t>(t)].assign(e.begin() + ids[t] * s.dim, e.begin() + (ids[t] + 1) * s.dim);
  }
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<double>> K(static_cast<size_t>(n)), V(static_cast<size_t>(n)), Q(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) {
      const auto xn = rms(x[static_cast<size_t>(t)], at(p + "input_layernorm.weight"));
      Q[t] = linear(at(p + "self_attn.q_proj.weight"), xn, s.dim);
      K[t] = linear(at(p + "self_attn.k_proj.weight"), xn, kv);
      V[t] = linear(at(p + "self_attn.v_proj.weight"), xn, kv);
      if (s.qkv_bias) {
        for (int i = 0; i < s.dim; ++i) Q[t][i] += at(p + "self_attn.q_proj.bias")[i];
        for (int i = 0; i < kv; ++i) K[t][i] += at(p + "self_attn.k_proj.bias")[i];
        for (int i = 0; i < kv; ++i) V[t][i] += at(p + "self_attn.v_proj.bias")[i];
      }
      rotate(Q[t], s.heads, t);
      rotate(K[t], s.kv_heads, t);
    }
    for (int t = 0; t < n; ++t) {
      std::vector<double> att(static_cast<size_t>(s.dim), 0.0);
      const int first = s.sliding_window > 0 ? std::max(0, t - s.sliding_window + 1) : 0;
      for (int h = 0; h < s.heads; ++h) {
        const int g = h / (s.heads / s.kv_heads);
        std::vector<double> scores;
        for (int j = first; j <= t; ++j) {
          double d = 0.0;
          for (int i = 0; i < hd; ++i) d += Q[t][h * hd + i] * K[j][g * hd + i];
          scores.push_back(d / std::sqrt(static_cast<double>(hd)));
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& v : scores) sum += (v = std::exp(v - mx));
        for (int j = first; j <= t; ++j) {
          for (int i = 0; i < hd; ++i) att[h * hd + i] += scores[j - first] / sum * V[j][g * hd + i];
        }
      }
      const auto o = linear(at(p + "self_attn.o_proj.weight"), att, s.dim);
      for (int i = 0; i < s.dim; ++i) x[t][i] += o[i];
      const auto xn = rms(x[t], at(p + "post_attention_layernorm.weight"));
      const auto gate = linear(at(p + "mlp.gate_proj.weight"), xn, s.hidden);
      const auto up = linear(at(p + "mlp.up_proj.weight"), xn, s.hidden);
      std::vector<double> act(static_cast<size_t>(s.hidden));
      for (int i = 0; i < s.hidden; ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const auto down = linear(at(p + "mlp.down_proj.weight"), act, s.dim);
      for (int i = 0; i < s.dim; ++i) x[t][i] += down[i];
    }
  }
  std::vector<double> logits;
  for (int t = 0; t < n; ++t) {
    const auto xn = rms(x[t], at("model.norm.weight"));
    const auto l = linear(at(s.tied ? "model.embed_tokens.weight" : "lm_head.weight"), xn, s.vocab);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

void check_against_oracle(const Spec& spec, std::string_view what) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K-hf/tokenizer.model"));
  TempDir dir;
  const Weights w = write_model(spec, dir.path());
  auto model = model_open(dir.path());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto backend = make_cpu_backend();
  auto llama = Model::create(model->config, model->tensors, *backend, 64);
  ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
  auto cache = KvCache::create(*backend, {model->config.n_layers, model->config.kv_dim(), 16, 8});
  ASSERT_TRUE(cache.is_ok());
  std::vector<TokenId> ids;
  std::mt19937 rng(5);
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<TokenId>(rng() % spec.vocab));
  KvSequence seq;
  ASSERT_TRUE(kv_sequence_reserve(*cache, seq, static_cast<int32_t>(ids.size())).is_ok());
  ModelInput in;
  in.clear(cache->config().block_size);
  ASSERT_TRUE(in.add_sequence(ids, 0, seq.blocks, false).is_ok());
  in.want_every_row();
  std::vector<float> got(ids.size() * static_cast<size_t>(spec.vocab));
  ASSERT_TRUE((*llama)->forward(in, *cache, got.data()).is_ok());
  const auto want = oracle_logits(spec, w, ids);
  double worst = 0.0;
  for (size_t t = 0; t < ids.size(); ++t) {
    double scale = 0.0;
    for (int v = 0; v < spec.vocab; ++v) scale = std::max(scale, std::fabs(want[t * spec.vocab + v]));
    for (int v = 0; v < spec.vocab; ++v) {
      worst = std::max(worst, std::fabs(got[t * spec.vocab + v] - want[t * spec.vocab + v]) / scale);
    }
  }
  std::printf("%s: worst logit difference %.2g of the row's largest\n", std::string(what).c_str(), worst);
  EXPECT_LT(worst, 1e-4) << what;
}

TEST(HfOracleTest, Llama) { check_against_oracle({}, "llama"); }

TEST(HfOracleTest, Qwen2WithQkvBias) {
  Spec s;
  s.architecture = "Qwen2ForCausalLM";
  s.qkv_bias = true;
  s.theta = 1000000.0;
  check_against_oracle(s, "qwen2 qkv bias");
}

TEST(HfOracleTest, Llama3RopeScaling) {
  Spec s;
  s.theta = 500000.0;
  s.llama3_scaling = true;
  s.dim = 128;
  s.heads = 4;  // head_dim 32: wavelengths span all three llama3 bands
  check_against_oracle(s, "llama3 rope scaling");
}

TEST(HfOracleTest, MistralSlidingWindow) {
  Spec s;
  s.architecture = "MistralForCausalLM";
  s.sliding_window = 7;
  check_against_oracle(s, "mistral sliding window 7 over 40 tokens");
}

TEST(HfOracleTest, TiedEmbeddingsMultiQueryF16) {
  Spec s;
  s.tied = true;
  s.kv_heads = 1;
  s.dtype = DType::kF16;
  check_against_oracle(s, "tied embeddings, MQA, f16");
}

TEST(HfOracleTest, ShardedBf16) {
  Spec s;
  s.sharded = true;
  s.dtype = DType::kBF16;
  check_against_oracle(s, "sharded bf16");
}

}  // namespace
}  // namespace hearth
