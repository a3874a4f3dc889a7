#include "common/version.h"

#include <fmt/format.h>

namespace hearth {

std::string_view hearth_version() { return HEARTH_VERSION; }

std::string_view hearth_commit() { return HEARTH_COMMIT; }

bool cuda_emulated() {
#if HEARTH_BUILD_CUDA_EMU
  return true;
#else
  return false;
#endif
}

std::string version_line(std::string_view program) {
  return fmt::format("{} {} (commit {}){}", program, hearth_version(), hearth_commit(),
                     cuda_emulated() ? " [CUDA emulated on the CPU, not a GPU build]" : "");
}

}  // namespace hearth
