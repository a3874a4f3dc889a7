// Fuzz target: the GGUF parser and the model description built from it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "loader/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = hearth::gguf_parse(std::span(reinterpret_cast<const std::byte*>(data), size));
  if (parsed.is_ok()) {
    // Touch every tensor view: it must lie inside the input.
    volatile uint8_t sink = 0;
    for (const auto& t : parsed->tensors) {
      if (t.bytes > 0) sink = sink ^ static_cast<uint8_t>(t.data[t.bytes - 1]);
    }
    (void)sink;
  }
  return 0;
}
