#include "common/tensor.h"

#include <fmt/format.h>

namespace hearth {

std::string shape_string(const TensorView& t) {
  std::string out = "[";
  for (int i = 0; i < t.n_dims; ++i) out += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
  return out + "]";
}

}  // namespace hearth
