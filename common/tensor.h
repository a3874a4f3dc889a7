// TensorView: a named, typed, read-only view of tensor bytes owned by someone else (a
// file mapping, a shared-memory segment). Shapes are row-major, outermost first: a
// linear layer's weight is [out_features, in_features], as PyTorch stores it.
// Plain data; thread-compatible.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

// How a set of tensors is laid out for a backend's kernels, named in the weights segment
// so that a backend can refuse one it cannot read. "plain": every tensor as its dtype
// defines it (what model files hold); "cpu-r16": Q8_0, Q4_0, F16 and BF16 matrices
// row-interleaved by 16 (DType kQ8_0R16, kQ4_0R16, kF16R16, kBF16R16) for the CPU
// kernels, the rest (F32 tensors, vectors, the embedding table) plain.
inline constexpr std::string_view kLayoutPlain = "plain";
inline constexpr std::string_view kLayoutCpuR16 = "cpu-r16";

}  // namespace hearth
