#include "loader/safetensors.h"

#include <cstring>
#include <algorithm>

#include "common/json.h"

namespace hearth {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

Result<DType> parse_dtype(std::string_view dtype, std::string_view tensor) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  return make_error(ErrorCode::kUnsupported,
                    "tensor {} has dtype {}, which hearth does not read from safetensors (supported: F32, F16, BF16)",
                    tensor, dtype);
}

}  // namespace

Result<SafetensorsFile> safetensors_parse(std::span<const std::byte> bytes, std::string_view what, bool accept_int32) {
  if (bytes.size() < 8) {
    return make_error(ErrorCode::kFormat, "{} is too short to be a safetensors file ({} bytes)", what, bytes.size());
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8) {
    return make_error(ErrorCode::kFormat,
                      "{} declares a {}-byte header but holds {} bytes: truncated, or not a safetensors file", what,
                      header_len, bytes.size());
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  HEARTH_ASSIGN_OR_RETURN(boost::json::value root, json_parse(header, fmt::format("the header of {}", what), 8));
  if (!root.is_object()) return make_error(ErrorCode::kFormat, "the header of {} is not a JSON object", what);

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - data_start;
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::string> range_names;
  for (const auto& [key, entry] : root.as_object()) {
    if (key == "__metadata__") continue;
    TensorView view;
    view.name = std::string(key);
    if (!entry.is_object()) return make_error(ErrorCode::kFormat, "{}: entry {} is not an object", what, view.name);
    const auto& obj = entry.as_object();
    HEARTH_ASSIGN_OR_RETURN(auto dtype, json_opt_string(obj, "dtype"));
    if (!dtype) return make_error(ErrorCode::kFormat, "{}: tensor {} has no dtype", what, view.name);
    const bool int32 = accept_int32 && *dtype == "I32";
    if (int32) {
      view.dtype = DType::kF32;  // 4 bytes per element, like I32
    } else {
      HEARTH_ASSIGN_OR_RETURN(view.dtype, parse_dtype(*dtype, view.name));
    }

    const auto* shape = json_find_array(obj, "shape");
    const auto* offsets = json_find_array(obj, "data_offsets");
    if (shape == nullptr || offsets == nullptr || offsets->size() != 2) {
      return make_error(ErrorCode::kFormat, "{}: tensor {} needs a shape and two data_offsets", what, view.name);
    }
    if (shape->size() > 4) {
      return make_error(ErrorCode::kFormat, "{}: tensor {} has {} dimensions (at most 4)", what, view.name,
                        shape->size());
    }
    uint64_t elements = 1;
    view.n_dims = static_cast<int>(shape->size());
    for (size_t d = 0; d < shape->size(); ++d) {
      const auto& v = (*shape)[d];
      const auto* n = v.if_int64();
      const auto* un = v.if_uint64();
      const int64_t dim = n ? *n : (un && *un < (1ull << 40)) ? static_cast<int64_t>(*un) : -1;
      if (dim < 0 || dim > (int64_t{1} << 40)) {
        return make_error(ErrorCode::kFormat, "{}: tensor {} has an invalid dimension", what, view.name);
      }
      view.shape[d] = dim;
      auto product = checked_mul(elements, static_cast<uint64_t>(dim));
      if (!product || *product > (uint64_t{1} << 42)) {
        return make_error(ErrorCode::kFormat, "{}: tensor {} declares an absurd element count", what, view.name);
      }
      elements = *product;
    }
    if (view.n_dims == 0) {  // a scalar
      view.n_dims = 1;
      view.shape[0] = 1;
    }
    uint64_t begin = 0, end = 0;
    for (int k = 0; k < 2; ++k) {
      const auto& v = (*offsets)[k];
      uint64_t x;
      if (const auto* i = v.if_int64(); i && *i >= 0) {
        x = static_cast<uint64_t>(*i);
      } else if (const auto* u = v.if_uint64()) {
        x = *u;
      } else {
        return make_error(ErrorCode::kFormat, "{}: tensor {} has invalid data_offsets", what, view.name);
      }
      (k == 0 ? begin : end) = x;
    }
    const uint64_t expected = *dtype_bytes(view.dtype, static_cast<int64_t>(elements));
    if (end < begin || end > data_size || end - begin != expected) {
      return make_error(ErrorCode::kFormat,
                        "{}: tensor {} ({} {} elements, {} bytes) has data_offsets [{}, {}] that do not fit the {} "
                        "data bytes of the file: truncated or corrupt",
                        what, view.name, elements, *dtype, expected, begin, end, data_size);
    }
    view.bytes = expected;
    view.data = bytes.data() + data_start + begin;
    ranges.emplace_back(begin, end);
    range_names.push_back(view.name);
    (int32 ? file.int32_tensors : file.tensors).push_back(std::move(view));
  }
  // Tensors must not overlap (the format requires a dense, non-overlapping layout).
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (ranges[order[i]].first < ranges[order[i - 1]].second) {
      return make_error(ErrorCode::kFormat, "{}: tensors {} and {} overlap", what, range_names[order[i - 1]],
                        range_names[order[i]]);
    }
  }
  return file;
}

}  // namespace hearth
