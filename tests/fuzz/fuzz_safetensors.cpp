// Fuzz target: the safetensors header parser.
#include <cstddef>
#include <cstdint>
#include <span>

#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = hearth::safetensors_parse(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz");
  if (parsed.is_ok()) {
    volatile uint8_t sink = 0;
    for (const auto& t : parsed->tensors) {
      if (t.bytes > 0) sink = sink ^ static_cast<uint8_t>(t.data[t.bytes - 1]);
    }
    (void)sink;
  }
  return 0;
}
