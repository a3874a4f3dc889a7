// TensorView: a named, typed, read-only view of tensor bytes owned by someone else (a
// file mapping, a shared-memory segment). Shapes are row-major, outermost first: a
// linear layer's weight is [out_features, in_features], as PyTorch stores it.
// Plain data; thread-compatible.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace hearth {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, 4> shape{};  // [n_dims] used, outermost first
  const std::byte* data = nullptr;
  uint64_t bytes = 0;

  int64_t elements() const {
    int64_t n = 1;
    for (int i = 0; i < n_dims; ++i) n *= shape[i];
    return n;
  }
  int64_t rows() const { return n_dims >= 2 ? shape[0] : 1; }
  int64_t cols() const { return n_dims >= 1 ? shape[n_dims - 1] : 0; }
};

// "[2048, 512]".
std::string shape_string(const TensorView& t);

}  // namespace hearth
