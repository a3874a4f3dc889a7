// Fuzz target: any bytes as a chat template (models ship them; a frontend renders them
// for every request), parsed and rendered with a conversation under the default budgets.
// It must return a Status, never crash, and stop within its budgets.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = hearth::ChatTemplate::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.is_ok()) return 0;
  hearth::ChatTemplateInputs inputs;
  inputs.messages = {{"system", "Be brief.", {}}, {"user", "Hello", {}}, {"assistant", "Hi!", {}},
                     {"user", "Tell me a story", {}}};
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  // The default budgets, but a smaller step count: a runaway template stops in
  // milliseconds instead of seconds (the budget is the behaviour, not its size).
  hearth::ChatTemplateLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1u << 20;
  auto out = t->render(inputs, limits);
  if (out.is_ok() && out->size() > limits.max_output_bytes) __builtin_trap();
  return 0;
}
