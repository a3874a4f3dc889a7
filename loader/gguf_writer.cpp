#include "loader/gguf_writer.h"

#include <cstring>

#include "common/mapped_file.h"

namespace hearth {
namespace {

template <typename T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

}  // namespace

uint32_t ggml_type_code(DType type) {
  switch (type) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ8_0: return 8;
    case DType::kBF16: return 30;
    case DType::kQ8_0R16:
    case DType::kQ4_0R16:
    case DType::kF16R16:
    case DType::kBF16R16: break;  // hearth's own resident layouts have no GGUF type
  }
  return 0;
}

void GgufWriter::key(std::string_view k, uint32_t type) {
  put_string(kv_, k);
  put<uint32_t>(kv_, type);
  ++n_kv_;
}

void GgufWriter::add_u32(std::string_view k, uint32_t v) {
  key(k, 4);
  put(kv_, v);
  if (k == "general.alignment") alignment_ = v;
}
void GgufWriter::add_i32(std::string_view k, int32_t v) {
  key(k, 5);
  put(kv_, v);
}
void GgufWriter::add_f32(std::string_view k, float v) {
  key(k, 6);
  put(kv_, v);
}
void GgufWriter::add_bool(std::string_view k, bool v) {
  key(k, 7);
  put<uint8_t>(kv_, v ? 1 : 0);
}
void GgufWriter::add_string(std::string_view k, std::string_view v) {
  key(k, 8);
  put_string(kv_, v);
}
void GgufWriter::add_strings(std::string_view k, std::span<const std::string> v) {
  key(k, 9);
  put<uint32_t>(kv_, 8);
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_string(kv_, s);
}
void GgufWriter::add_f32s(std::string_view k, std::span<const float> v) {
  key(k, 9);
  put<uint32_t>(kv_, 6);
  put<uint64_t>(kv_, v.size());
  for (float f : v) put(kv_, f);
}
void GgufWriter::add_i32s(std::string_view k, std::span<const int32_t> v) {
  key(k, 9);
  put<uint32_t>(kv_, 5);
  put<uint64_t>(kv_, v.size());
  for (int32_t i : v) put(kv_, i);
}

Status GgufWriter::add_tensor(std::string_view name, DType type, std::span<const int64_t> shape,
                              std::span<const std::byte> data) {
  auto copy = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
  return add_tensor_lazy(name, type, shape, [copy] { return *copy; });
}

Status GgufWriter::add_tensor_lazy(std::string_view name, DType type, std::span<const int64_t> shape,
                                   Producer produce) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  const auto bytes = dtype_bytes(type, elements);
  if (dtype_row_group(type) > 1) {
    return make_error(ErrorCode::kInvalidArgument, "tensor {}: {} is a resident layout, not a GGUF type", name,
                      dtype_name(type));
  }
  if (shape.empty() || shape.size() > 4 || !bytes) {
    return make_error(ErrorCode::kInvalidArgument, "tensor {}: shape and type do not describe whole blocks", name);
  }
  tensors_.push_back({std::string(name), ggml_type_code(type), {shape.begin(), shape.end()}, *bytes, std::move(produce)});
  return Status::ok();
}

std::string GgufWriter::header() const {
  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_);
  out += kv_;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(out, static_cast<uint64_t>(*it));
    put<uint32_t>(out, t.ggml_type);
    put<uint64_t>(out, offset);
    offset += (t.bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  return out;
}

Status GgufWriter::emit(const std::function<Status(std::string_view)>& sink) const {
  HEARTH_RETURN_IF_ERROR(sink(header()));
  const std::string padding(alignment_, '\0');
  for (const Tensor& t : tensors_) {
    const std::vector<std::byte> data = t.produce();
    if (data.size() != t.bytes) {
      return make_error(ErrorCode::kInternal, "tensor {} produced {} bytes, expected {}", t.name, data.size(), t.bytes);
    }
    HEARTH_RETURN_IF_ERROR(sink({reinterpret_cast<const char*>(data.data()), data.size()}));
    HEARTH_RETURN_IF_ERROR(sink(std::string_view(padding).substr(0, (alignment_ - t.bytes % alignment_) % alignment_)));
  }
  return Status::ok();
}

std::string GgufWriter::bytes() const {
  std::string out;
  const Status st = emit([&](std::string_view chunk) {
    out.append(chunk);
    return Status::ok();
  });
  return st.is_ok() ? out : std::string();
}

Status GgufWriter::write(const std::filesystem::path& path) const {
  FileSink file(path);
  HEARTH_RETURN_IF_ERROR(emit([&](std::string_view chunk) { return file.append(chunk); }));
  return file.close();
}

}  // namespace hearth
