// Fuzz target: any bytes as an adapter segment, read as an engine and a frontend do:
// attach, list the adapters, and copy each one out under its id; every copy either fails
// with an error or holds factors of the sizes its records say.
#include <cstddef>
#include <cstdint>

#include "ipc/lora_segment.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hearth::fuzz::MemoryFile file(data, size);
  if (!file.ok()) return 0;
  auto segment = hearth::LoraSegment::attach(file.path(), /*writable=*/false);
  if (!segment.is_ok()) return 0;
  for (const hearth::LoraSlotInfo& info : segment->list()) {
    (void)segment->find(info.name);
    auto adapter = segment->read(info.slot, info.id);
    if (!adapter.is_ok()) continue;
    for (const hearth::LoraMatrix& m : adapter->matrices) {
      if (m.a.size() != static_cast<size_t>(m.rank * m.cols) || m.b.size() != static_cast<size_t>(m.rows * m.rank)) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
