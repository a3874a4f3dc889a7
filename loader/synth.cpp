#include "loader/synth.h"

#include <cmath>
#include <fstream>
#include <map>

#include <boost/json.hpp>

#include "common/half.h"
#include "common/mapped_file.h"
#include "loader/gguf_export.h"
#include "loader/gguf_writer.h"
#include "loader/quantize.h"
#include "loader/safetensors_writer.h"

namespace hearth {
namespace {

constexpr float kRmsEps = 1e-5f;
constexpr double kLmHeadGain = 4.0;
// Gemma 3's windowed layers' RoPE base (llama.cpp fixes it at this for gemma3 GGUFs).
constexpr float kGemmaLocalTheta = 10000.0f;

int32_t gemma_window(const SynthShape& c) { return c.sliding_window > 0 ? c.sliding_window : 512; }
int32_t shared_hidden(const SynthShape& c) { return c.shared_hidden > 0 ? c.shared_hidden : 2 * c.hidden; }
float attn_softcap(const SynthShape& c) { return c.attn_softcap > 0.0f ? c.attn_softcap : 50.0f; }
float final_softcap(const SynthShape& c) { return c.final_softcap > 0.0f ? c.final_softcap : 30.0f; }
bool is_moe(std::string_view arch) {
  return arch == "qwen3moe" || arch == "qwen2moe" || arch == "glm4moe" || arch == "mixtral";
}
int32_t dense_hidden(const SynthShape& c) { return c.dense_hidden > 0 ? c.dense_hidden : 2 * c.hidden; }
constexpr float kGlmRoutedScale = 2.5f;

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// kOffsetNorm: a Gemma norm, whose weight w multiplies as 1 + w: HF stores w, the GGUF 1 + w.
// kScaledEmbed: embeddings of a model that multiplies them by sqrt(dim) and ties its LM
// head to them (Gemma): of 1/sqrt(dim) the usual size, so that the scaled rows are.
enum class Kind { kNorm, kOffsetNorm, kBias, kEmbed, kScaledEmbed, kLinear, kLmHead };

struct SynthTensor {
  std::string hf_name, gguf_name;
  std::vector<int64_t> shape;  // HF shape, outermost first
  Kind kind;
  int rope_heads;  // q/k: heads whose rows are permuted for the GGUF
  bool fused_qkv = false;  // GPT-NeoX's query_key_value: per-head in HF, [Q; K; V] in GGUF
  // A GGUF tensor made of these HF tensors one after another (merged experts); an
  // entry with no hf_name is written to the GGUF only, one with no gguf_name to HF only.
  std::vector<SynthTensor> parts = {};
};

// The experts of layer `p` (HF prefix) / `g` (GGUF prefix): the router, each expert's
// matrices under the family's HF names, the GGUF's merged tensors of them, and the
// family's shared expert (Qwen2-MoE's gated, GLM-4.5's not) and choice bias (GLM-4.5).
void add_experts(std::vector<SynthTensor>& out, const SynthShape& c, std::string_view arch, const std::string& p,
                 const std::string& g) {
  const bool mixtral = arch == "mixtral";
  const int64_t d = c.dim, f = c.hidden;
  out.push_back({p + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"), g + "ffn_gate_inp.weight",
                 {c.experts, d}, Kind::kLinear, 0});
  if (arch == "glm4moe") {
    out.push_back({p + "mlp.gate.e_score_correction_bias", g + "exp_probs_b.bias", {c.experts}, Kind::kBias, 0});
  }
  const char* hf[3][2] = {{"gate_proj", "w1"}, {"up_proj", "w3"}, {"down_proj", "w2"}};
  const char* gguf[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  for (int m = 0; m < 3; ++m) {
    const std::vector<int64_t> shape = m == 2 ? std::vector<int64_t>{d, f} : std::vector<int64_t>{f, d};
    SynthTensor merged{"", g + gguf[m] + ".weight", {c.experts, shape[0], shape[1]}, Kind::kLinear, 0};
    for (int e = 0; e < c.experts; ++e) {
      const std::string name = mixtral ? fmt::format("{}block_sparse_moe.experts.{}.{}.weight", p, e, hf[m][1])
                                       : fmt::format("{}mlp.experts.{}.{}.weight", p, e, hf[m][0]);
      SynthTensor expert{name, "", shape, Kind::kLinear, 0};
      merged.parts.push_back(expert);
      out.push_back(std::move(expert));
    }
    out.push_back(std::move(merged));
  }
  if (arch == "qwen2moe") {
    const int64_t s = shared_hidden(c);
    out.push_back({p + "mlp.shared_expert.gate_proj.weight", g + "ffn_gate_shexp.weight", {s, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.shared_expert.up_proj.weight", g + "ffn_up_shexp.weight", {s, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.shared_expert.down_proj.weight", g + "ffn_down_shexp.weight", {d, s}, Kind::kLinear, 0});
    out.push_back({p + "mlp.shared_expert_gate.weight", g + "ffn_gate_inp_shexp.weight", {1, d}, Kind::kLinear, 0});
  } else if (arch == "glm4moe") {  // one shared expert of the experts' size, ungated
    out.push_back({p + "mlp.shared_experts.gate_proj.weight", g + "ffn_gate_shexp.weight", {f, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.shared_experts.up_proj.weight", g + "ffn_up_shexp.weight", {f, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.shared_experts.down_proj.weight", g + "ffn_down_shexp.weight", {d, f}, Kind::kLinear, 0});
  }
}

std::vector<SynthTensor> llama_tensors(const SynthShape& c, std::string_view arch) {
  const int64_t d = c.dim, f = c.hidden, hd = c.dim / c.heads, kv = c.kv_heads * hd;
  const bool qk_norm = arch == "qwen3" || arch == "qwen3moe";
  const bool qkv_bias = arch == "qwen2moe" || arch == "glm4moe";
  const bool moe = is_moe(arch);
  // llama.cpp's converter permutes llama's (and Mixtral's) q/k rows for interleaved RoPE,
  // not qwen's.
  const bool permute = arch == "llama" || arch == "mixtral";
  const int q_heads = permute ? c.heads : 0, k_heads = permute ? c.kv_heads : 0;
  std::vector<SynthTensor> out = {{"model.embed_tokens.weight", "token_embd.weight", {c.vocab, d}, Kind::kEmbed, 0}};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i), g = fmt::format("blk.{}.", i);
    out.push_back({p + "input_layernorm.weight", g + "attn_norm.weight", {d}, Kind::kNorm, 0});
    out.push_back({p + "self_attn.q_proj.weight", g + "attn_q.weight", {d, d}, Kind::kLinear, q_heads});
    out.push_back({p + "self_attn.k_proj.weight", g + "attn_k.weight", {kv, d}, Kind::kLinear, k_heads});
    out.push_back({p + "self_attn.v_proj.weight", g + "attn_v.weight", {kv, d}, Kind::kLinear, 0});
    if (qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", g + "attn_q.bias", {d}, Kind::kBias, 0});
      out.push_back({p + "self_attn.k_proj.bias", g + "attn_k.bias", {kv}, Kind::kBias, 0});
      out.push_back({p + "self_attn.v_proj.bias", g + "attn_v.bias", {kv}, Kind::kBias, 0});
    }
    if (qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", g + "attn_q_norm.weight", {hd}, Kind::kNorm, 0});
      out.push_back({p + "self_attn.k_norm.weight", g + "attn_k_norm.weight", {hd}, Kind::kNorm, 0});
    }
    out.push_back({p + "self_attn.o_proj.weight", g + "attn_output.weight", {d, d}, Kind::kLinear, 0});
    // llama.cpp's glm4moe names the FFN's input norm as the attention's post-norm.
    out.push_back({p + "post_attention_layernorm.weight",
                   g + (arch == "glm4moe" ? "post_attention_norm.weight" : "ffn_norm.weight"), {d}, Kind::kNorm, 0});
    if (moe && (arch != "glm4moe" || i >= c.dense_layers)) {
      add_experts(out, c, arch, p, g);
      continue;
    }
    const int64_t h = arch == "glm4moe" ? dense_hidden(c) : f;
    out.push_back({p + "mlp.gate_proj.weight", g + "ffn_gate.weight", {h, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.up_proj.weight", g + "ffn_up.weight", {h, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.down_proj.weight", g + "ffn_down.weight", {d, h}, Kind::kLinear, 0});
  }
  out.push_back({"model.norm.weight", "output_norm.weight", {d}, Kind::kNorm, 0});
  out.push_back({"lm_head.weight", "output.weight", {c.vocab, d}, Kind::kLmHead, 0});
  return out;
}

std::vector<SynthTensor> neox_tensors(const SynthShape& c) {
  const int64_t d = c.dim, f = c.hidden;
  std::vector<SynthTensor> out = {{"gpt_neox.embed_in.weight", "token_embd.weight", {c.vocab, d}, Kind::kEmbed, 0}};
  auto norm = [&](const std::string& hf, const std::string& gguf) {
    out.push_back({hf + ".weight", gguf + ".weight", {d}, Kind::kNorm, 0});
    out.push_back({hf + ".bias", gguf + ".bias", {d}, Kind::kBias, 0});
  };
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("gpt_neox.layers.{}.", i), g = fmt::format("blk.{}.", i);
    norm(p + "input_layernorm", g + "attn_norm");
    out.push_back({p + "attention.query_key_value.weight", g + "attn_qkv.weight", {3 * d, d}, Kind::kLinear, 0, true});
    out.push_back({p + "attention.query_key_value.bias", g + "attn_qkv.bias", {3 * d}, Kind::kBias, 0, true});
    out.push_back({p + "attention.dense.weight", g + "attn_output.weight", {d, d}, Kind::kLinear, 0});
    out.push_back({p + "attention.dense.bias", g + "attn_output.bias", {d}, Kind::kBias, 0});
    norm(p + "post_attention_layernorm", g + "ffn_norm");
    out.push_back({p + "mlp.dense_h_to_4h.weight", g + "ffn_up.weight", {f, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.dense_h_to_4h.bias", g + "ffn_up.bias", {f}, Kind::kBias, 0});
    out.push_back({p + "mlp.dense_4h_to_h.weight", g + "ffn_down.weight", {d, f}, Kind::kLinear, 0});
    out.push_back({p + "mlp.dense_4h_to_h.bias", g + "ffn_down.bias", {d}, Kind::kBias, 0});
  }
  norm("gpt_neox.final_layer_norm", "output_norm");
  out.push_back({"embed_out.weight", "output.weight", {c.vocab, d}, Kind::kLmHead, 0});
  return out;
}

std::vector<SynthTensor> gptj_tensors(const SynthShape& c) {
  const int64_t d = c.dim, f = c.hidden;
  std::vector<SynthTensor> out = {{"transformer.wte.weight", "token_embd.weight", {c.vocab, d}, Kind::kEmbed, 0}};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("transformer.h.{}.", i), g = fmt::format("blk.{}.", i);
    out.push_back({p + "ln_1.weight", g + "attn_norm.weight", {d}, Kind::kNorm, 0});
    out.push_back({p + "ln_1.bias", g + "attn_norm.bias", {d}, Kind::kBias, 0});
    out.push_back({p + "attn.q_proj.weight", g + "attn_q.weight", {d, d}, Kind::kLinear, 0});
    out.push_back({p + "attn.k_proj.weight", g + "attn_k.weight", {d, d}, Kind::kLinear, 0});
    out.push_back({p + "attn.v_proj.weight", g + "attn_v.weight", {d, d}, Kind::kLinear, 0});
    out.push_back({p + "attn.out_proj.weight", g + "attn_output.weight", {d, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.fc_in.weight", g + "ffn_up.weight", {f, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.fc_in.bias", g + "ffn_up.bias", {f}, Kind::kBias, 0});
    out.push_back({p + "mlp.fc_out.weight", g + "ffn_down.weight", {d, f}, Kind::kLinear, 0});
    out.push_back({p + "mlp.fc_out.bias", g + "ffn_down.bias", {d}, Kind::kBias, 0});
  }
  out.push_back({"transformer.ln_f.weight", "output_norm.weight", {d}, Kind::kNorm, 0});
  out.push_back({"transformer.ln_f.bias", "output_norm.bias", {d}, Kind::kBias, 0});
  out.push_back({"lm_head.weight", "output.weight", {c.vocab, d}, Kind::kLmHead, 0});
  out.push_back({"lm_head.bias", "output.bias", {c.vocab}, Kind::kBias, 0});
  return out;
}

std::vector<SynthTensor> gemma_tensors(const SynthShape& c, bool qk_norm) {
  const int64_t d = c.dim, f = c.hidden, hd = c.dim / c.heads, kv = c.kv_heads * hd;
  std::vector<SynthTensor> out = {
      {"model.embed_tokens.weight", "token_embd.weight", {c.vocab, d}, Kind::kScaledEmbed, 0}};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i), g = fmt::format("blk.{}.", i);
    out.push_back({p + "input_layernorm.weight", g + "attn_norm.weight", {d}, Kind::kOffsetNorm, 0});
    out.push_back({p + "self_attn.q_proj.weight", g + "attn_q.weight", {d, d}, Kind::kLinear, 0});
    out.push_back({p + "self_attn.k_proj.weight", g + "attn_k.weight", {kv, d}, Kind::kLinear, 0});
    out.push_back({p + "self_attn.v_proj.weight", g + "attn_v.weight", {kv, d}, Kind::kLinear, 0});
    if (qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", g + "attn_q_norm.weight", {hd}, Kind::kOffsetNorm, 0});
      out.push_back({p + "self_attn.k_norm.weight", g + "attn_k_norm.weight", {hd}, Kind::kOffsetNorm, 0});
    }
    out.push_back({p + "self_attn.o_proj.weight", g + "attn_output.weight", {d, d}, Kind::kLinear, 0});
    out.push_back({p + "post_attention_layernorm.weight", g + "post_attention_norm.weight", {d}, Kind::kOffsetNorm, 0});
    out.push_back({p + "pre_feedforward_layernorm.weight", g + "ffn_norm.weight", {d}, Kind::kOffsetNorm, 0});
    out.push_back({p + "post_feedforward_layernorm.weight", g + "post_ffw_norm.weight", {d}, Kind::kOffsetNorm, 0});
    out.push_back({p + "mlp.gate_proj.weight", g + "ffn_gate.weight", {f, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.up_proj.weight", g + "ffn_up.weight", {f, d}, Kind::kLinear, 0});
    out.push_back({p + "mlp.down_proj.weight", g + "ffn_down.weight", {d, f}, Kind::kLinear, 0});
  }
  out.push_back({"model.norm.weight", "output_norm.weight", {d}, Kind::kOffsetNorm, 0});
  return out;  // tied: no lm_head
}

std::vector<SynthTensor> tensor_list(const SynthOptions& o) {
  if (o.arch == "gemma2" || o.arch == "gemma3") return gemma_tensors(o.shape, o.arch == "gemma3");
  if (o.arch == "gptneox") return neox_tensors(o.shape);
  if (o.arch == "gptj") return gptj_tensors(o.shape);
  return llama_tensors(o.shape, o.arch);
}

// GPT-NeoX's fused rows reordered from per head ([h][q, k, v][head_dim]) to [Q; K; V]
// as llama.cpp's converter writes them.
std::vector<float> qkv_per_head_to_blocks(const std::vector<float>& x, int64_t heads, int64_t hd, int64_t cols) {
  std::vector<float> out(x.size());
  const int64_t row = cols, head_rows = hd;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t p = 0; p < 3; ++p) {
      const float* src = x.data() + ((3 * h + p) * head_rows) * row;
      float* dst = out.data() + (p * heads * hd + h * hd) * row;
      std::copy(src, src + head_rows * row, dst);
    }
  }
  return out;
}

// The share of a head RoPE rotates in a family's synthetic model (GPT-J and GPT-NeoX
// rotate a quarter, as GPT-J-6B and Pythia do).
int64_t rotary_dims(const SynthOptions& o) {
  const int64_t hd = o.shape.dim / o.shape.heads;
  if (o.arch == "glm4moe") return hd / 2;  // GLM-4.5's partial_rotary_factor
  return o.arch == "gptneox" || o.arch == "gptj" ? std::max<int64_t>(2, hd / 4) : hd;
}

std::vector<float> master_values(const SynthTensor& t, uint64_t seed, DType hf_type);

// A merged tensor's values: its parts' one after another.
std::vector<float> merged_values(const SynthTensor& t, uint64_t seed, DType hf_type) {
  std::vector<float> out;
  for (const SynthTensor& part : t.parts) {
    const std::vector<float> v = master_values(part, seed, hf_type);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// The master values: generated, then rounded to the HF dtype (F16 or BF16).
std::vector<float> master_values(const SynthTensor& t, uint64_t seed, DType hf_type) {
  if (!t.parts.empty()) return merged_values(t, seed, hf_type);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  const int64_t in = t.shape.size() > 1 ? t.shape[1] : 1;
  double scale;
  switch (t.kind) {
    case Kind::kNorm:
    case Kind::kOffsetNorm: scale = 0.2; break;
    case Kind::kBias: scale = 0.1; break;
    case Kind::kEmbed: scale = std::sqrt(3.0); break;
    case Kind::kScaledEmbed: scale = std::sqrt(3.0 / static_cast<double>(in)); break;
    case Kind::kLmHead: scale = kLmHeadGain * std::sqrt(3.0 / static_cast<double>(in)); break;
    default: scale = std::sqrt(3.0 / static_cast<double>(in));
  }
  std::vector<float> x(static_cast<size_t>(n));
  const uint64_t key = splitmix64(fnv1a64(t.hf_name) ^ seed);
  const auto mul = static_cast<float>(scale / 8388608.0);
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<int64_t>(splitmix64(key + static_cast<uint64_t>(i)) >> 40) - (int64_t{1} << 23);
    float v = static_cast<float>(u) * mul;
    if (t.kind == Kind::kNorm) v = 1.0f + v;
    x[static_cast<size_t>(i)] = v;
  }
  for (float& v : x) {
    if (hf_type == DType::kBF16) {
      if (std::fabs(v) < 0x1p-14f) v = 0.0f;  // keep every value exactly representable in F16 too
      v = bf16_to_f32(f32_to_bf16(v));
    } else {
      v = fp16_to_f32(f32_to_fp16(v));
    }
  }
  return x;
}

// A SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte pieces, then filler pieces.
struct Vocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;  // 1 normal, 2 unknown, 3 control, 6 byte
};

Vocab build_vocab(int32_t n_vocab) {
  static const char* kWords =
      "the of and to a in is it that for was on with as be he by at you this are have from or one had not but what "
      "all were we when your can said there an each which she do how their if will up other about out many then "
      "them these so some her would make like him into time has look two more write go see number no way could "
      "people my than first water been call who its now find long down day did get come made may part hello world "
      "model token llama engine fast slow cpu memory";
  const std::string space = "\xe2\x96\x81";
  Vocab v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  v.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    v.pieces.push_back(fmt::format("<0x{:02X}>", b));
    v.types.push_back(6);
  }
  std::vector<std::string> candidates;
  std::vector<std::string> lower;
  for (char c = 'a'; c <= 'z'; ++c) lower.emplace_back(1, c);
  candidates.push_back(space);
  for (const auto& c : lower) candidates.push_back(c);
  for (char c = 'A'; c <= 'Z'; ++c) candidates.emplace_back(1, c);
  for (char c : std::string("0123456789.,!?'\"-:;()")) candidates.emplace_back(1, c);
  for (const auto& c : lower) candidates.push_back(space + c);
  std::string words = kWords;
  for (size_t pos = 0; pos < words.size();) {
    const size_t end = std::min(words.find(' ', pos), words.size());
    const std::string w = words.substr(pos, end - pos);
    for (size_t k = 2; k <= w.size(); ++k) candidates.push_back(space + w.substr(0, k));
    pos = end + 1;
  }
  for (int k : {2, 3}) {
    std::vector<std::string> combos = {""};
    for (int i = 0; i < k; ++i) {
      std::vector<std::string> next;
      for (const auto& p : combos) {
        for (const auto& c : lower) next.push_back(p + c);
      }
      combos = std::move(next);
    }
    for (const auto& c : combos) candidates.push_back(c);
    for (const auto& c : combos) candidates.push_back(space + c);
  }
  std::map<std::string, int> seen;
  for (const auto& p : v.pieces) seen[p] = 1;
  for (const auto& c : candidates) {
    if (static_cast<int32_t>(v.pieces.size()) >= n_vocab) break;
    if (seen.emplace(c, 1).second) {
      v.pieces.push_back(c);
      v.types.push_back(1);
    }
  }
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    v.scores.push_back(v.types[i] != 1 ? 0.0f : -static_cast<float>(static_cast<int64_t>(i) - 259));
  }
  return v;
}

// Code points of a UTF-8 piece (the vocabulary holds ASCII and U+2581 only).
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = (static_cast<unsigned char>(s[i]) >= 0xe0) ? 3 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// HF tokenizers BPE with byte fallback; merges derived from the vocabulary as
// transformers' SentencePiece conversion does.
std::string hf_tokenizer_json(const Vocab& v) {
  std::map<std::string, int> id;
  for (size_t i = 0; i < v.pieces.size(); ++i) id[v.pieces[i]] = static_cast<int>(i);
  struct Merge {
    float score;
    std::string a, b;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (v.types[i] != 1) continue;
    const auto cps = code_points(v.pieces[i]);
    std::vector<std::pair<std::string, std::string>> local;
    for (size_t k = 1; k < cps.size(); ++k) {
      std::string l, r;
      for (size_t j = 0; j < k; ++j) l += cps[j];
      for (size_t j = k; j < cps.size(); ++j) r += cps[j];
      if (id.contains(l) && id.contains(r)) local.emplace_back(l, r);
    }
    std::stable_sort(local.begin(), local.end(), [&](const auto& x, const auto& y) {
      return std::pair(id[x.first], id[x.second]) < std::pair(id[y.first], id[y.second]);
    });
    for (auto& [a, b] : local) merges.push_back({v.scores[i], a, b});
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) { return x.score > y.score; });

  namespace js = boost::json;
  auto special = [&](int i) {
    return js::object{{"id", i},          {"content", v.pieces[static_cast<size_t>(i)]}, {"single_word", false},
                      {"lstrip", false},  {"rstrip", false},                             {"normalized", false},
                      {"special", true}};
  };
  js::object vocab;
  for (size_t i = 0; i < v.pieces.size(); ++i) vocab[v.pieces[i]] = i;
  js::array merge_list;
  for (const auto& m : merges) merge_list.push_back(js::string(m.a + " " + m.b));
  const std::string space = "\xe2\x96\x81";
  js::object root{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", js::array{special(0), special(1), special(2)}},
      {"normalizer",
       js::object{{"type", "Sequence"},
                  {"normalizers", js::array{js::object{{"type", "Prepend"}, {"prepend", space}},
                                            js::object{{"type", "Replace"},
                                                       {"pattern", js::object{{"String", " "}}},
                                                       {"content", space}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       js::object{{"type", "TemplateProcessing"},
                  {"single", js::array{js::object{{"SpecialToken", js::object{{"id", "<s>"}, {"type_id", 0}}}},
                                       js::object{{"Sequence", js::object{{"id", "A"}, {"type_id", 0}}}}}},
                  {"pair", js::array{js::object{{"SpecialToken", js::object{{"id", "<s>"}, {"type_id", 0}}}},
                                     js::object{{"Sequence", js::object{{"id", "A"}, {"type_id", 0}}}},
                                     js::object{{"SpecialToken", js::object{{"id", "<s>"}, {"type_id", 1}}}},
                                     js::object{{"Sequence", js::object{{"id", "B"}, {"type_id", 1}}}}}},
                  {"special_tokens",
                   js::object{{"<s>", js::object{{"id", "<s>"}, {"ids", js::array{1}}, {"tokens", js::array{"<s>"}}}}}}}},
      {"decoder", js::object{{"type", "Sequence"},
                             {"decoders", js::array{js::object{{"type", "Replace"},
                                                               {"pattern", js::object{{"String", space}}},
                                                               {"content", " "}},
                                                    js::object{{"type", "ByteFallback"}}, js::object{{"type", "Fuse"}},
                                                    js::object{{"type", "Strip"}, {"content", " "}, {"start", 1},
                                                               {"stop", 0}}}}}},
      {"model", js::object{{"type", "BPE"},
                           {"dropout", nullptr},
                           {"unk_token", "<unk>"},
                           {"continuing_subword_prefix", nullptr},
                           {"end_of_word_suffix", nullptr},
                           {"fuse_unk", true},
                           {"byte_fallback", true},
                           {"ignore_merges", false},
                           {"vocab", std::move(vocab)},
                           {"merges", std::move(merge_list)}}},
  };
  return js::serialize(root);
}

Status write_gguf(const SynthOptions& o, const Vocab& vocab) {
  const SynthShape& c = o.shape;
  const int64_t hd = c.dim / c.heads;
  GgufWriter w;
  const std::string a = o.arch == "mixtral" ? "llama" : o.arch;  // llama.cpp stores Mixtral as llama
  const bool layer_norm = a == "gptneox" || a == "gptj";
  w.add_string("general.architecture", a);
  w.add_string("general.name", o.name);
  w.add_string("general.description", fmt::format("pseudo-random weights from hearth synth, seed {}", o.seed));
  const uint32_t file_type = o.gguf_type == DType::kF32    ? 0
                             : o.gguf_type == DType::kF16  ? 1
                             : o.gguf_type == DType::kQ4_0 ? 2
                             : o.gguf_type == DType::kQ8_0 ? 7
                                                           : 32;
  w.add_u32("general.file_type", file_type);
  w.add_u32("general.quantization_version", 2);
  w.add_u32("general.alignment", 32);
  w.add_u32(a + ".vocab_size", static_cast<uint32_t>(c.vocab));
  if (o.pooling != Pooling::kNone) {  // llama.cpp's numbering: 1 mean, 2 cls, 3 last
    w.add_u32(a + ".pooling_type", o.pooling == Pooling::kMean ? 1 : o.pooling == Pooling::kFirst ? 2 : 3);
  }
  w.add_u32(a + ".context_length", static_cast<uint32_t>(c.context));
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(c.dim));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(c.layers));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(a == "glm4moe" ? dense_hidden(c) : c.hidden));
  w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(rotary_dims(o)));
  w.add_f32(a + ".rope.freq_base", c.rope_theta);
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(c.heads));
  w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(layer_norm ? c.heads : c.kv_heads));
  const bool gemma = a == "gemma2" || a == "gemma3";
  if (a == "qwen3" || a == "qwen3moe" || a == "glm4moe" || gemma) {
    w.add_u32(a + ".attention.key_length", static_cast<uint32_t>(hd));
    w.add_u32(a + ".attention.value_length", static_cast<uint32_t>(hd));
  }
  if (gemma) w.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(gemma_window(c)));
  if (a == "gemma2") {
    w.add_f32(a + ".attn_logit_softcapping", attn_softcap(c));
    w.add_f32(a + ".final_logit_softcapping", final_softcap(c));
  }
  if (is_moe(o.arch)) {
    w.add_u32(a + ".expert_count", static_cast<uint32_t>(c.experts));
    w.add_u32(a + ".expert_used_count", static_cast<uint32_t>(c.experts_used));
    if (a != "llama") w.add_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(c.hidden));
    if (a == "qwen2moe") {
      w.add_u32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(shared_hidden(c)));
    }
    if (a == "glm4moe") {  // as llama.cpp's converter writes GLM-4.5
      w.add_u32(a + ".expert_shared_count", 1);
      w.add_u32(a + ".leading_dense_block_count", static_cast<uint32_t>(c.dense_layers));
      w.add_f32(a + ".expert_weights_scale", kGlmRoutedScale);
      w.add_bool(a + ".expert_weights_norm", true);
      w.add_u32(a + ".expert_gating_func", 2);
      w.add_u32(a + ".nextn_predict_layers", 0);
    }
  }
  w.add_f32(a + (layer_norm ? ".attention.layer_norm_epsilon" : ".attention.layer_norm_rms_epsilon"), kRmsEps);
  if (a == "gptneox") w.add_bool(a + ".use_parallel_residual", true);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", vocab.pieces);
  w.add_f32s("tokenizer.ggml.scores", vocab.scores);
  w.add_i32s("tokenizer.ggml.token_type", vocab.types);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
  for (const SynthTensor& t : tensor_list(o)) {
    if (t.gguf_name.empty()) continue;
    const DType type = t.shape.size() == 1 ? DType::kF32 : o.gguf_type;
    HEARTH_RETURN_IF_ERROR(w.add_tensor_lazy(t.gguf_name, type, t.shape, [t, type, &o, hd] {
      std::vector<float> x = master_values(t, o.seed, o.hf_type);
      if (t.rope_heads > 0) x = rope_rows_half_to_interleaved(x, t.shape[0], t.shape[1], hd);
      if (t.fused_qkv) x = qkv_per_head_to_blocks(x, o.shape.heads, hd, t.shape.size() > 1 ? t.shape[1] : 1);
      if (t.kind == Kind::kOffsetNorm) {
        for (float& v : x) v += 1.0f;  // as llama.cpp's converter stores a Gemma norm
      }
      return quantize(type, x);
    }));
  }
  return w.write(o.gguf);
}

boost::json::object llama_config(const SynthOptions& o);

// config.json as each family's transformers config spells it.
boost::json::object hf_config(const SynthOptions& o) {
  namespace js = boost::json;
  const SynthShape& c = o.shape;
  const int64_t hd = c.dim / c.heads;
  const char* dtype = o.hf_type == DType::kBF16 ? "bfloat16" : "float16";
  if (o.arch == "gptneox") {
    return {{"architectures", js::array{"GPTNeoXForCausalLM"}},
            {"model_type", "gpt_neox"},
            {"hidden_size", c.dim},
            {"intermediate_size", c.hidden},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"vocab_size", c.vocab},
            {"max_position_embeddings", c.context},
            {"layer_norm_eps", kRmsEps},
            {"rotary_pct", static_cast<double>(rotary_dims(o)) / static_cast<double>(hd)},
            {"rotary_emb_base", c.rope_theta},
            {"hidden_act", "gelu"},
            {"use_parallel_residual", true},
            {"attention_bias", true},
            {"tie_word_embeddings", false},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", dtype}};
  }
  if (o.arch == "gptj") {
    return {{"architectures", js::array{"GPTJForCausalLM"}},
            {"model_type", "gptj"},
            {"n_embd", c.dim},
            {"n_inner", c.hidden},
            {"n_layer", c.layers},
            {"n_head", c.heads},
            {"vocab_size", c.vocab},
            {"n_positions", c.context},
            {"layer_norm_epsilon", kRmsEps},
            {"rotary_dim", rotary_dims(o)},
            {"activation_function", "gelu_new"},
            {"tie_word_embeddings", false},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", dtype}};
  }
  if (o.arch == "gemma2" || o.arch == "gemma3") {
    // Llama's spelling of the shape; then what Gemma 2 and 3 share, and Gemma 3's local
    // RoPE base and pattern or Gemma 2's soft-caps.
    const bool gemma2 = o.arch == "gemma2";
    js::object config = llama_config(o);
    for (const char* key : {"hidden_act", "attention_bias", "mlp_bias", "rope_scaling"}) config.erase(key);
    config["architectures"] = js::array{gemma2 ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM"};
    config["model_type"] = gemma2 ? "gemma2" : "gemma3_text";
    config["query_pre_attn_scalar"] = hd;
    config["sliding_window"] = gemma_window(c);
    config["hidden_activation"] = "gelu_pytorch_tanh";
    config["tie_word_embeddings"] = true;
    if (gemma2) {
      config["attn_logit_softcapping"] = attn_softcap(c);
      config["final_logit_softcapping"] = final_softcap(c);
    } else {
      config["rope_local_base_freq"] = kGemmaLocalTheta;
      config["rope_scaling"] = nullptr;
      config["sliding_window_pattern"] = 6;
      config["attn_logit_softcapping"] = nullptr;
      config["final_logit_softcapping"] = nullptr;
    }
    return config;
  }
  js::object config = llama_config(o);
  if (o.arch == "qwen3moe") {
    config["architectures"] = js::array{"Qwen3MoeForCausalLM"};
    config["model_type"] = "qwen3_moe";
    config["num_experts"] = c.experts;
    config["num_experts_per_tok"] = c.experts_used;
    config["moe_intermediate_size"] = c.hidden;
    config["norm_topk_prob"] = true;
    config["decoder_sparse_step"] = 1;
    config["mlp_only_layers"] = js::array{};
  } else if (o.arch == "qwen2moe") {
    config["architectures"] = js::array{"Qwen2MoeForCausalLM"};
    config["model_type"] = "qwen2_moe";
    config["num_experts"] = c.experts;
    config["num_experts_per_tok"] = c.experts_used;
    config["moe_intermediate_size"] = c.hidden;
    config["shared_expert_intermediate_size"] = shared_hidden(c);
    config["norm_topk_prob"] = false;
    config["decoder_sparse_step"] = 1;
    config["mlp_only_layers"] = js::array{};
    config["use_sliding_window"] = false;
    config.erase("head_dim");
    config.erase("attention_bias");
    config.erase("mlp_bias");
  } else if (o.arch == "glm4moe") {
    config["architectures"] = js::array{"Glm4MoeForCausalLM"};
    config["model_type"] = "glm4_moe";
    config["intermediate_size"] = dense_hidden(c);
    config["moe_intermediate_size"] = c.hidden;
    config["n_routed_experts"] = c.experts;
    config["num_experts_per_tok"] = c.experts_used;
    config["n_shared_experts"] = 1;
    config["first_k_dense_replace"] = c.dense_layers;
    config["norm_topk_prob"] = true;
    config["routed_scaling_factor"] = kGlmRoutedScale;
    config["n_group"] = 1;
    config["topk_group"] = 1;
    config["partial_rotary_factor"] = 0.5;
    config["attention_bias"] = true;
    config["use_qk_norm"] = false;
    config["num_nextn_predict_layers"] = 0;
    config.erase("mlp_bias");
  } else if (o.arch == "mixtral") {
    config["architectures"] = js::array{"MixtralForCausalLM"};
    config["model_type"] = "mixtral";
    config["num_local_experts"] = c.experts;
    config["num_experts_per_tok"] = c.experts_used;
    config.erase("attention_bias");
    config.erase("mlp_bias");
  }
  return config;
}

boost::json::object llama_config(const SynthOptions& o) {
  namespace js = boost::json;
  const SynthShape& c = o.shape;
  const int64_t hd = c.dim / c.heads;
  const char* dtype = o.hf_type == DType::kBF16 ? "bfloat16" : "float16";
  const bool qwen3 = o.arch == "qwen3";
  return {{"architectures", js::array{qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
          {"model_type", qwen3 ? "qwen3" : "llama"},
          {"hidden_size", c.dim},
          {"intermediate_size", c.hidden},
          {"num_hidden_layers", c.layers},
          {"num_attention_heads", c.heads},
          {"num_key_value_heads", c.kv_heads},
          {"head_dim", hd},
          {"vocab_size", c.vocab},
          {"max_position_embeddings", c.context},
          {"rms_norm_eps", kRmsEps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", dtype}};
}

Status write_hf(const SynthOptions& o, const Vocab& vocab) {
  const SynthShape& c = o.shape;
  std::error_code ec;
  std::filesystem::create_directories(o.hf, ec);
  if (ec) return make_error(ErrorCode::kIo, "cannot create {}: {}", o.hf.string(), ec.message());
  SafetensorsWriter st;
  for (const SynthTensor& t : tensor_list(o)) {
    if (t.hf_name.empty()) continue;
    HEARTH_RETURN_IF_ERROR(st.add_lazy(t.hf_name, o.hf_type, t.shape, [t, &o] {
      return quantize(o.hf_type, master_values(t, o.seed, o.hf_type));
    }));
  }
  HEARTH_RETURN_IF_ERROR(st.write(o.hf / "model.safetensors"));
  namespace js = boost::json;
  HEARTH_RETURN_IF_ERROR(write_file(o.hf / "config.json", js::serialize(hf_config(o))));
  HEARTH_RETURN_IF_ERROR(write_file(o.hf / "tokenizer.json", hf_tokenizer_json(vocab)));
  if (o.pooling != Pooling::kNone) {
    std::filesystem::create_directories(o.hf / "1_Pooling", ec);
    const js::object pooling{{"word_embedding_dimension", c.dim},
                             {"pooling_mode_cls_token", o.pooling == Pooling::kFirst},
                             {"pooling_mode_mean_tokens", o.pooling == Pooling::kMean},
                             {"pooling_mode_max_tokens", false},
                             {"pooling_mode_lasttoken", o.pooling == Pooling::kLast}};
    HEARTH_RETURN_IF_ERROR(write_file(o.hf / "1_Pooling" / "config.json", js::serialize(pooling)));
  }
  const js::object tokenizer_config{{"tokenizer_class", "LlamaTokenizerFast"}, {"add_bos_token", true},
                                    {"add_eos_token", false}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                                    {"unk_token", "<unk>"}, {"model_max_length", c.context}};
  return write_file(o.hf / "tokenizer_config.json", js::serialize(tokenizer_config));
}

}  // namespace

Result<SynthShape> synth_preset(std::string_view name) {
  if (name == "tiny") return SynthShape{64, 256, 5, 4, 2, 512, 512, 10000.0f};
  if (name == "1b") return SynthShape{2048, 8192, 16, 32, 8, 32000, 8192, 500000.0f};
  if (name == "7b") return SynthShape{4096, 11008, 32, 32, 32, 32000, 4096, 10000.0f};
  // A mixture of experts of about 1B active parameters (5B in all): 24 layers of 32
  // experts of 1024, 4 per token, after Qwen3-30B-A3B's proportions.
  if (name == "1b-moe") return SynthShape{2048, 1024, 24, 32, 4, 32000, 8192, 1000000.0f, 32, 4};
  return make_error(ErrorCode::kInvalidArgument, "unknown preset \"{}\" (tiny, 1b, 7b, 1b-moe)", name);
}

float synth_uniform(std::string_view hf_name, uint64_t seed, uint64_t i, double scale) {
  const uint64_t key = splitmix64(fnv1a64(hf_name) ^ seed);
  const auto u = static_cast<int64_t>(splitmix64(key + i) >> 40) - (int64_t{1} << 23);
  return static_cast<float>(u) * static_cast<float>(scale / 8388608.0);
}

Status synth_write(const SynthOptions& o) {
  const SynthShape& c = o.shape;
  if (c.dim <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.dim % c.heads != 0 || (c.dim / c.heads) % 2 != 0 ||
      c.heads % c.kv_heads != 0 || c.dim % 32 != 0 || c.hidden % 32 != 0 || c.layers <= 0 || c.context <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "a synthetic model needs dim and hidden multiples of 32, an even head size and heads divisible "
                      "by kv heads");
  }
  if (c.vocab < 260) return make_error(ErrorCode::kInvalidArgument, "vocab must hold the 259 special and byte pieces");
  if (std::find(std::begin(kSynthArchs), std::end(kSynthArchs), o.arch) == std::end(kSynthArchs)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "unknown architecture \"{}\" (llama, qwen3, gptneox, gptj, qwen3moe, qwen2moe, glm4moe, "
                      "mixtral, gemma2, gemma3)", o.arch);
  }
  if (o.arch == "glm4moe" && (c.dense_layers < 0 || c.dense_layers >= c.layers)) {
    return make_error(ErrorCode::kInvalidArgument, "{} dense layers of {}: glm4moe needs at least one expert layer",
                      c.dense_layers, c.layers);
  }
  if (is_moe(o.arch) &&
      (c.experts < 1 || c.experts_used < 1 || c.experts_used > c.experts || c.experts_used > 16)) {
    return make_error(ErrorCode::kInvalidArgument, "{} experts with {} per token", c.experts, c.experts_used);
  }
  if ((o.arch == "gptneox" || o.arch == "gptj") && c.kv_heads != c.heads) {
    return make_error(ErrorCode::kInvalidArgument, "{} has no grouped-query attention: give --kv-heads {}", o.arch,
                      c.heads);
  }
  if (o.gguf.empty() && o.hf.empty()) return make_error(ErrorCode::kInvalidArgument, "give a GGUF path or an HF dir");
  if (o.hf_type != DType::kF16 && o.hf_type != DType::kBF16) {
    return make_error(ErrorCode::kInvalidArgument, "the HF master dtype is f16 or bf16");
  }
  if (o.gguf_type == DType::kBF16) return make_error(ErrorCode::kInvalidArgument, "GGUF type is f32, f16, q8_0 or q4_0");
  const Vocab vocab = build_vocab(c.vocab);
  if (static_cast<int32_t>(vocab.pieces.size()) < c.vocab) {
    return make_error(ErrorCode::kInvalidArgument, "vocab {} is larger than the generator's {} pieces", c.vocab,
                      vocab.pieces.size());
  }
  if (!o.gguf.empty()) HEARTH_RETURN_IF_ERROR(write_gguf(o, vocab));
  if (!o.hf.empty()) HEARTH_RETURN_IF_ERROR(write_hf(o, vocab));
  return Status::ok();
}

}  // namespace hearth
