#include "loader/safetensors_writer.h"

#include <cstring>

#include <boost/json.hpp>

#include "common/mapped_file.h"

namespace hearth {

Status SafetensorsWriter::add(std::string_view name, DType type, std::span<const int64_t> shape,
                              std::span<const std::byte> data) {
  if (type != DType::kF32 && type != DType::kF16 && type != DType::kBF16) {
    return make_error(ErrorCode::kInvalidArgument, "safetensors holds f32, f16 or bf16, not {}", dtype_name(type));
  }
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  if (*dtype_bytes(type, elements) != data.size()) {
    return make_error(ErrorCode::kInvalidArgument, "tensor {}: {} bytes do not match its shape", name, data.size());
  }
  tensors_.push_back({std::string(name), type, {shape.begin(), shape.end()}, {data.begin(), data.end()}});
  return Status::ok();
}

std::string SafetensorsWriter::bytes() const {
  boost::json::object header;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    boost::json::object entry;
    entry["dtype"] = t.type == DType::kF32 ? "F32" : t.type == DType::kF16 ? "F16" : "BF16";
    boost::json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = {offset, offset + t.data.size()};
    header[t.name] = std::move(entry);
    offset += t.data.size();
  }
  std::string json = boost::json::serialize(header);
  json.resize((json.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  out += json;
  for (const Tensor& t : tensors_) out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  return out;
}

Status SafetensorsWriter::write(const std::filesystem::path& path) const { return write_file(path, bytes()); }

}  // namespace hearth
