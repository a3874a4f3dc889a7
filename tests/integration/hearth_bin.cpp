#include "tests/integration/hearth_bin.h"

namespace hearth::testing {

std::string hearth_bin(const std::string& name) { return std::string(HEARTH_BIN_DIR) + "/" + name; }

std::string plain_chat_template() { return std::string(HEARTH_TEST_DATA_DIR) + "/plain_chat.jinja"; }

}  // namespace hearth::testing
