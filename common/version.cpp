#include "common/version.h"

#include <fmt/format.h>

namespace hearth {

std::string_view hearth_version() { return HEARTH_VERSION; }

std::string_view hearth_commit() { return HEARTH_COMMIT; }

std::string version_line(std::string_view program) {
  return fmt::format("{} {} (commit {})", program, hearth_version(), hearth_commit());
}

}  // namespace hearth
