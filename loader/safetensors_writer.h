// SafetensorsWriter: builds a .safetensors file (JSON header + packed tensor data).
// Used by `hearth synth` and by tests that need Hugging Face checkpoints of a given
// shape. Not thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace hearth {

class SafetensorsWriter {
 public:
  // `type` is F32, F16 or BF16; `data` holds exactly the tensor's bytes.
  Status add(std::string_view name, DType type, std::span<const int64_t> shape, std::span<const std::byte> data);
  std::string bytes() const;
  Status write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  std::vector<Tensor> tensors_;
};

}  // namespace hearth
