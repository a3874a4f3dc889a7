// safetensors parsing: the JSON header of a mapped .safetensors file, turned into
// tensor views over its data. Nothing is copied.
//
// Every offset, shape and dtype is checked against the file before use: a truncated or
// hostile file yields a Status naming the tensor, never a crash. F32, F16 and BF16 are
// accepted, and I32 (the packed words of pre-quantized checkpoints) when asked for;
// any other dtype is refused by name. Thread-compatible.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace hearth {

struct SafetensorsFile {
  std::vector<TensorView> tensors;  // in header order; data points into the mapping
  // I32 tensors, apart so that they can never be taken for weights: their views' dtype
  // is meaningless (kF32, the same 4 bytes per element); read them with memcpy (the
  // format does not align them).
  std::vector<TensorView> int32_tensors;
};

// Parses `bytes` (which must outlive the result's views). `what` names the file in
// errors. I32 tensors are refused unless `accept_int32`.
Result<SafetensorsFile> safetensors_parse(std::span<const std::byte> bytes, std::string_view what,
                                          bool accept_int32 = false);

}  // namespace hearth
