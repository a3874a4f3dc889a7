// GgufWriter: builds a GGUF v3 file (metadata and tensors) in memory or on disk.
// Used by `hearth synth` to write models and by tests to craft edge cases. Tensor data
// is laid out in the order added, each aligned to general.alignment (32 unless set).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace hearth {

class GgufWriter {
 public:
  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_f32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_strings(std::string_view key, std::span<const std::string> v);
  void add_f32s(std::string_view key, std::span<const float> v);
  void add_i32s(std::string_view key, std::span<const int32_t> v);

  // A tensor of `shape` (outermost first, as hearth stores shapes); `data` must hold
  // exactly dtype_bytes(type, elements) bytes.
  Status add_tensor(std::string_view name, DType type, std::span<const int64_t> shape, std::span<const std::byte> data);
  // The same, with the bytes made by `produce` only when the file is written (so that a
  // large model never needs to be in memory at once).
  using Producer = std::function<std::vector<std::byte>()>;
  Status add_tensor_lazy(std::string_view name, DType type, std::span<const int64_t> shape, Producer produce);

  // The whole file in memory.
  std::string bytes() const;
  // Streams the file to `path`, one tensor at a time.
  Status write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    uint32_t ggml_type;
    std::vector<int64_t> shape;
    uint64_t bytes;
    Producer produce;
  };
  void key(std::string_view k, uint32_t type);
  std::string header() const;
  // Writes the header, then each tensor's bytes padded to the alignment.
  Status emit(const std::function<Status(std::string_view)>& sink) const;

  std::string kv_;
  uint64_t n_kv_ = 0;
  uint32_t alignment_ = 32;
  std::vector<Tensor> tensors_;
};

// ggml's type code for a DType (F32 0, F16 1, Q4_0 2, Q8_0 8, BF16 30).
uint32_t ggml_type_code(DType type);

}  // namespace hearth
