// SafetensorsWriter: builds a .safetensors file (JSON header + packed tensor data).
// Used by `hearth synth` and by tests that need Hugging Face checkpoints of a given
// shape. Tensor bytes can be produced lazily, one tensor at a time, while the file is
// written. Not thread-safe.
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

class SafetensorsWriter {
 public:
  using Producer = std::function<std::vector<std::byte>()>;

  // `type` is F32, F16 or BF16; `data` holds exactly the tensor's bytes.
  Status add(std::string_view name, DType type, std::span<const int64_t> shape, std::span<const std::byte> data);
  Status add_lazy(std::string_view name, DType type, std::span<const int64_t> shape, Producer produce);
  // An I32 tensor (the packed words of a GPTQ / AWQ checkpoint).
  Status add_int32(std::string_view name, std::span<const int64_t> shape, std::span<const int32_t> data);
  std::string bytes() const;
  Status write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    bool int32;  // written as I32 (type is then kF32, the same size)
    std::vector<int64_t> shape;
    uint64_t bytes;
    Producer produce;
  };
  std::string header() const;
  Status emit(const std::function<Status(std::string_view)>& sink) const;

  std::vector<Tensor> tensors_;
};

}  // namespace hearth
