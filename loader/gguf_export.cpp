#include "loader/gguf_export.h"

#include <algorithm>
#include <vector>

#include "common/model_tensors.h"
#include "kernels/reference/reference.h"
#include "loader/gguf_writer.h"
#include "loader/quantize.h"

namespace hearth {
namespace {

// Where row r of a rotate-half q/k matrix goes in the interleaved layout: row
// h*hd + j*hd/2 + i moves to h*hd + 2i + j.
int64_t interleaved_row(int64_t r, int64_t head_dim) {
  const int64_t half = head_dim / 2, head = r / head_dim, in_head = r % head_dim;
  return head * head_dim + 2 * (in_head % half) + in_head / half;
}

}  // namespace

Status gguf_export_check(std::string_view architecture) {
  if (architecture != "llama" && architecture != "qwen2" && architecture != "mistral") {
    return make_error(ErrorCode::kUnsupported, "cannot write a GGUF of architecture {} (llama, mistral and qwen2 "
                      "are written)", architecture);
  }
  return Status::ok();
}

Status gguf_export(const LoadedModel& model, DType matrix_type, const std::filesystem::path& path,
                   const ExportOverride& override_matrix) {
  const ModelConfig& c = model.config;
  if (model.tokenizer.kind != TokenizerSource::Kind::kGguf) {
    return make_error(ErrorCode::kUnsupported, "only models with a GGUF vocabulary can be exported to GGUF");
  }
  HEARTH_RETURN_IF_ERROR(gguf_export_check(c.architecture));
  const std::string arch = c.architecture == "qwen2" ? "qwen2" : "llama";
  const RopeStyle target_style = arch == "qwen2" ? RopeStyle::kHalf : RopeStyle::kInterleaved;
  if (c.rope_style != target_style && target_style == RopeStyle::kHalf) {
    return make_error(ErrorCode::kUnsupported, "cannot convert interleaved q/k rows for a qwen2 GGUF");
  }

  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", model.name);
  w.add_u32(arch + ".vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.add_u32(arch + ".context_length", static_cast<uint32_t>(c.max_context));
  w.add_u32(arch + ".embedding_length", static_cast<uint32_t>(c.dim));
  w.add_u32(arch + ".block_count", static_cast<uint32_t>(c.n_layers));
  w.add_u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
  w.add_u32(arch + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.add_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  w.add_u32(arch + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.add_u32(arch + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.add_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.add_f32(arch + ".rope.freq_base", c.rope_theta);
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  if (c.sliding_window > 0) w.add_u32(arch + ".attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  if (c.rope_scaling.type == RopeScalingType::kLinear) {
    w.add_string(arch + ".rope.scaling.type", "linear");
    w.add_f32(arch + ".rope.scaling.factor", c.rope_scaling.factor);
  }
  // Llama 3 scaling travels as per-dimension frequency divisors, as llama.cpp stores it.
  std::vector<float> rope_factors;
  if (c.rope_scaling.type == RopeScalingType::kLlama3 && model.find("rope_freqs.weight") == nullptr) {
    ModelConfig plain = c;
    plain.rope_scaling = {};
    const std::vector<float> base = rope_inv_freq(plain, nullptr), scaled = rope_inv_freq(c, nullptr);
    for (size_t i = 0; i < base.size(); ++i) rope_factors.push_back(base[i] / scaled[i]);
    const int64_t shape[] = {static_cast<int64_t>(rope_factors.size())};
    HEARTH_RETURN_IF_ERROR(w.add_tensor("rope_freqs.weight", DType::kF32, shape, std::as_bytes(std::span(rope_factors))));
  }
  const GgufVocab& v = model.tokenizer.gguf;
  w.add_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32s("tokenizer.ggml.scores", v.scores);
  if (!v.token_types.empty()) w.add_i32s("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.add_strings("tokenizer.ggml.merges", v.merges);
  auto add_id = [&](const char* key, const std::optional<int32_t>& id) {
    if (id) w.add_u32(key, static_cast<uint32_t>(*id));
  };
  add_id("tokenizer.ggml.bos_token_id", v.bos_id);
  add_id("tokenizer.ggml.eos_token_id", v.eos_id);
  add_id("tokenizer.ggml.unknown_token_id", v.unk_id);
  add_id("tokenizer.ggml.padding_token_id", v.pad_id);
  add_id("tokenizer.ggml.eot_token_id", v.eot_id);
  add_id("tokenizer.ggml.eom_token_id", v.eom_id);
  if (v.add_bos) w.add_bool("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_eos) w.add_bool("tokenizer.ggml.add_eos_token", *v.add_eos);
  if (v.add_space_prefix) w.add_bool("tokenizer.ggml.add_space_prefix", *v.add_space_prefix);
  if (v.remove_extra_whitespaces) {
    w.add_bool("tokenizer.ggml.remove_extra_whitespaces", *v.remove_extra_whitespaces);
  }
  if (!v.chat_template.empty()) w.add_string("tokenizer.chat_template", v.chat_template);

  for (const TensorSpec& spec : model_tensor_specs(c)) {
    const TensorView* t = model.find(spec.name);
    if (t == nullptr) continue;
    const bool qk = spec.name.ends_with("attn_q.weight") || spec.name.ends_with("attn_k.weight");
    const std::span<const int64_t> shape(t->shape.data(), static_cast<size_t>(t->n_dims));
    if (std::optional<ExportedTensor> given = spec.matrix && override_matrix ? override_matrix(spec.name) : std::nullopt) {
      const std::optional<uint64_t> row_bytes = dtype_bytes(given->type, t->cols());
      if (!row_bytes || given->bytes.size() != *row_bytes * static_cast<uint64_t>(t->rows())) {
        return make_error(ErrorCode::kInternal, "{} given as {} bytes of {} for shape {}", spec.name,
                          given->bytes.size(), dtype_name(given->type), shape_string(*t));
      }
      if (qk && c.rope_style != target_style) {  // whole rows move, so any row format can
        std::vector<std::byte> moved(given->bytes.size());
        for (int64_t r = 0; r < t->rows(); ++r) {
          const int64_t dst = interleaved_row(r, c.head_dim);
          std::copy_n(given->bytes.begin() + static_cast<ptrdiff_t>(r * *row_bytes), *row_bytes,
                      moved.begin() + static_cast<ptrdiff_t>(dst * *row_bytes));
        }
        given->bytes = std::move(moved);
      }
      HEARTH_RETURN_IF_ERROR(w.add_tensor(spec.name, given->type, shape, given->bytes));
      continue;
    }
    std::vector<float> values(static_cast<size_t>(t->elements()));
    kernels::ref::dequantize_row(t->dtype, t->data, values.data(), t->elements());
    if (qk && c.rope_style != target_style) values = rope_rows_half_to_interleaved(values, t->rows(), t->cols(), c.head_dim);
    const DType type = spec.matrix && t->cols() % dtype_block_elems(matrix_type) == 0 ? matrix_type : DType::kF32;
    const std::vector<std::byte> bytes = quantize(type, values);
    HEARTH_RETURN_IF_ERROR(w.add_tensor(spec.name, type, shape, bytes));
  }
  return w.write(path);
}

// Rows of a q/k matrix laid out for rotate-half pairs -> laid out for interleaved pairs.
std::vector<float> rope_rows_half_to_interleaved(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t head_dim) {
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(w.begin() + r * cols, w.begin() + (r + 1) * cols, out.begin() + interleaved_row(r, head_dim) * cols);
  }
  return out;
}

}  // namespace hearth
