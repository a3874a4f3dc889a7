// GGUF container -> LoadedModel.
#include <cmath>
#include <cstdio>

#include "loader/fused_qkv.h"
#include "loader/gguf.h"
#include "loader/model.h"

namespace hearth {
namespace {

// What llama.cpp's name for an architecture implies beyond its metadata keys. Biases
// are read from which tensors the file has.
struct ArchInfo {
  std::string_view name;
  RopeStyle rope_style;  // llama.cpp's converter permutes llama q/k rows, not the others'
  NormKind norm;
  Residual residual;
  Activation activation;
  bool gated_ffn;
  bool qk_norm;
};

constexpr ArchInfo kArchs[] = {
    {"llama", RopeStyle::kInterleaved, NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false},
    {"qwen2", RopeStyle::kHalf, NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false},
    {"qwen3", RopeStyle::kHalf, NormKind::kRms, Residual::kSequential, Activation::kSilu, true, true},
    // GPT-NeoX's own activation is the exact GELU (hidden_act "gelu"); the file does not say.
    {"gptneox", RopeStyle::kHalf, NormKind::kLayer, Residual::kParallel, Activation::kGelu, false, false},
    {"gptj", RopeStyle::kInterleaved, NormKind::kLayer, Residual::kParallelSharedNorm, Activation::kGeluTanh, false,
     false},
    {"qwen3moe", RopeStyle::kHalf, NormKind::kRms, Residual::kSequential, Activation::kSilu, true, true},
    {"qwen2moe", RopeStyle::kHalf, NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false},
    // q/k norms where the file has them (GLM-4.5 has, GLM-4.5-Air has not).
    {"glm4moe", RopeStyle::kHalf, NormKind::kRms, Residual::kSequential, Activation::kSilu, true, false},
    {"gemma2", RopeStyle::kHalf, NormKind::kRms, Residual::kSequential, Activation::kGeluTanh, true, false},
    {"gemma3", RopeStyle::kHalf, NormKind::kRms, Residual::kSequential, Activation::kGeluTanh, true, true},
};

// Metadata keys that change the math and that hearth does not implement, refused by name.
constexpr std::string_view kUnimplementedKeys[] = {
    ".attn_logit_softcapping", ".final_logit_softcapping", ".attention.sliding_window_pattern", ".embedding_scale",
    ".logit_scale", ".residual_scale", ".attention.clamp_kqv", ".expert_shared_count", ".leading_dense_block_count",
    ".expert_shared_feed_forward_length", ".rope.dimension_sections",
};

// A mixture of experts' merged tensors (blk.N.ffn_{gate,up,down}_exps.weight, [experts,
// rows, cols]) as one view per expert (blk.N.ffn_gate.E.weight, [rows, cols]).
Status split_experts(std::vector<TensorView>& tensors) {
  std::vector<TensorView> out;
  out.reserve(tensors.size());
  for (TensorView& t : tensors) {
    const size_t at = t.name.find("_exps.weight");
    if (!t.name.starts_with("blk.") || at == std::string::npos) {
      out.push_back(std::move(t));
      continue;
    }
    const auto row_bytes = t.n_dims == 3 ? dtype_bytes(t.dtype, t.shape[2]) : std::nullopt;
    if (!row_bytes || dtype_row_group(t.dtype) != 1 || t.shape[0] < 1) {
      return make_error(ErrorCode::kFormat, "{} has shape {} of {}: experts are [experts, rows, cols]", t.name,
                        shape_string(t), dtype_name(t.dtype));
    }
    const std::string stem = t.name.substr(0, at);  // "blk.N.ffn_gate"
    const uint64_t expert_bytes = *row_bytes * static_cast<uint64_t>(t.shape[1]);
    for (int64_t e = 0; e < t.shape[0]; ++e) {
      TensorView v;
      v.name = fmt::format("{}.{}.weight", stem, e);
      v.dtype = t.dtype;
      v.n_dims = 2;
      v.shape = {t.shape[1], t.shape[2], 0, 0};
      v.data = t.data + static_cast<uint64_t>(e) * expert_bytes;
      v.bytes = expert_bytes;
      out.push_back(std::move(v));
    }
  }
  tensors = std::move(out);
  return Status::ok();
}

// Whether a metadata value says anything: not zero, false, empty.
bool value_set(const GgufValue& v) {
  switch (v.type) {
    case GgufValue::Type::kUint: return v.u != 0;
    case GgufValue::Type::kInt: return v.i != 0;
    case GgufValue::Type::kFloat: return v.f != 0.0;
    case GgufValue::Type::kBool: return v.b;
    case GgufValue::Type::kString: return !v.s.empty();
    case GgufValue::Type::kArray: return !v.strings.empty() || !v.ints.empty() || !v.floats.empty() || !v.nested.empty();
  }
  return true;
}

Result<int32_t> get_dim(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
  HEARTH_ASSIGN_OR_RETURN(auto v, f.get_uint(key));
  if (!v) {
    if (fallback) return static_cast<int32_t>(*fallback);
    return make_error(ErrorCode::kFormat, "GGUF metadata has no {}", key);
  }
  if (*v > static_cast<uint64_t>(INT32_MAX)) return make_error(ErrorCode::kFormat, "GGUF {} is {}, too large", key, *v);
  return static_cast<int32_t>(*v);
}

std::optional<int32_t> opt_id(const GgufFile& f, std::string_view key) {
  auto v = f.get_uint(key);
  if (!v.is_ok() || !*v || **v > static_cast<uint64_t>(INT32_MAX)) return std::nullopt;
  return static_cast<int32_t>(**v);
}

Result<GgufVocab> read_vocab(const GgufFile& f) {
  GgufVocab vocab;
  HEARTH_ASSIGN_OR_RETURN(auto model, f.get_string("tokenizer.ggml.model"));
  if (!model) return make_error(ErrorCode::kFormat, "GGUF file has no tokenizer (tokenizer.ggml.model is missing)");
  vocab.model = *model;
  HEARTH_ASSIGN_OR_RETURN(auto pre, f.get_string("tokenizer.ggml.pre"));
  vocab.pre = pre.value_or("default");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type != GgufValue::Type::kArray || tokens->elem_type != 8) {
    return make_error(ErrorCode::kFormat, "GGUF tokenizer.ggml.tokens is missing or not an array of strings");
  }
  vocab.tokens = tokens->strings;
  if (const GgufValue* scores = f.find("tokenizer.ggml.scores")) {
    if (scores->type != GgufValue::Type::kArray || scores->floats.size() != vocab.tokens.size()) {
      return make_error(ErrorCode::kFormat, "GGUF tokenizer.ggml.scores must hold one float per token");
    }
    vocab.scores.assign(scores->floats.begin(), scores->floats.end());
  }
  if (const GgufValue* types = f.find("tokenizer.ggml.token_type")) {
    if (types->type != GgufValue::Type::kArray || types->ints.size() != vocab.tokens.size()) {
      return make_error(ErrorCode::kFormat, "GGUF tokenizer.ggml.token_type must hold one integer per token");
    }
    vocab.token_types.reserve(types->ints.size());
    for (int64_t t : types->ints) vocab.token_types.push_back(static_cast<int32_t>(t));
  }
  if (const GgufValue* merges = f.find("tokenizer.ggml.merges")) {
    if (merges->type != GgufValue::Type::kArray || merges->elem_type != 8) {
      return make_error(ErrorCode::kFormat, "GGUF tokenizer.ggml.merges must be an array of strings");
    }
    vocab.merges = merges->strings;
  }
  vocab.bos_id = opt_id(f, "tokenizer.ggml.bos_token_id");
  vocab.eos_id = opt_id(f, "tokenizer.ggml.eos_token_id");
  vocab.unk_id = opt_id(f, "tokenizer.ggml.unknown_token_id");
  vocab.pad_id = opt_id(f, "tokenizer.ggml.padding_token_id");
  vocab.eot_id = opt_id(f, "tokenizer.ggml.eot_token_id");
  vocab.eom_id = opt_id(f, "tokenizer.ggml.eom_token_id");
  HEARTH_ASSIGN_OR_RETURN(vocab.add_bos, f.get_bool("tokenizer.ggml.add_bos_token"));
  HEARTH_ASSIGN_OR_RETURN(vocab.add_eos, f.get_bool("tokenizer.ggml.add_eos_token"));
  HEARTH_ASSIGN_OR_RETURN(vocab.add_space_prefix, f.get_bool("tokenizer.ggml.add_space_prefix"));
  HEARTH_ASSIGN_OR_RETURN(vocab.remove_extra_whitespaces, f.get_bool("tokenizer.ggml.remove_extra_whitespaces"));
  HEARTH_ASSIGN_OR_RETURN(auto chat_template, f.get_string("tokenizer.chat_template"));
  vocab.chat_template = chat_template.value_or("");
  return vocab;
}

}  // namespace

Result<LoadedModel> gguf_model_open(const std::filesystem::path& path) {
  HEARTH_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  HEARTH_ASSIGN_OR_RETURN(GgufFile gguf, gguf_parse(file.bytes()));

  HEARTH_ASSIGN_OR_RETURN(auto arch_name, gguf.get_string("general.architecture"));
  if (!arch_name) return make_error(ErrorCode::kFormat, "GGUF metadata has no general.architecture");
  const ArchInfo* arch = nullptr;
  for (const ArchInfo& a : kArchs) {
    if (a.name == *arch_name) arch = &a;
  }
  if (arch == nullptr) {
    return make_error(ErrorCode::kUnsupported,
                      "GGUF architecture \"{}\" is not supported (hearth runs llama, qwen2, qwen3, qwen3moe, gptneox, "
                      "gptj, gemma2, gemma3 and the models stored as llama: Mistral, Mixtral, TinyLlama, SmolLM)",
                      *arch_name);
  }
  const std::string a(arch->name);
  for (std::string_view key : kUnimplementedKeys) {
    if (a == "gemma2" && key.ends_with("_softcapping")) continue;  // read below
    if (a == "qwen2moe" && key == ".expert_shared_feed_forward_length") continue;
    if (a == "glm4moe" && (key == ".expert_shared_count" || key == ".leading_dense_block_count")) continue;
    const GgufValue* v = gguf.find(a + std::string(key));
    if (v != nullptr && value_set(*v)) {
      return make_error(ErrorCode::kUnsupported, "GGUF {}{} is set, and hearth's {} does not implement it", a, key, a);
    }
  }
  LoadedModel model;
  model.format = ModelFormat::kGguf;
  ModelConfig& c = model.config;
  c.architecture = a;
  c.rope_style = arch->rope_style;
  c.norm = arch->norm;
  c.residual = arch->residual;
  c.activation = arch->activation;
  c.gated_ffn = arch->gated_ffn;
  c.qk_norm = arch->qk_norm;
  for (const TensorView& t : gguf.tensors) {
    if (a == "glm4moe") c.qk_norm = c.qk_norm || t.name.ends_with(".attn_q_norm.weight");
    c.qkv_bias = c.qkv_bias || t.name.ends_with(".attn_q.bias") || t.name.ends_with(".attn_qkv.bias");
    c.attn_output_bias = c.attn_output_bias || t.name.ends_with(".attn_output.bias");
    c.ffn_bias = c.ffn_bias || t.name.ends_with(".ffn_up.bias");
    c.output_bias = c.output_bias || t.name == "output.bias";
  }
  HEARTH_ASSIGN_OR_RETURN(c.dim, get_dim(gguf, a + ".embedding_length"));
  HEARTH_ASSIGN_OR_RETURN(c.hidden_dim, get_dim(gguf, a + ".feed_forward_length"));
  HEARTH_ASSIGN_OR_RETURN(c.n_layers, get_dim(gguf, a + ".block_count"));
  HEARTH_ASSIGN_OR_RETURN(c.n_heads, get_dim(gguf, a + ".attention.head_count"));
  HEARTH_ASSIGN_OR_RETURN(c.n_kv_heads, get_dim(gguf, a + ".attention.head_count_kv", c.n_heads));
  HEARTH_ASSIGN_OR_RETURN(c.max_context, get_dim(gguf, a + ".context_length"));
  if (c.n_heads <= 0) return make_error(ErrorCode::kFormat, "GGUF {}.attention.head_count is 0", a);
  HEARTH_ASSIGN_OR_RETURN(c.head_dim, get_dim(gguf, a + ".attention.key_length", c.dim / c.n_heads));
  HEARTH_ASSIGN_OR_RETURN(const int32_t value_dim, get_dim(gguf, a + ".attention.value_length", c.head_dim));
  if (value_dim != c.head_dim) {
    return make_error(ErrorCode::kUnsupported, "key length {} differs from value length {}: not supported", c.head_dim,
                      value_dim);
  }
  HEARTH_ASSIGN_OR_RETURN(const int32_t rope_dims, get_dim(gguf, a + ".rope.dimension_count", c.head_dim));
  c.rotary_dim = rope_dims == c.head_dim ? 0 : rope_dims;
  HEARTH_ASSIGN_OR_RETURN(auto eps, gguf.get_float(a + (c.norm == NormKind::kLayer ? ".attention.layer_norm_epsilon"
                                                                                  : ".attention.layer_norm_rms_epsilon")));
  c.norm_eps = static_cast<float>(eps.value_or(1e-5));
  if (a == "gptneox") {
    HEARTH_ASSIGN_OR_RETURN(auto parallel, gguf.get_bool("gptneox.use_parallel_residual"));
    c.residual = parallel.value_or(true) ? Residual::kParallel : Residual::kSequential;
  }
  if (a == "gemma2" || a == "gemma3") {
    // What llama.cpp fixes for these rather than reading from the file: one global layer
    // in two (gemma2) or six (gemma3, whose others have a RoPE base of 10000), the
    // embeddings times sqrt(n_embd), and an attention scale of 1/sqrt(head_dim)
    // (1/sqrt(n_embd / n_head) for the 27Bs, whose query_pre_attn_scalar is that); gemma2's
    // soft-caps default to 50 and 30. The converter stores each norm weight as
    // 1 + weight, which is what hearth's RMSNorm multiplies by.
    const bool gemma2 = a == "gemma2";
    c.sandwich_norm = true;
    c.sliding_window_pattern = gemma2 ? 2 : 6;
    if (!gemma2) c.rope_local_theta = 10000.0f;
    c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
    const bool is_27b = gemma2 ? c.n_layers == 46 && c.dim == 4608 : c.n_layers == 62 && c.dim == 5376;
    c.attention_scale = 1.0f / std::sqrt(static_cast<float>(is_27b ? c.dim / c.n_heads : c.head_dim));
    if (gemma2) {
      HEARTH_ASSIGN_OR_RETURN(auto attn_cap, gguf.get_float(a + ".attn_logit_softcapping"));
      HEARTH_ASSIGN_OR_RETURN(auto final_cap, gguf.get_float(a + ".final_logit_softcapping"));
      c.attn_softcap = static_cast<float>(attn_cap.value_or(50.0));
      c.final_softcap = static_cast<float>(final_cap.value_or(30.0));
    }
  }
  HEARTH_ASSIGN_OR_RETURN(c.n_experts, get_dim(gguf, a + ".expert_count", 0));
  if (c.n_experts > 0) {
    if (a != "llama" && a != "qwen3moe" && a != "qwen2moe" && a != "glm4moe") {
      return make_error(ErrorCode::kUnsupported, "GGUF {}.expert_count is set: experts are implemented for llama "
                        "(Mixtral), qwen2moe, qwen3moe and glm4moe only", a);
    }
    HEARTH_ASSIGN_OR_RETURN(c.n_experts_used, get_dim(gguf, a + ".expert_used_count"));
    // llama.cpp's gating functions: 1 softmax, 2 sigmoid (glm4moe's, also when unset).
    const bool glm = a == "glm4moe";
    HEARTH_ASSIGN_OR_RETURN(const int32_t gating, get_dim(gguf, a + ".expert_gating_func", glm ? 2 : 1));
    if (glm ? gating != 2 && gating != 0 : gating != 1) {
      return make_error(ErrorCode::kUnsupported, "GGUF {}.expert_gating_func {} is not implemented ({} is)", a, gating,
                        glm ? "2, sigmoid," : "1, softmax,");
    }
    HEARTH_ASSIGN_OR_RETURN(auto norm, gguf.get_bool(a + ".expert_weights_norm"));
    // What llama.cpp does: renormalised for llama (Mixtral) and qwen3moe, not for qwen2moe,
    // and for glm4moe as the file says (not when it says nothing).
    c.moe_normalize = norm.value_or(a != "qwen2moe" && !glm);
    if (glm) {
      // GLM-4.5: the dense layers first (feed_forward_length), sigmoid scores with a choice
      // bias (exp_probs_b), weights times expert_weights_scale, ungated shared experts; the
      // last nextn_predict_layers blocks are multi-token-prediction heads, not run.
      c.router_sigmoid = true;
      HEARTH_ASSIGN_OR_RETURN(auto scale, gguf.get_float(a + ".expert_weights_scale"));
      c.routed_scale = static_cast<float>(scale.value_or(1.0));
      HEARTH_ASSIGN_OR_RETURN(c.n_dense_layers, get_dim(gguf, a + ".leading_dense_block_count", 0));
      c.dense_hidden_dim = c.n_dense_layers > 0 ? c.hidden_dim : 0;
      HEARTH_ASSIGN_OR_RETURN(const int32_t nextn, get_dim(gguf, a + ".nextn_predict_layers", 0));
      if (nextn < 0 || nextn >= c.n_layers) {
        return make_error(ErrorCode::kFormat, "GGUF {}.nextn_predict_layers is {} of {} blocks", a, nextn, c.n_layers);
      }
      c.n_layers -= nextn;
      HEARTH_ASSIGN_OR_RETURN(const int32_t shared, get_dim(gguf, a + ".expert_shared_count", 0));
      HEARTH_ASSIGN_OR_RETURN(const int32_t expert_ffn, get_dim(gguf, a + ".expert_feed_forward_length"));
      if (shared > 64) return make_error(ErrorCode::kFormat, "GGUF {}.expert_shared_count is {}", a, shared);
      c.shared_expert_dim = shared * expert_ffn;
      std::vector<TensorView> kept;
      for (TensorView& t : gguf.tensors) {
        int32_t layer = -1;
        if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1 && layer >= c.n_layers) continue;
        c.router_bias = c.router_bias || t.name.ends_with(".exp_probs_b.bias");
        // llama.cpp's glm4moe stores the FFN's input norm as the attention's post-norm.
        const size_t at = t.name.find(".post_attention_norm.weight");
        if (at != std::string::npos) t.name = t.name.substr(0, at) + ".ffn_norm.weight";
        kept.push_back(std::move(t));
      }
      gguf.tensors = std::move(kept);
    }
    if (a != "llama") {
      HEARTH_ASSIGN_OR_RETURN(c.hidden_dim, get_dim(gguf, a + ".expert_feed_forward_length"));
    } else {
      c.architecture = "mixtral";  // Mixtral is stored as llama with experts
    }
    if (a == "qwen2moe") {
      // The shared expert, always gated by ffn_gate_inp_shexp (a vector of n_embd).
      HEARTH_ASSIGN_OR_RETURN(c.shared_expert_dim, get_dim(gguf, a + ".expert_shared_feed_forward_length", 0));
      c.shared_expert_gate = c.shared_expert_dim > 0;
      for (TensorView& t : gguf.tensors) {
        if (t.name.ends_with(".ffn_gate_inp_shexp.weight") && t.n_dims == 1) {
          t.n_dims = 2;  // one output row: [1, n_embd]
          t.shape = {1, t.shape[0], 0, 0};
        }
      }
    }
  } else if (a == "qwen3moe" || a == "qwen2moe" || a == "glm4moe") {
    return make_error(ErrorCode::kFormat, "GGUF {} has no {}.expert_count", a, a);
  }
  HEARTH_ASSIGN_OR_RETURN(auto theta, gguf.get_float(a + ".rope.freq_base"));
  c.rope_theta = static_cast<float>(theta.value_or(10000.0));
  HEARTH_ASSIGN_OR_RETURN(auto scaling, gguf.get_string(a + ".rope.scaling.type"));
  if (scaling && *scaling == "linear") {
    HEARTH_ASSIGN_OR_RETURN(auto factor, gguf.get_float(a + ".rope.scaling.factor"));
    c.rope_scaling.type = RopeScalingType::kLinear;
    c.rope_scaling.factor = static_cast<float>(factor.value_or(1.0));
  } else if (scaling && *scaling != "none") {
    return make_error(ErrorCode::kUnsupported, "rope scaling type \"{}\" is not supported (none, linear, and llama3 "
                      "through rope_freqs.weight are)", *scaling);
  }
  HEARTH_ASSIGN_OR_RETURN(c.sliding_window, get_dim(gguf, a + ".attention.sliding_window", a == "gemma2" ? 4096 : 0));
  // llama.cpp's pooling types: 1 mean, 2 cls, 3 last (0 none and 4 rank, a reranker's
  // head hearth does not load, state no embedding pooling).
  HEARTH_ASSIGN_OR_RETURN(const int32_t pooling, get_dim(gguf, a + ".pooling_type", 0));
  c.pooling = pooling == 1 ? Pooling::kMean : pooling == 2 ? Pooling::kFirst : pooling == 3 ? Pooling::kLast : Pooling::kNone;

  HEARTH_ASSIGN_OR_RETURN(model.tokenizer.gguf, read_vocab(gguf));
  model.tokenizer.kind = TokenizerSource::Kind::kGguf;
  HEARTH_ASSIGN_OR_RETURN(c.vocab_size,
                          get_dim(gguf, a + ".vocab_size", static_cast<int64_t>(model.tokenizer.gguf.tokens.size())));
  model.tokenizer.vocab_size = c.vocab_size;

  bool has_output = false;
  for (const TensorView& t : gguf.tensors) has_output = has_output || t.name == "output.weight";
  c.tied_embeddings = !has_output;
  HEARTH_ASSIGN_OR_RETURN(auto name, gguf.get_string("general.name"));
  model.name = name.value_or(path.stem().string());
  model.tensors = std::move(gguf.tensors);
  model.files.push_back(std::move(file));
  HEARTH_RETURN_IF_ERROR(split_fused_qkv(model, QkvLayout::kBlocks));
  HEARTH_RETURN_IF_ERROR(split_experts(model.tensors));
  return model;
}

}  // namespace hearth
