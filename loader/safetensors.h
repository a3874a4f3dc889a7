// safetensors parsing: the JSON header of a mapped .safetensors file, turned into
// tensor views over its data. Nothing is copied.
//
// Every offset, shape and dtype is checked against the file before use: a truncated or
// hostile file yields a Status naming the tensor, never a crash. F32, F16 and BF16 are
// accepted; any other dtype is refused by name. Thread-compatible.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace hearth {

struct SafetensorsFile {
  std::vector<TensorView> tensors;  // in header order; data points into the mapping
};

// Parses `bytes` (which must outlive the result's views). `what` names the file in errors.
Result<SafetensorsFile> safetensors_parse(std::span<const std::byte> bytes, std::string_view what);

}  // namespace hearth
