// Hugging Face directory (config.json + safetensors) -> LoadedModel.
#include <algorithm>
#include <set>

#include "common/json.h"
#include "loader/model.h"
#include "loader/prequantized.h"
#include "loader/safetensors.h"

namespace hearth {
namespace {

constexpr size_t kMaxConfigBytes = 16u << 20;

struct HfArch {
  std::string_view hf_name;
  std::string_view name;
  bool qkv_bias;
};

constexpr HfArch kArchs[] = {
    {"LlamaForCausalLM", "llama", false},
    {"MistralForCausalLM", "mistral", false},
    {"Qwen2ForCausalLM", "qwen2", true},
};

constexpr std::pair<std::string_view, std::string_view> kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// HF parameter name -> canonical name; empty for buffers that carry no weights.
// Names that match nothing are kept as they are, so that the tensor check refuses them.
std::string canonical_name(const std::string& hf) {
  for (const auto& [from, to] : kGlobalNames) {
    if (hf == from) return std::string(to);
  }
  constexpr std::string_view kPrefix = "model.layers.";
  if (hf.starts_with(kPrefix)) {
    const size_t dot = hf.find('.', kPrefix.size());
    if (dot != std::string::npos && dot > kPrefix.size() && dot - kPrefix.size() <= 4) {
      const std::string index = hf.substr(kPrefix.size(), dot - kPrefix.size());
      const std::string_view rest = std::string_view(hf).substr(dot + 1);
      if (index.find_first_not_of("0123456789") == std::string::npos) {
        if (rest == "self_attn.rotary_emb.inv_freq") return "";
        for (const auto& [from, to] : kLayerNames) {
          if (rest == from) return fmt::format("blk.{}.{}", std::stoi(index), to);
        }
      }
    }
  }
  return hf;
}

Result<int32_t> get_int(const boost::json::object& cfg, std::string_view key, std::optional<int64_t> fallback) {
  HEARTH_ASSIGN_OR_RETURN(auto v, json_opt_int(cfg, key));
  if (!v) {
    if (fallback) return static_cast<int32_t>(*fallback);
    return make_error(ErrorCode::kFormat, "config.json has no \"{}\"", key);
  }
  if (*v < 0 || *v > INT32_MAX) return make_error(ErrorCode::kFormat, "config.json \"{}\" is {}", key, *v);
  return static_cast<int32_t>(*v);
}

// eos_token_id may be one id or a list of ids.
Status append_ids(const boost::json::object& obj, std::string_view key, std::vector<TokenId>& out) {
  const auto it = obj.find(boost::json::string_view(key.data(), key.size()));
  if (it == obj.end() || it->value().is_null()) return Status::ok();
  auto push = [&](const boost::json::value& v) -> Status {
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() > INT32_MAX) {
      return make_error(ErrorCode::kFormat, "\"{}\" must be a token id or a list of them", key);
    }
    const auto id = static_cast<TokenId>(v.as_int64());
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    return Status::ok();
  };
  if (it->value().is_array()) {
    for (const auto& v : it->value().as_array()) HEARTH_RETURN_IF_ERROR(push(v));
    return Status::ok();
  }
  return push(it->value());
}

Status read_config(const boost::json::object& cfg, ModelConfig& c) {
  const auto* archs = json_find_array(cfg, "architectures");
  std::string hf_arch;
  if (archs != nullptr && !archs->empty() && (*archs)[0].is_string()) hf_arch = std::string((*archs)[0].as_string());
  const HfArch* arch = nullptr;
  for (const HfArch& a : kArchs) {
    if (a.hf_name == hf_arch) arch = &a;
  }
  if (arch == nullptr) {
    return make_error(ErrorCode::kUnsupported,
                      "architecture \"{}\" is not supported (hearth runs LlamaForCausalLM, MistralForCausalLM and "
                      "Qwen2ForCausalLM)",
                      hf_arch.empty() ? "(none given)" : hf_arch);
  }
  c.architecture = std::string(arch->name);
  c.qkv_bias = arch->qkv_bias;
  c.rope_style = RopeStyle::kHalf;  // HF checkpoints are laid out for rotate_half

  HEARTH_ASSIGN_OR_RETURN(auto act, json_opt_string(cfg, "hidden_act"));
  if (act && *act != "silu") {
    return make_error(ErrorCode::kUnsupported, "hidden_act \"{}\" is not supported (silu is)", *act);
  }
  HEARTH_ASSIGN_OR_RETURN(auto attention_bias, json_opt_bool(cfg, "attention_bias"));
  HEARTH_ASSIGN_OR_RETURN(auto mlp_bias, json_opt_bool(cfg, "mlp_bias"));
  if (attention_bias.value_or(false) || mlp_bias.value_or(false)) {
    return make_error(ErrorCode::kUnsupported, "attention_bias / mlp_bias (biases on o_proj and the MLP) are not "
                      "supported");
  }
  HEARTH_ASSIGN_OR_RETURN(c.vocab_size, get_int(cfg, "vocab_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.dim, get_int(cfg, "hidden_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.hidden_dim, get_int(cfg, "intermediate_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_layers, get_int(cfg, "num_hidden_layers", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_heads, get_int(cfg, "num_attention_heads", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_kv_heads, get_int(cfg, "num_key_value_heads", c.n_heads));
  if (c.n_heads == 0) return make_error(ErrorCode::kFormat, "config.json num_attention_heads is 0");
  HEARTH_ASSIGN_OR_RETURN(c.head_dim, get_int(cfg, "head_dim", c.dim / c.n_heads));
  HEARTH_ASSIGN_OR_RETURN(c.max_context, get_int(cfg, "max_position_embeddings", 2048));
  HEARTH_ASSIGN_OR_RETURN(auto eps, json_opt_number(cfg, "rms_norm_eps"));
  c.norm_eps = static_cast<float>(eps.value_or(1e-6));
  HEARTH_ASSIGN_OR_RETURN(auto theta, json_opt_number(cfg, "rope_theta"));
  c.rope_theta = static_cast<float>(theta.value_or(10000.0));
  HEARTH_ASSIGN_OR_RETURN(auto tied, json_opt_bool(cfg, "tie_word_embeddings"));
  c.tied_embeddings = tied.value_or(false);

  HEARTH_ASSIGN_OR_RETURN(auto use_sliding, json_opt_bool(cfg, "use_sliding_window"));
  HEARTH_ASSIGN_OR_RETURN(auto window, json_opt_int(cfg, "sliding_window"));
  if (window && use_sliding.value_or(true) && *window > 0 && *window < c.max_context) {
    c.sliding_window = static_cast<int32_t>(std::min<int64_t>(*window, INT32_MAX));
  }

  if (const auto* rs = json_find_object(cfg, "rope_scaling")) {
    HEARTH_ASSIGN_OR_RETURN(auto type, json_opt_string(*rs, "rope_type"));
    if (!type) {
      HEARTH_ASSIGN_OR_RETURN(type, json_opt_string(*rs, "type"));
    }
    HEARTH_ASSIGN_OR_RETURN(auto factor, json_opt_number(*rs, "factor"));
    const std::string t = type.value_or("default");
    if (t == "linear") {
      c.rope_scaling.type = RopeScalingType::kLinear;
      c.rope_scaling.factor = static_cast<float>(factor.value_or(1.0));
    } else if (t == "llama3") {
      c.rope_scaling.type = RopeScalingType::kLlama3;
      c.rope_scaling.factor = static_cast<float>(factor.value_or(8.0));
      HEARTH_ASSIGN_OR_RETURN(auto lo, json_opt_number(*rs, "low_freq_factor"));
      HEARTH_ASSIGN_OR_RETURN(auto hi, json_opt_number(*rs, "high_freq_factor"));
      HEARTH_ASSIGN_OR_RETURN(auto orig, json_opt_int(*rs, "original_max_position_embeddings"));
      c.rope_scaling.low_freq_factor = static_cast<float>(lo.value_or(1.0));
      c.rope_scaling.high_freq_factor = static_cast<float>(hi.value_or(4.0));
      c.rope_scaling.original_context = static_cast<int32_t>(std::clamp<int64_t>(orig.value_or(8192), 0, INT32_MAX));
    } else if (t != "default") {
      return make_error(ErrorCode::kUnsupported, "rope_scaling type \"{}\" is not supported (linear and llama3 are)",
                        t);
    }
  }
  return Status::ok();
}

bool safe_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." &&
         name.find('\0') == std::string::npos;
}

}  // namespace

std::optional<std::string> hf_parameter_name(const std::string& canonical) {
  for (const auto& [hf, ours] : kGlobalNames) {
    if (canonical == ours) return std::string(hf);
  }
  constexpr std::string_view kPrefix = "blk.";
  if (!canonical.starts_with(kPrefix)) return std::nullopt;
  const size_t dot = canonical.find('.', kPrefix.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string index = canonical.substr(kPrefix.size(), dot - kPrefix.size());
  if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const std::string_view rest = std::string_view(canonical).substr(dot + 1);
  for (const auto& [hf, ours] : kLayerNames) {
    if (rest == ours) return fmt::format("model.layers.{}.{}", index, hf);
  }
  return std::nullopt;
}

Result<LoadedModel> hf_model_open(const std::filesystem::path& dir) {
  LoadedModel model;
  model.format = ModelFormat::kSafetensors;
  const auto abs_dir = std::filesystem::absolute(dir).lexically_normal();
  model.name = abs_dir.has_filename() ? abs_dir.filename().string() : abs_dir.parent_path().filename().string();

  HEARTH_ASSIGN_OR_RETURN(std::string config_text, read_small_file(dir / "config.json", kMaxConfigBytes));
  HEARTH_ASSIGN_OR_RETURN(boost::json::value config_json, json_parse(config_text, "config.json"));
  if (!config_json.is_object()) return make_error(ErrorCode::kFormat, "config.json is not a JSON object");
  const auto& cfg = config_json.as_object();
  HEARTH_RETURN_IF_ERROR(read_config(cfg, model.config).with_context("config.json"));
  HEARTH_ASSIGN_OR_RETURN(const std::optional<PrequantConfig> prequant, prequant_config(cfg));

  // Which files hold the weights: the shard index when there is one.
  std::vector<std::string> shard_files;
  const auto index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string index_text, read_small_file(index_path, kMaxConfigBytes));
    HEARTH_ASSIGN_OR_RETURN(boost::json::value index, json_parse(index_text, "model.safetensors.index.json"));
    const auto* map = index.is_object() ? json_find_object(index.as_object(), "weight_map") : nullptr;
    if (map == nullptr) return make_error(ErrorCode::kFormat, "model.safetensors.index.json has no weight_map");
    std::set<std::string> unique;
    for (const auto& [name, file] : *map) {
      if (!file.is_string() || !safe_file_name(std::string(file.as_string()))) {
        return make_error(ErrorCode::kFormat, "model.safetensors.index.json maps {} to an invalid file name",
                          std::string(name));
      }
      unique.insert(std::string(file.as_string()));
    }
    shard_files.assign(unique.begin(), unique.end());
  } else if (std::filesystem::exists(dir / "model.safetensors")) {
    shard_files.push_back("model.safetensors");
  } else {
    return make_error(ErrorCode::kNotFound,
                      "{} has neither model.safetensors nor model.safetensors.index.json", dir.string());
  }

  std::set<std::string> seen;
  std::vector<TensorView> int32_tensors;  // the packed words of a pre-quantized checkpoint
  for (const std::string& shard : shard_files) {
    HEARTH_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(dir / shard));
    HEARTH_ASSIGN_OR_RETURN(SafetensorsFile st, safetensors_parse(file.bytes(), shard, prequant.has_value()));
    for (TensorView& t : st.int32_tensors) {
      if (!seen.insert(t.name).second) {
        return make_error(ErrorCode::kFormat, "tensor {} appears in more than one place", t.name);
      }
      int32_tensors.push_back(std::move(t));
    }
    for (TensorView& t : st.tensors) {
      std::string name = canonical_name(t.name);
      if (name.empty()) continue;
      if (name == "output.weight" && model.config.tied_embeddings) continue;  // transformers ties it anyway
      if (!seen.insert(name).second) {
        return make_error(ErrorCode::kFormat, "tensor {} appears in more than one place", t.name);
      }
      t.name = std::move(name);
      model.tensors.push_back(std::move(t));
    }
    model.files.push_back(std::move(file));
  }
  if (prequant) {
    HEARTH_RETURN_IF_ERROR(prequant_apply(*prequant, std::move(int32_tensors), canonical_name, model));
  }
  if (!model.config.tied_embeddings && !seen.contains("output.weight")) {
    model.config.tied_embeddings = true;  // no lm_head: the embeddings serve as the output layer
  }

  HEARTH_ASSIGN_OR_RETURN(model.tokenizer, tokenizer_source_from_path(dir));
  model.tokenizer.vocab_size = model.config.vocab_size;
  HEARTH_ASSIGN_OR_RETURN(auto bos, json_opt_int(cfg, "bos_token_id"));
  if (bos && *bos >= 0 && *bos < model.config.vocab_size) model.tokenizer.bos_id = static_cast<TokenId>(*bos);
  HEARTH_RETURN_IF_ERROR(append_ids(cfg, "eos_token_id", model.tokenizer.eos_ids).with_context("config.json"));
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string gen_text, read_small_file(gen_path, kMaxConfigBytes));
    HEARTH_ASSIGN_OR_RETURN(boost::json::value gen, json_parse(gen_text, "generation_config.json"));
    if (gen.is_object()) {
      HEARTH_RETURN_IF_ERROR(
          append_ids(gen.as_object(), "eos_token_id", model.tokenizer.eos_ids).with_context("generation_config.json"));
    }
  }
  return model;
}

}  // namespace hearth
