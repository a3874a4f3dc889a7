// Resident LoRA adapters: the instance's adapter segment (ipc/lora_segment.h) sized for a
// base model, and adapters read from disk (loader/lora.h) into it. The loader opens it at
// start (hearth-loader --lora NAME=PATH, --max-loras, --max-lora-rank); a frontend loads
// and unloads adapters at run time through the same calls.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"
#include "ipc/lora_segment.h"
#include "ipc/weights_segment.h"
#include "loader/model.h"

namespace hearth {

// The base's tensors with their whole shapes (a split segment's shards joined again): what
// an adapter is checked against. The views hold no data.
std::vector<TensorView> lora_base_tensors(const AttachedWeights& base);

// The bytes one slot needs for an adapter of rank up to `max_rank` on every matrix of
// `base` it may adapt.
uint64_t lora_slot_bytes(const AttachedWeights& base, int32_t max_rank);

struct LoraSegmentOptions {
  std::filesystem::path path;  // segment_path(dir, instance, "lora")
  uint32_t max_loras = 0;
  int32_t max_rank = 0;
};

struct OpenedLoraSegment {
  LoraSegment segment;
  bool adopted = false;    // an earlier loader's segment of the same base and capacity
  std::string why_new;     // why an existing one was replaced ("" when none was there)
};

// Adopts the segment at `options.path` when it adapts `base` with the same capacity (its
// adapters stay loaded), else creates it empty.
Result<OpenedLoraSegment> lora_segment_open(const AttachedWeights& base, const LoraSegmentOptions& options);

// Reads the PEFT directory or GGUF LoRA file at `path` against `base` and writes it into
// a free slot under `name`; nothing in the segment changes when it is refused.
Result<LoraSlotInfo> lora_segment_load(LoraSegment& segment, const AttachedWeights& base, const std::string& name,
                                       const std::filesystem::path& path);

}  // namespace hearth
