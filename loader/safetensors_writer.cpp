#include "loader/safetensors_writer.h"

#include <cstring>
#include <memory>

#include <boost/json.hpp>

#include "common/mapped_file.h"

namespace hearth {

Status SafetensorsWriter::add(std::string_view name, DType type, std::span<const int64_t> shape,
                              std::span<const std::byte> data) {
  auto copy = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
  return add_lazy(name, type, shape, [copy] { return *copy; });
}

Status SafetensorsWriter::add_lazy(std::string_view name, DType type, std::span<const int64_t> shape,
                                   Producer produce) {
  if (type != DType::kF32 && type != DType::kF16 && type != DType::kBF16) {
    return make_error(ErrorCode::kInvalidArgument, "safetensors holds f32, f16 or bf16, not {}", dtype_name(type));
  }
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  tensors_.push_back({std::string(name), type, false, {shape.begin(), shape.end()}, *dtype_bytes(type, elements),
                      std::move(produce)});
  return Status::ok();
}

Status SafetensorsWriter::add_int32(std::string_view name, std::span<const int64_t> shape,
                                    std::span<const int32_t> data) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  if (elements != static_cast<int64_t>(data.size())) {
    return make_error(ErrorCode::kInvalidArgument, "tensor {}: {} values for {} elements", name, data.size(), elements);
  }
  auto copy = std::make_shared<std::vector<std::byte>>(std::as_bytes(data).begin(), std::as_bytes(data).end());
  tensors_.push_back({std::string(name), DType::kF32, true, {shape.begin(), shape.end()}, copy->size(),
                      [copy] { return *copy; }});
  return Status::ok();
}

std::string SafetensorsWriter::header() const {
  boost::json::object header;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    boost::json::object entry;
    entry["dtype"] = t.int32 ? "I32" : t.type == DType::kF32 ? "F32" : t.type == DType::kF16 ? "F16" : "BF16";
    boost::json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = {offset, offset + t.bytes};
    header[t.name] = std::move(entry);
    offset += t.bytes;
  }
  std::string json = boost::json::serialize(header);
  json.resize((json.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

Status SafetensorsWriter::emit(const std::function<Status(std::string_view)>& sink) const {
  HEARTH_RETURN_IF_ERROR(sink(header()));
  for (const Tensor& t : tensors_) {
    const std::vector<std::byte> data = t.produce();
    if (data.size() != t.bytes) {
      return make_error(ErrorCode::kInternal, "tensor {} produced {} bytes, expected {}", t.name, data.size(), t.bytes);
    }
    HEARTH_RETURN_IF_ERROR(sink({reinterpret_cast<const char*>(data.data()), data.size()}));
  }
  return Status::ok();
}

std::string SafetensorsWriter::bytes() const {
  std::string out;
  const Status st = emit([&](std::string_view chunk) {
    out.append(chunk);
    return Status::ok();
  });
  return st.is_ok() ? out : std::string();
}

Status SafetensorsWriter::write(const std::filesystem::path& path) const {
  FileSink file(path);
  HEARTH_RETURN_IF_ERROR(emit([&](std::string_view chunk) { return file.append(chunk); }));
  return file.close();
}

}  // namespace hearth
