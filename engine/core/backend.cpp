#include <charconv>

#include "engine/core/backend.h"

namespace hearth {

Result<int> cuda_device_from_name(std::string_view name) {
  if (name == "cuda") return 0;
  int device = -1;
  const std::string_view digits = name.substr(std::min<size_t>(name.size(), 5));
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), device);
  if (name.substr(0, 5) != "cuda:" || digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
      device < 0 || device > 1023) {
    return make_error(ErrorCode::kInvalidArgument, "\"{}\" is not a CUDA device: use cuda or cuda:N", name);
  }
  return device;
}

}  // namespace hearth
