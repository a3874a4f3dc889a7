#include "loader/fused_qkv.h"

#include <cstring>

namespace hearth {
namespace {

// Row r0.. r0 + n - 1 of `t` as a view (t's rows are whole blocks of its dtype).
TensorView row_view(const TensorView& t, std::string name, int64_t r0, int64_t n, uint64_t row_bytes) {
  TensorView v = t;
  v.name = std::move(name);
  v.shape[0] = n;
  v.data = t.data + r0 * row_bytes;
  v.bytes = static_cast<uint64_t>(n) * row_bytes;
  return v;
}

}  // namespace

Status split_fused_qkv(LoadedModel& model, QkvLayout layout) {
  const ModelConfig& c = model.config;
  const int64_t hd = c.head_dim, q_rows = c.q_dim(), kv_rows = c.kv_dim();
  std::vector<TensorView> out;
  out.reserve(model.tensors.size() + 2 * static_cast<size_t>(c.n_layers));
  for (TensorView& t : model.tensors) {
    const size_t at = t.name.find(".attn_qkv.");
    if (!t.name.starts_with("blk.") || at == std::string::npos) {
      out.push_back(std::move(t));
      continue;
    }
    const std::string prefix = t.name.substr(0, at + 1);       // "blk.N."
    const std::string suffix = t.name.substr(at + 9);          // ".weight" / ".bias"
    const bool matrix = t.n_dims == 2;
    if ((matrix && t.cols() != c.dim) || (t.n_dims != 1 && !matrix) || t.shape[0] != q_rows + 2 * kv_rows) {
      return make_error(ErrorCode::kFormat, "{} has shape {}, but {} query and 2 x {} key/value rows of {} are needed",
                        t.name, shape_string(t), q_rows, kv_rows, c.dim);
    }
    const std::optional<uint64_t> bytes_per_row = dtype_bytes(t.dtype, matrix ? t.cols() : 1);
    if (!bytes_per_row || dtype_row_group(t.dtype) != 1) {
      return make_error(ErrorCode::kUnsupported, "{} is {}, which cannot be split by rows", t.name, dtype_name(t.dtype));
    }
    const uint64_t row_bytes = *bytes_per_row;
    if (layout == QkvLayout::kBlocks) {
      out.push_back(row_view(t, prefix + "attn_q" + suffix, 0, q_rows, row_bytes));
      out.push_back(row_view(t, prefix + "attn_k" + suffix, q_rows, kv_rows, row_bytes));
      out.push_back(row_view(t, prefix + "attn_v" + suffix, q_rows + kv_rows, kv_rows, row_bytes));
      continue;
    }
    if (c.n_kv_heads != c.n_heads) {
      return make_error(ErrorCode::kUnsupported, "{}: a per-head fused projection with {} KV heads for {} query heads",
                        t.name, c.n_kv_heads, c.n_heads);
    }
    // Head h's rows are [3h, 3h + 1, 3h + 2] * head_dim: its q, k and v.
    const auto part_bytes = static_cast<size_t>(q_rows * row_bytes);
    const size_t head_bytes = static_cast<size_t>(hd * row_bytes);
    const char* parts[] = {"attn_q", "attn_k", "attn_v"};
    for (int p = 0; p < 3; ++p) {
      std::vector<std::byte>& bytes = model.owned.emplace_back(part_bytes);
      for (int64_t h = 0; h < c.n_heads; ++h) {
        std::memcpy(bytes.data() + h * head_bytes, t.data + (3 * h + p) * head_bytes, head_bytes);
      }
      TensorView v = t;
      v.name = prefix + parts[p] + suffix;
      v.shape[0] = q_rows;
      v.data = bytes.data();
      v.bytes = part_bytes;
      out.push_back(std::move(v));
    }
  }
  model.tensors = std::move(out);
  return Status::ok();
}

}  // namespace hearth
