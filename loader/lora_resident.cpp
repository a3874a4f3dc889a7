#include "loader/lora_resident.h"

#include <algorithm>
#include <system_error>

#include <unistd.h>

#include "common/process.h"

#include "loader/lora.h"

namespace hearth {

std::vector<TensorView> lora_base_tensors(const AttachedWeights& base) {
  std::vector<TensorView> out;
  const uint32_t tp = base.header->tp_size;
  for (const WeightsEntry& e : base.entries()) {
    if (e.rank != 0) continue;
    TensorView t;
    t.name = std::string(e.name, ::strnlen(e.name, sizeof(e.name)));
    t.dtype = static_cast<DType>(e.dtype);
    t.n_dims = static_cast<int>(e.n_dims);
    for (uint32_t d = 0; d < e.n_dims && d < 4; ++d) t.shape[d] = e.shape[d];
    if (e.n_dims == 2 && e.split == static_cast<uint32_t>(TensorSplit::kRows)) t.shape[0] *= tp;
    if (e.n_dims == 2 && e.split == static_cast<uint32_t>(TensorSplit::kCols)) t.shape[1] *= tp;
    out.push_back(std::move(t));
  }
  return out;
}

uint64_t lora_slot_bytes(const AttachedWeights& base, int32_t max_rank) {
  uint64_t bytes = 0;
  for (const auto& [rows, cols] : lora_adaptable_shapes(base.config, lora_base_tensors(base))) {
    bytes += lora_record_bytes(max_rank, rows, cols);
  }
  return std::max<uint64_t>(bytes, 64);
}

Result<OpenedLoraSegment> lora_segment_open(const AttachedWeights& base, const LoraSegmentOptions& o) {
  if (o.max_loras < 1 || o.max_loras > static_cast<uint32_t>(kMaxLoraSlots)) {
    return make_error(ErrorCode::kInvalidArgument, "--max-loras must be 1..{}, not {}", kMaxLoraSlots, o.max_loras);
  }
  if (o.max_rank < 1 || o.max_rank > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "--max-lora-rank must be 1..1024, not {}", o.max_rank);
  }
  const uint64_t slot_bytes = lora_slot_bytes(base, o.max_rank);
  OpenedLoraSegment out;
  std::error_code ec;
  if (std::filesystem::exists(o.path, ec)) {
    auto existing = LoraSegment::attach(o.path, /*writable=*/true);
    if (!existing.is_ok()) {
      out.why_new = existing.status().message();
    } else {
      const LoraSegment& e = *existing;
      const Fingerprint adapted = e.header().base;
      if (!(adapted == base.header->fingerprint)) {
        out.why_new = fmt::format("it holds adapters of another model ({})", adapted.hex());
      } else if (e.n_slots() != o.max_loras || e.max_rank() != o.max_rank || e.slot_bytes() != slot_bytes) {
        // Engines and frontends hold its slots by number: it cannot change under them.
        std::vector<int> users = processes_mapping(o.path);
        std::erase(users, static_cast<int>(::getpid()));
        if (!users.empty()) {
          return make_error(ErrorCode::kUnavailable,
                            "{} holds {} adapter slots of rank up to {} and processes {} use it: start the loader with "
                            "--max-loras {} --max-lora-rank {} as before, or stop them first",
                            o.path.string(), e.n_slots(), e.max_rank(), fmt::join(users, ", "), e.n_slots(),
                            e.max_rank());
        }
        out.why_new = fmt::format("its capacity differs ({} adapters of rank up to {}; now {} of rank up to {})",
                                  e.n_slots(), e.max_rank(), o.max_loras, o.max_rank);
      } else {
        out.segment = std::move(existing).value();
        out.adopted = true;
        return out;
      }
    }
  }
  HEARTH_ASSIGN_OR_RETURN(out.segment, LoraSegment::create(o.path, {.base = base.header->fingerprint,
                                                                    .n_slots = o.max_loras,
                                                                    .max_rank = o.max_rank,
                                                                    .slot_bytes = slot_bytes}));
  return out;
}

Result<LoraSlotInfo> lora_segment_load(LoraSegment& segment, const AttachedWeights& base, const std::string& name,
                                       const std::filesystem::path& path) {
  HEARTH_RETURN_IF_ERROR(lora_name_check(name));
  if (!(segment.header().base == base.header->fingerprint)) {
    return make_error(ErrorCode::kInvalidArgument, "the adapter segment {} adapts another model", segment.path().string());
  }
  const std::vector<TensorView> tensors = lora_base_tensors(base);
  auto adapter = lora_open(path, base.config, tensors, name);
  if (!adapter.is_ok()) return adapter.status().with_context(fmt::format("adapter \"{}\" ({})", name, path.string()));
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(path, ec);
  return segment.write(*adapter, name, (ec ? path : absolute).string());
}

}  // namespace hearth
