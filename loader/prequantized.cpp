#include "loader/prequantized.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "common/half.h"
#include "common/json.h"
#include "loader/model.h"

namespace hearth {
namespace {

int32_t read_i32(const TensorView& t, int64_t index) {
  int32_t v = 0;
  std::memcpy(&v, t.data + index * 4, 4);
  return v;
}

uint16_t read_u16(const TensorView& t, int64_t index) {
  uint16_t v = 0;
  std::memcpy(&v, t.data + index * 2, 2);
  return v;
}

uint32_t field(int32_t word, int index, int bits) {
  return (static_cast<uint32_t>(word) >> (index * bits)) & ((1u << bits) - 1u);
}

// AWQ's order of the 8 values in a word: value i of a word holds output column kAwqOrder[i].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
constexpr int kAwqSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // the inverse: column j is value kAwqSlot[j]

bool is_2d(const TensorView* t) { return t != nullptr && t->n_dims == 2; }

// The unpacked view of one packed layer: q(r, c), zero(g, r), scale(g, r), group(c).
struct Unpacked {
  const PrequantConfig& cfg;
  const PackedLinear& p;
  int64_t rows = 0, cols = 0, groups = 0, group_size = 0;

  int32_t q(int64_t r, int64_t c) const {
    if (cfg.method == PrequantConfig::Method::kAwq) {
      return static_cast<int32_t>(field(read_i32(*p.qweight, c * (rows / 8) + r / 8), kAwqSlot[r % 8], 4));
    }
    const int pack = 32 / cfg.bits;
    return static_cast<int32_t>(field(read_i32(*p.qweight, (c / pack) * rows + r), static_cast<int>(c % pack), cfg.bits));
  }
  int32_t zero(int64_t g, int64_t r) const {
    if (cfg.method == PrequantConfig::Method::kAwq) {
      return static_cast<int32_t>(field(read_i32(*p.qzeros, g * (rows / 8) + r / 8), kAwqSlot[r % 8], 4));
    }
    const int pack = 32 / cfg.bits;
    return static_cast<int32_t>(field(read_i32(*p.qzeros, g * (rows / pack) + r / pack), static_cast<int>(r % pack),
                                      cfg.bits)) +
           cfg.zero_offset;
  }
  uint16_t scale(int64_t g, int64_t r) const { return read_u16(*p.scales, g * rows + r); }
  int64_t group(int64_t c) const { return p.g_idx != nullptr ? read_i32(*p.g_idx, c) : c / group_size; }
};

Status shape_error(const std::string& name, const TensorView* t, const std::string& want) {
  return make_error(ErrorCode::kFormat, "{}: {} has shape {}, expected {}", name, t->name, shape_string(*t), want);
}

// A view of `bytes`, which the model keeps (model.owned).
TensorView owned_view(LoadedModel& model, const std::string& name, DType type, std::initializer_list<int64_t> shape,
                      std::vector<std::byte> bytes) {
  std::vector<std::byte>& kept = model.owned.emplace_back(std::move(bytes));
  TensorView view;
  view.name = name;
  view.dtype = type;
  view.n_dims = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), view.shape.begin());
  view.data = kept.data();
  view.bytes = kept.size();
  return view;
}

// Replaces matrix `name`'s rows by rows perm[0], perm[1], ... of it.
Status permute_rows(LoadedModel& model, const std::string& name, const std::vector<int32_t>& perm) {
  auto it = std::find_if(model.tensors.begin(), model.tensors.end(), [&](const TensorView& t) { return t.name == name; });
  if (it == model.tensors.end() || it->n_dims != 2 || it->rows() != static_cast<int64_t>(perm.size()) ||
      dtype_row_group(it->dtype) != 1) {
    return make_error(ErrorCode::kFormat,
                      "{} must be a plain matrix of {} rows to take its down projection's act-order column order", name,
                      perm.size());
  }
  const uint64_t row_bytes = *dtype_bytes(it->dtype, it->cols());
  std::vector<std::byte> bytes(it->bytes);
  for (size_t r = 0; r < perm.size(); ++r) {
    std::memcpy(bytes.data() + r * row_bytes, it->data + static_cast<uint64_t>(perm[r]) * row_bytes, row_bytes);
  }
  *it = owned_view(model, name, it->dtype, {it->shape[0], it->shape[1]}, std::move(bytes));
  return Status::ok();
}

}  // namespace

Result<std::optional<PrequantConfig>> prequant_config(const boost::json::object& config) {
  const boost::json::object* q = json_find_object(config, "quantization_config");
  if (q == nullptr) return std::optional<PrequantConfig>();
  HEARTH_ASSIGN_OR_RETURN(auto method, json_opt_string(*q, "quant_method"));
  if (!method) return make_error(ErrorCode::kFormat, "quantization_config has no quant_method");
  PrequantConfig c;
  if (*method == "gptq") {
    c.method = PrequantConfig::Method::kGptq;
  } else if (*method == "awq") {
    c.method = PrequantConfig::Method::kAwq;
  } else {
    return make_error(ErrorCode::kUnsupported,
                      "quantization_config.quant_method \"{}\" is not supported (gptq and awq are)", *method);
  }
  HEARTH_ASSIGN_OR_RETURN(auto bits, json_opt_int(*q, "bits"));
  if (!bits) {
    HEARTH_ASSIGN_OR_RETURN(bits, json_opt_int(*q, "w_bit"));
  }
  c.bits = static_cast<int32_t>(bits.value_or(4));
  const bool awq = c.method == PrequantConfig::Method::kAwq;
  if (awq ? c.bits != 4 : (c.bits != 4 && c.bits != 8)) {
    return make_error(ErrorCode::kUnsupported, "{} with {} bits is not supported ({})", *method, c.bits,
                      awq ? "AWQ checkpoints are 4-bit" : "GPTQ: 4 or 8");
  }
  HEARTH_ASSIGN_OR_RETURN(auto gs, json_opt_int(*q, "group_size"));
  if (!gs) {
    HEARTH_ASSIGN_OR_RETURN(gs, json_opt_int(*q, "q_group_size"));
  }
  c.group_size = static_cast<int32_t>(gs.value_or(128));
  if (c.group_size != -1 && (c.group_size <= 0 || c.group_size > (1 << 20))) {
    return make_error(ErrorCode::kFormat, "quantization_config.group_size {} is invalid", c.group_size);
  }
  if (awq) {
    HEARTH_ASSIGN_OR_RETURN(auto version, json_opt_string(*q, "version"));
    if (version && *version != "gemm" && *version != "GEMM") {
      return make_error(ErrorCode::kUnsupported, "AWQ version \"{}\" is not supported (gemm is)", *version);
    }
    HEARTH_ASSIGN_OR_RETURN(auto zero_point, json_opt_bool(*q, "zero_point"));
    if (zero_point && !*zero_point) {
      return make_error(ErrorCode::kUnsupported, "AWQ without zero points (zero_point: false) is not supported");
    }
    c.zero_offset = 0;
  } else {
    HEARTH_ASSIGN_OR_RETURN(auto desc_act, json_opt_bool(*q, "desc_act"));
    c.desc_act = desc_act.value_or(false);
    HEARTH_ASSIGN_OR_RETURN(auto format, json_opt_string(*q, "checkpoint_format"));
    if (!format || *format == "gptq") {
      c.zero_offset = 1;
    } else if (*format == "gptq_v2") {
      c.zero_offset = 0;
    } else {
      return make_error(ErrorCode::kUnsupported,
                        "GPTQ checkpoint_format \"{}\" is not supported (gptq and gptq_v2 are)", *format);
    }
  }
  return std::optional<PrequantConfig>(c);
}

Result<std::vector<int32_t>> columns_by_group(std::span<const int32_t> groups, int64_t group_size) {
  bool in_order = true;
  for (size_t c = 0; c < groups.size() && in_order; ++c) in_order = groups[c] == static_cast<int64_t>(c) / group_size;
  if (in_order) return std::vector<int32_t>();
  std::vector<int32_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return groups[static_cast<size_t>(a)] < groups[static_cast<size_t>(b)];
  });
  for (size_t b = 0; b + 31 < order.size(); b += 32) {
    if (groups[static_cast<size_t>(order[b])] != groups[static_cast<size_t>(order[b + 31])]) {
      return make_error(ErrorCode::kUnsupported,
                        "g_idx puts a number of columns other than a multiple of 32 in group {}, so its columns "
                        "cannot be stored as whole 32-value blocks",
                        groups[static_cast<size_t>(order[b])]);
    }
  }
  return order;
}

Result<RepackedMatrix> prequant_repack(const PrequantConfig& cfg, const PackedLinear& p, const std::string& name) {
  if (!is_2d(p.qweight) || !is_2d(p.qzeros) || !is_2d(p.scales) || p.scales->dtype != DType::kF16 ||
      (p.g_idx != nullptr && p.g_idx->n_dims != 1)) {
    return make_error(ErrorCode::kFormat, "{}: needs 2-D qweight and qzeros (I32), 2-D scales (F16) and a 1-D g_idx",
                      name);
  }
  const bool awq = cfg.method == PrequantConfig::Method::kAwq;
  Unpacked u{cfg, p};
  const int64_t pack = 32 / cfg.bits;
  u.rows = awq ? p.qweight->shape[1] * 8 : p.qweight->shape[1];
  u.cols = awq ? p.qweight->shape[0] : p.qweight->shape[0] * pack;
  u.group_size = cfg.group_size == -1 ? u.cols : cfg.group_size;
  u.groups = (u.cols + u.group_size - 1) / u.group_size;
  if (p.scales->shape[0] != u.groups || p.scales->shape[1] != u.rows) {
    return shape_error(name, p.scales, fmt::format("[{}, {}]", u.groups, u.rows));
  }
  if (u.rows % (awq ? 8 : pack) != 0) {
    return make_error(ErrorCode::kFormat, "{}: {} outputs are not whole packed words of {}", name, u.rows,
                      awq ? 8 : pack);
  }
  const int64_t zero_cols = awq ? u.rows / 8 : u.rows / pack;
  if (p.qzeros->shape[0] != u.groups || p.qzeros->shape[1] != zero_cols) {
    return shape_error(name, p.qzeros, fmt::format("[{}, {}]", u.groups, zero_cols));
  }
  if (p.g_idx != nullptr && p.g_idx->shape[0] != u.cols) {
    return shape_error(name, p.g_idx, fmt::format("[{}]", u.cols));
  }
  if (u.cols % 32 != 0 || u.group_size % 32 != 0) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: {} input columns in groups of {} are not whole 32-value blocks, which the kernels need", name,
                      u.cols, u.group_size);
  }
  std::vector<int32_t> groups(static_cast<size_t>(u.cols));
  for (int64_t c = 0; c < u.cols; ++c) {
    const int64_t g = u.group(c);
    if (g < 0 || g >= u.groups) {
      return make_error(ErrorCode::kFormat, "{}: g_idx[{}] = {} is not a group of the {} there are", name, c, g,
                        u.groups);
    }
    groups[static_cast<size_t>(c)] = static_cast<int32_t>(g);
  }
  RepackedMatrix out;
  // Act-order layers (g_idx scattering each group's columns) are stored sorted by group.
  auto perm = columns_by_group(groups, u.group_size);
  if (!perm.is_ok()) return perm.status().with_context(name);
  out.perm = std::move(perm).value();
  std::vector<int32_t> order = out.perm;
  if (order.empty()) {
    order.resize(static_cast<size_t>(u.cols));
    std::iota(order.begin(), order.end(), 0);
  }
  auto col = [&](int64_t j) { return order[static_cast<size_t>(j)]; };
  // Symmetric when every zero is the grid's middle.
  const int32_t middle = 1 << (cfg.bits - 1);
  bool sym = true;
  for (int64_t g = 0; g < u.groups && sym; ++g) {
    for (int64_t r = 0; r < u.rows && sym; ++r) sym = u.zero(g, r) == middle;
  }
  if (!sym && cfg.bits == 8) {
    return make_error(ErrorCode::kUnsupported, "{}: 8-bit checkpoints with asymmetric zero points are not supported",
                      name);
  }
  out.rows = u.rows;
  out.cols = u.cols;
  const int64_t blocks = u.cols / 32;
  if (sym && cfg.bits == 4) {
    out.type = DType::kQ4_0;
    out.bytes.resize(static_cast<size_t>(u.rows * blocks) * sizeof(BlockQ4_0));
    auto* dst = reinterpret_cast<BlockQ4_0*>(out.bytes.data());
    for (int64_t r = 0; r < u.rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        BlockQ4_0& blk = dst[r * blocks + b];
        blk.d = u.scale(u.group(col(b * 32)), r);
        for (int j = 0; j < 16; ++j) {
          blk.qs[j] = static_cast<uint8_t>(u.q(r, col(b * 32 + j)) | (u.q(r, col(b * 32 + j + 16)) << 4));
        }
      }
    }
    return out;
  }
  out.type = DType::kQ8_0;  // 8-bit symmetric, or 4-bit with zeros: q - zero in int8
  out.bytes.resize(static_cast<size_t>(u.rows * blocks) * sizeof(BlockQ8_0));
  auto* dst = reinterpret_cast<BlockQ8_0*>(out.bytes.data());
  for (int64_t r = 0; r < u.rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      BlockQ8_0& blk = dst[r * blocks + b];
      const int64_t g = u.group(col(b * 32));
      blk.d = u.scale(g, r);
      const int32_t z = u.zero(g, r);
      for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(u.q(r, col(b * 32 + j)) - z);
    }
  }
  return out;
}

Status prequant_apply(const PrequantConfig& cfg, std::vector<TensorView> int32_tensors,
                      const std::function<std::string(const std::string&)>& canonical, LoadedModel& model) {
  // Group the parts by module ("model.layers.0.self_attn.q_proj").
  struct Parts {
    std::optional<TensorView> qweight, qzeros, scales, g_idx;
  };
  std::map<std::string, Parts> modules;
  auto split = [](const std::string& name, const char* suffix) -> std::optional<std::string> {
    const std::string s = std::string(".") + suffix;
    if (name.size() > s.size() && name.ends_with(s)) return name.substr(0, name.size() - s.size());
    return std::nullopt;
  };
  for (TensorView& t : int32_tensors) {
    if (auto m = split(t.name, "qweight")) {
      modules[*m].qweight = t;
    } else if (auto z = split(t.name, "qzeros")) {
      modules[*z].qzeros = t;
    } else if (auto g = split(t.name, "g_idx")) {
      modules[*g].g_idx = t;
    } else {
      return make_error(ErrorCode::kFormat, "tensor {} is I32 but not part of a quantized layer", t.name);
    }
  }
  std::vector<TensorView> kept;
  for (TensorView& t : model.tensors) {
    if (auto m = split(t.name, "scales"); m && modules.contains(*m)) {
      modules[*m].scales = t;
    } else {
      kept.push_back(std::move(t));
    }
  }
  model.tensors = std::move(kept);
  std::vector<std::pair<std::string, RepackedMatrix>> matrices;
  for (auto& [module, parts] : modules) {
    if (!parts.qweight || !parts.qzeros || !parts.scales) {
      return make_error(ErrorCode::kFormat, "quantized layer {} lacks its {}", module,
                        !parts.qweight ? "qweight" : !parts.qzeros ? "qzeros" : "scales");
    }
    if (cfg.desc_act && !parts.g_idx) {
      return make_error(ErrorCode::kFormat, "quantized layer {} has no g_idx, which an act-order (desc_act) checkpoint "
                        "needs to say which group each column is in", module);
    }
    if (cfg.method == PrequantConfig::Method::kAwq && parts.g_idx) {
      return make_error(ErrorCode::kFormat, "AWQ layer {} has a g_idx, which AWQ does not use", module);
    }
    const std::string name = canonical(module + ".weight");
    if (name.empty()) continue;  // a part of the checkpoint the model does not run
    if (name == module + ".weight") {
      return make_error(ErrorCode::kUnsupported, "quantized layer {} is not a linear layer hearth knows", module);
    }
    const PackedLinear p{&*parts.qweight, &*parts.qzeros, &*parts.scales, parts.g_idx ? &*parts.g_idx : nullptr};
    HEARTH_ASSIGN_OR_RETURN(RepackedMatrix m, prequant_repack(cfg, p, module));
    if (model.find(name) != nullptr) return make_error(ErrorCode::kFormat, "{} is both quantized and not", module);
    matrices.emplace_back(name, std::move(m));
  }
  return prequant_place(model, std::move(matrices));
}

Status prequant_place(LoadedModel& model, std::vector<std::pair<std::string, RepackedMatrix>> matrices) {
  std::map<std::string, std::vector<int32_t>> perms;  // canonical matrix name -> its column order
  for (auto& [name, m] : matrices) {
    TensorView view = owned_view(model, name, m.type, {m.rows, m.cols}, std::move(m.bytes));
    const std::string& key = name;  // (clang before 16 cannot capture a structured binding)
    auto it = std::find_if(model.tensors.begin(), model.tensors.end(), [&](const TensorView& t) { return t.name == key; });
    if (it != model.tensors.end()) {
      *it = std::move(view);
    } else {
      model.tensors.push_back(std::move(view));
    }
    if (!m.perm.empty()) perms.emplace(name, std::move(m.perm));
  }
  for (auto& [name, perm] : perms) {
    const std::string base = name.substr(0, name.size() - std::string_view(".weight").size());
    if (base.ends_with("ffn_down")) {
      // The down projection reads silu(gate) * up, whose order is gate's and up's row order.
      const std::string prefix = base.substr(0, base.size() - std::string_view("ffn_down").size());
      for (const char* sibling : {"ffn_gate.weight", "ffn_up.weight"}) {
        HEARTH_RETURN_IF_ERROR(permute_rows(model, prefix + sibling, perm));
      }
      continue;
    }
    std::vector<float> order(perm.begin(), perm.end());
    std::vector<std::byte> bytes(order.size() * sizeof(float));
    std::memcpy(bytes.data(), order.data(), bytes.size());
    model.tensors.push_back(
        owned_view(model, base + ".perm", DType::kF32, {static_cast<int64_t>(order.size())}, std::move(bytes)));
  }
  return Status::ok();
}

}  // namespace hearth
