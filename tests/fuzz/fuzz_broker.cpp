// Fuzz target: any bytes as a broker segment, read as an engine reads it after a start:
// attach (validation), every slot's state and request (its shape, then its values as the
// driver judges them), the ring's repairs and pops, the sweep. Frontends are other processes; nothing they leave may crash or hang an engine.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ipc/broker.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hearth::fuzz::MemoryFile file(data, size);
  if (!file.ok()) return 0;
  auto broker = hearth::Broker::attach(file.path());
  if (!broker.is_ok()) return 0;
  const uint32_t n = std::min<uint32_t>(broker->n_slots(), 256);
  volatile uint64_t sink = 0;
  for (uint32_t i = 0; i < n; ++i) {
    sink = sink + hearth::slot_state_name(broker->slot(i).state.load()).size();
    for (const bool resume : {false, true}) {
      auto r = broker->read_request(i, resume, 4096, 32000);
      if (!r.is_ok()) continue;
      // What the engine's driver then judges: every value of the request.
      const hearth::Status valid =
          hearth::request_spec_validate(r->spec, {.vocab_size = 32000, .grammar_bytes = broker->grammar_capacity()});
      sink = sink + r->tokens.size() + r->spec.stop_ids.size() + (valid.is_ok() ? 1 : 0);
    }
  }
  hearth::Ring ring = broker->ring();
  ring.release_claimed();
  std::vector<uint64_t> holes;
  ring.unfilled_positions(holes);
  for (int i = 0; i < 64; ++i) {
    const auto v = ring.pop();
    if (!v && !ring.skip_stalled_head()) break;
  }
  ring.push(0);
  std::vector<uint64_t> holds(broker->n_slots(), 0), suspects(broker->n_slots(), 0);
  broker->sweep_orphans(holds, suspects, std::chrono::milliseconds(5000), hearth::monotonic_ns());
  (void)sink;
  return 0;
}
