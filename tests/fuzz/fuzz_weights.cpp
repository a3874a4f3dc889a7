// Fuzz target: any bytes as a weights segment, read as an engine or frontend attaches:
// header, state, manifest, config, tokenizer blob; every tensor view it hands out must
// lie inside the segment.
#include <cstddef>
#include <cstdint>

#include "ipc/weights_segment.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hearth::fuzz::MemoryFile file(data, size);
  if (!file.ok()) return 0;
  auto w = hearth::weights_attach(file.path());
  if (!w.is_ok()) return 0;
  const std::byte* begin = w->segment.data();
  const std::byte* end = begin + w->segment.size();
  volatile uint8_t sink = 0;
  for (uint32_t r = 0; r < w->header->tp_size; ++r) {
    for (const auto& t : w->tensors(static_cast<int>(r))) {
      if (t.data < begin || t.data + t.bytes > end) __builtin_trap();
      if (t.bytes > 0) sink = sink ^ static_cast<uint8_t>(t.data[t.bytes - 1]);
    }
  }
  if (!w->tokenizer_blob.empty()) sink = sink ^ static_cast<uint8_t>(w->tokenizer_blob.back());
  (void)sink;
  return 0;
}
