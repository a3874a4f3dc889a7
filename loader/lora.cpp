#include "loader/lora.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "common/json.h"
#include "common/mapped_file.h"
#include "kernels/reference/reference.h"
#include "loader/gguf.h"
#include "loader/gguf_export.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/synth.h"

namespace hearth {
namespace {

constexpr size_t kMaxConfigBytes = 1u << 20;
constexpr std::string_view kPrefix = "base_model.model.";
constexpr LoraTarget kAllTargets[] = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kOutput,
                                      LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};

std::string canonical_name(int32_t layer, LoraTarget t) {
  return fmt::format("blk.{}.{}.weight", layer, lora_target_name(t));
}

// A matrix of the base an adapter may adapt: where it is, and its shape.
struct Adaptable {
  int32_t layer;
  LoraTarget target;
  const TensorView* base;
};

// Every adaptable matrix of a base, by its Hugging Face module path
// ("model.layers.3.self_attn.q_proj", what PEFT names), or with `canonical` by its own
// name ("blk.3.attn_q.weight", what a GGUF LoRA names).
std::map<std::string, Adaptable, std::less<>> adaptable_matrices(const ModelConfig& config,
                                                                 std::span<const TensorView> tensors,
                                                                 bool canonical = false) {
  std::map<std::string_view, const TensorView*> by_name;
  for (const TensorView& t : tensors) by_name.emplace(t.name, &t);
  std::map<std::string, Adaptable, std::less<>> modules;
  for (int32_t layer = 0; layer < config.n_layers; ++layer) {
    for (LoraTarget t : kAllTargets) {
      const std::string name = canonical_name(layer, t);
      const auto it = by_name.find(name);
      if (it == by_name.end() || it->second->n_dims != 2) continue;
      const TensorView* w = it->second;
      if (canonical) {
        modules.emplace(name, Adaptable{layer, t, w});
        continue;
      }
      const std::optional<std::string> hf = hf_parameter_name(name, config.architecture);
      if (!hf || !hf->ends_with(".weight")) continue;
      modules.emplace(hf->substr(0, hf->size() - 7), Adaptable{layer, t, w});
    }
  }
  return modules;
}

// Whether the base keeps q/k rows for interleaved RoPE pairs while its Hugging Face
// checkpoint (whose layout PEFT adapters follow) keeps them for rotate-half pairs.
bool qk_rows_interleaved(const ModelConfig& config) {
  return config.rope_style == RopeStyle::kInterleaved && config.architecture != "gptj";
}

// A config field that changes the adapted function: refused unless absent, null or its
// neutral value.
Status refuse_if_set(const boost::json::object& cfg, std::string_view key, std::string_view why) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->value().is_null()) return Status::ok();
  const boost::json::value& v = it->value();
  const bool neutral = (v.is_bool() && !v.as_bool()) || (v.is_array() && v.as_array().empty()) ||
                       (v.is_object() && v.as_object().empty()) || (v.is_string() && v.as_string() == "none");
  if (neutral) return Status::ok();
  return make_error(ErrorCode::kUnsupported, "adapter_config.json: {} = {} is not supported ({})", key,
                    boost::json::serialize(v), why);
}

struct PeftConfig {
  int32_t rank = 0;
  float scale = 0.0f;
};

Result<PeftConfig> read_peft_config(const std::filesystem::path& dir) {
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_small_file(dir / "adapter_config.json", kMaxConfigBytes));
  HEARTH_ASSIGN_OR_RETURN(boost::json::value doc, json_parse(text, "adapter_config.json"));
  if (!doc.is_object()) return make_error(ErrorCode::kFormat, "adapter_config.json is not a JSON object");
  const boost::json::object& cfg = doc.as_object();
  HEARTH_ASSIGN_OR_RETURN(const std::optional<std::string> type, json_opt_string(cfg, "peft_type"));
  if (type.value_or("LORA") != "LORA") {
    return make_error(ErrorCode::kUnsupported, "adapter_config.json: peft_type {} is not LORA", *type);
  }
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "use_dora", "DoRA's magnitude vectors are not applied"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "bias", "adapter biases are not applied"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "lora_bias", "adapter biases are not applied"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "modules_to_save", "fully trained modules are not loaded"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "trainable_token_indices", "trained token embeddings are not loaded"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "rank_pattern", "every module has rank r"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "alpha_pattern", "every module has lora_alpha"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "fan_in_fan_out", "factors are read as [r, in] and [out, r]"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "layer_replication", "the base's layers are not replicated"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "target_parameters", "parameters other than modules are not adapted"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "use_qalora", "QA-LoRA's pooled inputs are not applied"));
  HEARTH_RETURN_IF_ERROR(refuse_if_set(cfg, "alora_invocation_tokens", "an activated LoRA's invocation is not tracked"));
  HEARTH_ASSIGN_OR_RETURN(const std::optional<int64_t> r, json_opt_int(cfg, "r"));
  if (!r || *r < 1 || *r > 4096) {
    return make_error(ErrorCode::kFormat, "adapter_config.json: r must be a rank of 1..4096");
  }
  HEARTH_ASSIGN_OR_RETURN(const std::optional<double> alpha, json_opt_number(cfg, "lora_alpha"));
  const double a = alpha.value_or(8.0);  // PEFT's default
  if (!std::isfinite(a)) return make_error(ErrorCode::kFormat, "adapter_config.json: lora_alpha is not finite");
  HEARTH_ASSIGN_OR_RETURN(const std::optional<bool> rslora, json_opt_bool(cfg, "use_rslora"));
  PeftConfig c;
  c.rank = static_cast<int32_t>(*r);
  c.scale = static_cast<float>(rslora.value_or(false) ? a / std::sqrt(static_cast<double>(*r)) : a / static_cast<double>(*r));
  if (!std::isfinite(c.scale)) {
    return make_error(ErrorCode::kFormat, "adapter_config.json: lora_alpha {} gives no finite scale", a);
  }
  return c;
}

// A factor's values as float32: [rows, cols] of F32, F16 or BF16, all finite.
Result<std::vector<float>> factor_values(const TensorView& t, int64_t rows, int64_t cols) {
  if (t.n_dims != 2 || t.shape[0] != rows || t.shape[1] != cols) {
    return make_error(ErrorCode::kInvalidArgument, "{} is {}, the base needs [{}, {}]", t.name, shape_string(t), rows,
                      cols);
  }
  std::vector<float> values(static_cast<size_t>(rows * cols));
  kernels::ref::dequantize_row(t.dtype, t.data, values.data(), rows * cols);
  for (float v : values) {
    if (!std::isfinite(v)) return make_error(ErrorCode::kFormat, "{} holds {}", t.name, v);
  }
  return values;
}

// One adapted matrix from its factor pair (either may be missing: refused), read as
// [rank, cols] and [rows, rank] of the base matrix `m`; B's q/k rows reordered when
// `interleave` (the base keeps them for interleaved RoPE pairs, the adapter does not).
Result<LoraMatrix> read_matrix(std::string_view name, const Adaptable& m, const TensorView* a, const TensorView* b,
                               int64_t rank, float scale, bool interleave, int32_t head_dim) {
  if (a == nullptr || b == nullptr) {
    return make_error(ErrorCode::kFormat, "{} has a lora_{} but no lora_{}", name, a ? "A" : "B", a ? "B" : "A");
  }
  if (dtype_block_elems(a->dtype) != 1 || dtype_block_elems(b->dtype) != 1) {
    return make_error(ErrorCode::kUnsupported, "{}'s factors are {} and {}; F32, F16 and BF16 are read", name,
                      dtype_name(a->dtype), dtype_name(b->dtype));
  }
  const int64_t rows = m.base->rows(), cols = m.base->cols();
  HEARTH_ASSIGN_OR_RETURN(std::vector<float> av, factor_values(*a, rank, cols));
  HEARTH_ASSIGN_OR_RETURN(std::vector<float> bv, factor_values(*b, rows, rank));
  if (interleave && (m.target == LoraTarget::kQ || m.target == LoraTarget::kK)) {
    bv = rope_rows_half_to_interleaved(bv, rows, rank, head_dim);
  }
  return LoraMatrix{.layer = m.layer,
                    .target = m.target,
                    .rank = static_cast<int32_t>(rank),
                    .rows = rows,
                    .cols = cols,
                    .scale = scale,
                    .a = std::move(av),
                    .b = std::move(bv)};
}

// A GGUF LoRA (llama.cpp's convert_lora_to_gguf.py): general.type "adapter",
// adapter.type "lora", adapter.lora.alpha, and per adapted matrix its factors
// "<matrix>.lora_a" ([rank, cols]) and "<matrix>.lora_b" ([rows, rank]), rows in the
// GGUF base's order (q/k permuted as the base's are).
Result<LoraAdapter> gguf_lora_open(const std::filesystem::path& path, const ModelConfig& base,
                                   std::span<const TensorView> base_tensors) {
  HEARTH_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  HEARTH_ASSIGN_OR_RETURN(GgufFile file, gguf_parse(mapped.bytes()));
  HEARTH_ASSIGN_OR_RETURN(const std::optional<std::string> type, file.get_string("general.type"));
  HEARTH_ASSIGN_OR_RETURN(const std::optional<std::string> adapter_type, file.get_string("adapter.type"));
  if (type != "adapter" || adapter_type != "lora") {
    return make_error(ErrorCode::kFormat, "not a GGUF LoRA adapter (general.type {:?}, adapter.type {:?}; want "
                      "\"adapter\" and \"lora\")", type.value_or(""), adapter_type.value_or(""));
  }
  HEARTH_ASSIGN_OR_RETURN(const std::optional<std::string> arch, file.get_string("general.architecture"));
  const std::string base_arch = base.architecture == "mistral" ? "llama" : base.architecture;
  if (arch.value_or("") != base_arch) {
    return make_error(ErrorCode::kInvalidArgument, "the adapter is for a {} model, the base is {}", arch.value_or("?"),
                      base.architecture);
  }
  if (base_arch == "llama" && base.rope_style != RopeStyle::kInterleaved) {
    return make_error(ErrorCode::kUnsupported, "a GGUF LoRA of a llama model keeps q/k rows for a GGUF base; this "
                      "base keeps them as its Hugging Face checkpoint does: use the PEFT adapter, or a GGUF base");
  }
  // Any other adapter key would change what the adapter does (an activated LoRA's
  // invocation tokens, a prompt prefix): refused, not ignored.
  for (const auto& [key, value] : file.metadata) {
    if (key.starts_with("adapter.") && key != "adapter.type" && key != "adapter.lora.alpha" &&
        key != "adapter.lora.task_name") {
      return make_error(ErrorCode::kUnsupported, "{} is not supported (only a plain LoRA is applied)", key);
    }
  }
  HEARTH_ASSIGN_OR_RETURN(const std::optional<double> alpha, file.get_float("adapter.lora.alpha"));
  const auto matrices = adaptable_matrices(base, base_tensors, /*canonical=*/true);
  std::map<std::string, std::pair<const TensorView*, const TensorView*>, std::less<>> pairs;
  for (const TensorView& t : file.tensors) {
    std::string_view n = t.name;
    const bool is_a = n.ends_with(".lora_a"), is_b = n.ends_with(".lora_b");
    if ((!is_a && !is_b) || n.size() <= 7) {
      return make_error(ErrorCode::kUnsupported, "tensor {} is not a LoRA factor (<matrix>.lora_a or .lora_b)", t.name);
    }
    n.remove_suffix(7);
    if (!matrices.contains(n)) {
      return make_error(ErrorCode::kInvalidArgument, "the adapter adapts {}, which is not an adaptable matrix of the "
                        "base model (its attention q/k/v/o and dense FFN gate/up/down projections are)", n);
    }
    auto& [a, b] = pairs[std::string(n)];
    (is_a ? a : b) = &t;
  }
  if (pairs.empty()) return make_error(ErrorCode::kFormat, "the file holds no LoRA factors");
  LoraAdapter adapter;
  for (const auto& [matrix, ab] : pairs) {
    const TensorView* a = ab.first;
    const int64_t rank = a != nullptr && a->n_dims == 2 ? a->shape[0] : 0;
    if (a != nullptr && (rank < 1 || rank > 4096)) {
      return make_error(ErrorCode::kFormat, "{} is {}: no rank of 1..4096", a->name, shape_string(*a));
    }
    // llama.cpp's scale: alpha / rank, or 1 without an alpha.
    const double scale = alpha && *alpha != 0.0 ? *alpha / static_cast<double>(rank) : 1.0;
    if (a != nullptr && !std::isfinite(static_cast<float>(scale))) {
      return make_error(ErrorCode::kFormat, "adapter.lora.alpha {} gives no finite scale", *alpha);
    }
    HEARTH_ASSIGN_OR_RETURN(LoraMatrix m, read_matrix(matrix, matrices.find(matrix)->second, a, ab.second, rank,
                                                      static_cast<float>(scale), false, base.head_dim));
    adapter.max_rank = std::max(adapter.max_rank, m.rank);
    adapter.matrices.push_back(std::move(m));
  }
  return adapter;
}

}  // namespace

std::vector<std::array<int64_t, 2>> lora_adaptable_shapes(const ModelConfig& base_config,
                                                          std::span<const TensorView> base_tensors) {
  std::vector<std::array<int64_t, 2>> out;
  for (const auto& [name, m] : adaptable_matrices(base_config, base_tensors, /*canonical=*/true)) {
    out.push_back({m.base->shape[0], m.base->shape[1]});
  }
  return out;
}

Result<LoraAdapter> lora_open(const std::filesystem::path& dir, const ModelConfig& base_config,
                              std::span<const TensorView> base_tensors, const std::string& name) {
  auto opened = [&]() -> Result<LoraAdapter> {
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir, ec)) return gguf_lora_open(dir, base_config, base_tensors);
    HEARTH_ASSIGN_OR_RETURN(const PeftConfig cfg, read_peft_config(dir));
    const std::filesystem::path file = dir / "adapter_model.safetensors";
    if (!std::filesystem::exists(file, ec) && std::filesystem::exists(dir / "adapter_model.bin", ec)) {
      return make_error(ErrorCode::kUnsupported, "adapter_model.bin (a pickle) is not read; save the adapter with "
                        "safe_serialization=True");
    }
    HEARTH_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(file));
    HEARTH_ASSIGN_OR_RETURN(SafetensorsFile st, safetensors_parse(mapped.bytes(), "adapter_model.safetensors"));
    const auto modules = adaptable_matrices(base_config, base_tensors);
    // Each module's A and B.
    std::map<std::string, std::pair<const TensorView*, const TensorView*>, std::less<>> pairs;
    for (const TensorView& t : st.tensors) {
      std::string_view n = t.name;
      const bool is_a = n.ends_with(".lora_A.weight"), is_b = n.ends_with(".lora_B.weight");
      constexpr size_t kSuffix = std::string_view(".lora_A.weight").size();
      if (!n.starts_with(kPrefix) || (!is_a && !is_b) || n.size() <= kPrefix.size() + kSuffix) {
        return make_error(ErrorCode::kUnsupported, "tensor {} is not a LoRA factor (base_model.model.<module>."
                          "lora_A.weight or .lora_B.weight)", t.name);
      }
      n.remove_prefix(kPrefix.size());
      n.remove_suffix(kSuffix);
      if (!modules.contains(n)) {
        return make_error(ErrorCode::kInvalidArgument, "tensor {} adapts {}, which is not an adaptable matrix of the "
                          "base model (its attention q/k/v/o and dense FFN gate/up/down projections are)", t.name, n);
      }
      auto& [a, b] = pairs[std::string(n)];
      (is_a ? a : b) = &t;
    }
    if (pairs.empty()) return make_error(ErrorCode::kFormat, "adapter_model.safetensors holds no LoRA factors");
    LoraAdapter adapter;
    const bool interleave = qk_rows_interleaved(base_config);
    for (const auto& [module, ab] : pairs) {
      HEARTH_ASSIGN_OR_RETURN(LoraMatrix m, read_matrix(module, modules.find(module)->second, ab.first, ab.second,
                                                        cfg.rank, cfg.scale, interleave, base_config.head_dim));
      adapter.matrices.push_back(std::move(m));
    }
    adapter.max_rank = cfg.rank;
    return adapter;
  }();
  if (opened.is_ok()) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(dir, ec).lexically_normal();
    const bool file = std::filesystem::is_regular_file(dir, ec);
    opened->name = !name.empty()        ? name
                   : file               ? abs.stem().string()
                   : abs.has_filename() ? abs.filename().string()
                                        : abs.parent_path().filename().string();
  }
  if (!opened.is_ok()) return opened.status().with_context(fmt::format("LoRA adapter {}", dir.string()));
  return opened;
}

Status lora_synth_write(const LoadedModel& base, const LoraSynthOptions& o, const std::filesystem::path& dir) {
  if (o.rank < 1 || o.rank > 4096) return make_error(ErrorCode::kInvalidArgument, "rank {} is not 1..4096", o.rank);
  const std::vector<LoraTarget> targets = o.targets.empty() ? std::vector<LoraTarget>(std::begin(kAllTargets),
                                                                                        std::end(kAllTargets))
                                                            : o.targets;
  SafetensorsWriter writer;
  std::vector<std::string> target_modules;
  size_t written = 0;
  for (const auto& [module, m] : adaptable_matrices(base.config, base.tensors)) {
    if (std::find(targets.begin(), targets.end(), m.target) == targets.end()) continue;
    const std::string leaf = module.substr(module.rfind('.') + 1);
    if (std::find(target_modules.begin(), target_modules.end(), leaf) == target_modules.end()) {
      target_modules.push_back(leaf);
    }
    const int64_t rows = m.base->rows(), cols = m.base->cols();
    // W + s B A changes a row's dot products by about `strength` times a base row's:
    // A's rows are unit-scale projections, B's entries sized to the base's 1/sqrt(cols).
    const double scale = o.rslora ? o.alpha / std::sqrt(static_cast<double>(o.rank)) : o.alpha / o.rank;
    const double a_scale = std::sqrt(3.0 / static_cast<double>(cols));
    const double b_scale = o.strength * std::sqrt(3.0 / static_cast<double>(cols)) / (scale * std::sqrt(o.rank / 3.0));
    for (const auto& [suffix, n_rows, n_cols, s] :
         {std::tuple{".lora_A.weight", int64_t{o.rank}, cols, a_scale}, std::tuple{".lora_B.weight", rows, int64_t{o.rank}, b_scale}}) {
      const std::string name = std::string(kPrefix) + module + suffix;
      const int64_t shape[] = {n_rows, n_cols};
      std::vector<float> values(static_cast<size_t>(n_rows * n_cols));
      for (size_t i = 0; i < values.size(); ++i) values[i] = synth_uniform(name, o.seed, i, s);
      HEARTH_RETURN_IF_ERROR(writer.add(name, DType::kF32, shape, std::as_bytes(std::span<const float>(values))));
    }
    ++written;
  }
  if (written == 0) {
    return make_error(ErrorCode::kUnsupported, "model {} ({}) has none of the asked matrices to adapt", base.name,
                      base.config.architecture);
  }
  boost::json::array modules;
  for (const std::string& m : target_modules) modules.emplace_back(m);
  const boost::json::object cfg{{"peft_type", "LORA"},
                                {"task_type", "CAUSAL_LM"},
                                {"r", o.rank},
                                {"lora_alpha", o.alpha},
                                {"use_rslora", o.rslora},
                                {"lora_dropout", 0.0},
                                {"bias", "none"},
                                {"target_modules", modules},
                                {"base_model_name_or_path", base.name}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::kIo, "cannot create {}: {}", dir.string(), ec.message());
  HEARTH_RETURN_IF_ERROR(write_file(dir / "adapter_config.json", boost::json::serialize(cfg) + "\n"));
  return writer.write(dir / "adapter_model.safetensors");
}

Status lora_merge_write(const LoadedModel& base, const LoraAdapter& adapter, const std::filesystem::path& path) {
  std::map<std::string, const LoraMatrix*, std::less<>> by_name;
  for (const LoraMatrix& m : adapter.matrices) by_name.emplace(canonical_name(m.layer, m.target), &m);
  const ExportOverride merged = [&](const std::string& name) -> std::optional<ExportedTensor> {
    const auto it = by_name.find(name);
    if (it == by_name.end()) return std::nullopt;
    const LoraMatrix& m = *it->second;
    const TensorView* w = base.find(name);
    const int64_t rows = m.rows, cols = m.cols;
    const std::optional<uint64_t> row_bytes = dtype_bytes(w->dtype, cols);
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      float* row = out.data() + r * cols;
      kernels::ref::dequantize_row(w->dtype, w->data + r * static_cast<int64_t>(*row_bytes), row, cols);
      for (int64_t c = 0; c < cols; ++c) {
        double delta = 0.0;
        for (int32_t j = 0; j < m.rank; ++j) {
          delta += static_cast<double>(m.b[static_cast<size_t>(r * m.rank + j)]) * m.a[static_cast<size_t>(j * cols + c)];
        }
        row[c] = static_cast<float>(row[c] + m.scale * delta);
      }
    }
    ExportedTensor t;
    t.type = DType::kF32;
    t.bytes.resize(out.size() * sizeof(float));
    std::memcpy(t.bytes.data(), out.data(), t.bytes.size());
    return t;
  };
  for (const auto& [name, m] : by_name) {
    const TensorView* w = base.find(name);
    if (w == nullptr || w->rows() != m->rows || w->cols() != m->cols || dtype_row_group(w->dtype) > 1) {
      return make_error(ErrorCode::kInvalidArgument, "adapter {} does not fit {} of {}", adapter.name, name, base.name);
    }
  }
  return gguf_export(base, DType::kF32, path, merged);
}

}  // namespace hearth
