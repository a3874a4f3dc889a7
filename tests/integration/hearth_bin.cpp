#include "tests/integration/hearth_bin.h"

namespace hearth::testing {

std::string hearth_bin(const std::string& name) { return std::string(HEARTH_BIN_DIR) + "/" + name; }

}  // namespace hearth::testing
