#include "loader/gguf.h"

#include <bit>
#include <cmath>
#include <unordered_set>

#include "common/byte_reader.h"

namespace hearth {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxArrayLength = uint64_t{1} << 24;
constexpr uint64_t kMaxStringLength = uint64_t{1} << 26;  // chat templates are a few KiB

enum GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// Smallest encoded size of one value of `type`, for checking counts against the bytes
// that remain before allocating anything.
uint64_t min_encoded_size(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;
    case kArray: return 12;
    default: return 0;
  }
}

class Parser {
 public:
  explicit Parser(std::span<const std::byte> bytes) : r_(bytes), size_(bytes.size()) {}

  Result<std::string> read_string(std::string_view what) {
    const uint64_t len = r_.read<uint64_t>();
    if (!r_.ok()) return truncated(what);
    if (len > kMaxStringLength || len > r_.remaining()) {
      return make_error(ErrorCode::kFormat, "GGUF {} declares a string of {} bytes at offset {}, past the end of the file",
                        what, len, r_.offset() - 8);
    }
    return std::string(r_.read_bytes(len));
  }

  Status read_value(uint32_t type, GgufValue& out, std::string_view key, int depth) {
    out.gguf_type = type;
    switch (type) {
      case kU8: out.type = GgufValue::Type::kUint; out.u = r_.read<uint8_t>(); break;
      case kU16: out.type = GgufValue::Type::kUint; out.u = r_.read<uint16_t>(); break;
      case kU32: out.type = GgufValue::Type::kUint; out.u = r_.read<uint32_t>(); break;
      case kU64: out.type = GgufValue::Type::kUint; out.u = r_.read<uint64_t>(); break;
      case kI8: out.type = GgufValue::Type::kInt; out.i = r_.read<int8_t>(); break;
      case kI16: out.type = GgufValue::Type::kInt; out.i = r_.read<int16_t>(); break;
      case kI32: out.type = GgufValue::Type::kInt; out.i = r_.read<int32_t>(); break;
      case kI64: out.type = GgufValue::Type::kInt; out.i = r_.read<int64_t>(); break;
      case kF32: out.type = GgufValue::Type::kFloat; out.f = r_.read<float>(); break;
      case kF64: out.type = GgufValue::Type::kFloat; out.f = r_.read<double>(); break;
      case kBool: {
        out.type = GgufValue::Type::kBool;
        const uint8_t b = r_.read<uint8_t>();
        if (r_.ok() && b > 1) return make_error(ErrorCode::kFormat, "GGUF key {} holds a bool of value {}", key, b);
        out.b = b != 0;
        break;
      }
      case kString: {
        out.type = GgufValue::Type::kString;
        HEARTH_ASSIGN_OR_RETURN(out.s, read_string(key));
        break;
      }
      case kArray: return read_array(out, key, depth);
      default:
        return make_error(ErrorCode::kFormat, "GGUF key {} has unknown value type {}", key, type);
    }
    if (!r_.ok()) return truncated(key);
    return Status::ok();
  }

  Status read_array(GgufValue& out, std::string_view key, int depth) {
    out.type = GgufValue::Type::kArray;
    if (depth >= kMaxArrayDepth) {
      return make_error(ErrorCode::kFormat, "GGUF key {} nests arrays more than {} deep", key, kMaxArrayDepth);
    }
    const uint32_t elem = r_.read<uint32_t>();
    const uint64_t count = r_.read<uint64_t>();
    if (!r_.ok()) return truncated(key);
    out.elem_type = elem;
    const uint64_t min_size = min_encoded_size(elem);
    if (min_size == 0) return make_error(ErrorCode::kFormat, "GGUF key {} is an array of unknown type {}", key, elem);
    if (count > kMaxArrayLength || count > r_.remaining() / min_size) {
      return make_error(ErrorCode::kFormat, "GGUF key {} declares {} array elements, more than the file holds", key,
                        count);
    }
    GgufValue item;
    for (uint64_t k = 0; k < count; ++k) {
      if (elem == kString) {
        HEARTH_ASSIGN_OR_RETURN(std::string s, read_string(key));
        out.strings.push_back(std::move(s));
        continue;
      }
      item = GgufValue();
      HEARTH_RETURN_IF_ERROR(read_value(elem, item, key, depth + 1));
      switch (item.type) {
        case GgufValue::Type::kUint: out.ints.push_back(static_cast<int64_t>(item.u)); break;
        case GgufValue::Type::kInt: out.ints.push_back(item.i); break;
        case GgufValue::Type::kBool: out.ints.push_back(item.b ? 1 : 0); break;
        case GgufValue::Type::kFloat: out.floats.push_back(item.f); break;
        default: out.nested.push_back(std::move(item)); break;
      }
    }
    return Status::ok();
  }

  Status truncated(std::string_view what) const {
    return make_error(ErrorCode::kFormat, "GGUF file is truncated: {} ends past the end of the file ({} bytes)", what,
                      size_);
  }

  ByteReader& reader() { return r_; }

 private:
  ByteReader r_;
  size_t size_;
};

Result<DType> tensor_dtype(uint32_t code, std::string_view name) {
  switch (code) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 8: return DType::kQ8_0;
    case 30: return DType::kBF16;
    default:
      return make_error(ErrorCode::kUnsupported,
                        "tensor {} has type {}, which hearth does not support (supported: F32, F16, BF16, Q8_0, Q4_0)",
                        name, ggml_type_name(code));
  }
}

}  // namespace

std::string ggml_type_name(uint32_t code) {
  static constexpr std::string_view kNames[] = {
      "F32",    "F16",     "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0", "Q5_1", "Q8_0", "Q8_1",  "Q2_K",
      "Q3_K",   "Q4_K",    "Q5_K",    "Q6_K",  "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
      "IQ3_S",  "IQ2_S",   "IQ4_XS",  "I8",    "I16",    "I32",   "I64",  "F64",  "IQ1_M", "BF16",  "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (code < std::size(kNames)) return std::string(kNames[code]);
  return fmt::format("type {}", code);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

Result<std::optional<uint64_t>> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<uint64_t>();
  if (v->type == GgufValue::Type::kUint) return std::optional<uint64_t>(v->u);
  if (v->type == GgufValue::Type::kInt && v->i >= 0) return std::optional<uint64_t>(static_cast<uint64_t>(v->i));
  return make_error(ErrorCode::kFormat, "GGUF key {} should be a non-negative integer", key);
}

Result<std::optional<double>> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<double>();
  if (v->type == GgufValue::Type::kFloat) return std::optional<double>(v->f);
  if (v->type == GgufValue::Type::kUint) return std::optional<double>(static_cast<double>(v->u));
  if (v->type == GgufValue::Type::kInt) return std::optional<double>(static_cast<double>(v->i));
  return make_error(ErrorCode::kFormat, "GGUF key {} should be a number", key);
}

Result<std::optional<bool>> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (v->type == GgufValue::Type::kBool) return std::optional<bool>(v->b);
  return make_error(ErrorCode::kFormat, "GGUF key {} should be a bool", key);
}

Result<std::optional<std::string>> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->type == GgufValue::Type::kString) return std::optional<std::string>(v->s);
  return make_error(ErrorCode::kFormat, "GGUF key {} should be a string", key);
}

Result<GgufFile> gguf_parse(std::span<const std::byte> bytes) {
  Parser p(bytes);
  ByteReader& r = p.reader();
  GgufFile file;
  const uint32_t magic = r.read<uint32_t>();
  if (!r.ok() || magic != kGgufMagic) {
    return make_error(ErrorCode::kFormat, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  }
  file.version = r.read<uint32_t>();
  const uint64_t n_tensors = r.read<uint64_t>();
  const uint64_t n_kv = r.read<uint64_t>();
  if (!r.ok()) return p.truncated("the header");
  if (file.version != 2 && file.version != 3) {
    return make_error(ErrorCode::kUnsupported, "GGUF version {} is not supported (hearth reads versions 2 and 3)",
                      file.version);
  }
  // A key/value takes at least 13 bytes, a tensor descriptor at least 24.
  if (n_kv > r.remaining() / 13) {
    return make_error(ErrorCode::kFormat, "GGUF header declares {} metadata entries, more than the file holds", n_kv);
  }
  if (n_tensors > r.remaining() / 24) {
    return make_error(ErrorCode::kFormat, "GGUF header declares {} tensors, more than the file holds", n_tensors);
  }

  for (uint64_t k = 0; k < n_kv; ++k) {
    HEARTH_ASSIGN_OR_RETURN(std::string key, p.read_string("a metadata key"));
    const uint32_t type = r.read<uint32_t>();
    if (!r.ok()) return p.truncated(key);
    GgufValue value;
    HEARTH_RETURN_IF_ERROR(p.read_value(type, value, key, 0));
    if (file.metadata.contains(key)) {
      return make_error(ErrorCode::kFormat, "GGUF metadata key {} appears twice", key);
    }
    file.metadata.emplace(std::move(key), std::move(value));
  }

  HEARTH_ASSIGN_OR_RETURN(auto alignment, file.get_uint("general.alignment"));
  if (alignment) {
    if (*alignment == 0 || *alignment > (1u << 30) || !std::has_single_bit(*alignment)) {
      return make_error(ErrorCode::kFormat, "GGUF general.alignment is {}, not a power of two up to 1 GiB",
                        *alignment);
    }
    file.alignment = static_cast<uint32_t>(*alignment);
  }

  struct Pending {
    uint64_t offset;
    uint32_t type;
  };
  std::vector<Pending> pending;
  std::unordered_set<std::string> names;
  for (uint64_t t = 0; t < n_tensors; ++t) {
    TensorView view;
    HEARTH_ASSIGN_OR_RETURN(view.name, p.read_string("a tensor name"));
    const uint32_t n_dims = r.read<uint32_t>();
    if (!r.ok()) return p.truncated(view.name);
    if (n_dims < 1 || n_dims > 4) {
      return make_error(ErrorCode::kFormat, "tensor {} has {} dimensions (1 to 4 allowed)", view.name, n_dims);
    }
    view.n_dims = static_cast<int>(n_dims);
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.read<uint64_t>();
      if (ne == 0 || ne > (uint64_t{1} << 40)) {
        if (!r.ok()) return p.truncated(view.name);
        return make_error(ErrorCode::kFormat, "tensor {} has dimension {} of size {}", view.name, d, ne);
      }
      auto product = checked_mul(elements, ne);
      if (!product || *product > (uint64_t{1} << 42)) {
        return make_error(ErrorCode::kFormat, "tensor {} declares an absurd element count", view.name);
      }
      elements = *product;
      view.shape[n_dims - 1 - d] = static_cast<int64_t>(ne);  // ggml order is innermost first
    }
    const uint32_t type = r.read<uint32_t>();
    const uint64_t offset = r.read<uint64_t>();
    if (!r.ok()) return p.truncated(view.name);
    HEARTH_ASSIGN_OR_RETURN(view.dtype, tensor_dtype(type, view.name));
    if (view.cols() % dtype_block_elems(view.dtype) != 0) {
      return make_error(ErrorCode::kFormat, "tensor {} has rows of {} elements, not a multiple of the {} block size",
                        view.name, view.cols(), dtype_name(view.dtype));
    }
    const auto size = dtype_bytes(view.dtype, static_cast<int64_t>(elements));
    if (!size) return make_error(ErrorCode::kFormat, "tensor {} has an impossible size", view.name);
    view.bytes = *size;
    if (!names.insert(view.name).second) {
      return make_error(ErrorCode::kFormat, "tensor {} appears twice", view.name);
    }
    file.tensors.push_back(std::move(view));
    pending.push_back({offset, type});
  }

  const uint64_t header_end = r.offset();
  const uint64_t data_offset = (header_end + file.alignment - 1) / file.alignment * file.alignment;
  if (data_offset > bytes.size() && !file.tensors.empty()) return p.truncated("the tensor data section");
  file.data_offset = data_offset;
  const uint64_t data_size = bytes.size() > data_offset ? bytes.size() - data_offset : 0;
  for (size_t t = 0; t < file.tensors.size(); ++t) {
    TensorView& view = file.tensors[t];
    const uint64_t offset = pending[t].offset;
    if (offset % file.alignment != 0) {
      return make_error(ErrorCode::kFormat, "tensor {} starts at offset {}, not aligned to {}", view.name, offset,
                        file.alignment);
    }
    if (offset > data_size || view.bytes > data_size - offset) {
      return make_error(ErrorCode::kFormat,
                        "tensor {} ({} bytes at offset {}) ends past the end of the file: the file is truncated or "
                        "corrupt",
                        view.name, view.bytes, offset);
    }
    view.data = bytes.data() + data_offset + offset;
  }
  return file;
}

}  // namespace hearth
