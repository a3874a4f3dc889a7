// Chat templates built into hearth, for models that ship none or ship one an operator
// wants to replace (`--chat-template NAME`): chatml (with tools in the Hermes format),
// llama2, llama3 (with JSON tool calls), mistral (with [TOOL_CALLS]) and zephyr.
// Thread-safe: constants.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace hearth {

// The Jinja source of the built-in template `name`, or nullopt.
std::optional<std::string_view> builtin_chat_template(std::string_view name);
// Every built-in name, for messages and --help.
const std::vector<std::string_view>& builtin_chat_template_names();

}  // namespace hearth
