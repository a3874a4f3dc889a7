// The engine's view of the instance's resident LoRA adapters (ipc/lora_segment.h): which
// adapter each of the model's slots holds, read from the segment when a request names
// one the model does not hold yet. Rank 0 does it when it admits a request (the adapter
// and load id the request carries); ranks 1..tp-1 before each step, for the slots the
// step's rows name (the segment cannot hand a slot to another adapter while a request
// in the broker names it, so every rank reads the same one). Owned by one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <optional>
#include <vector>

#include "common/status.h"
#include "engine/core/model.h"
#include "engine/core/model_input.h"
#include "ipc/lora_segment.h"
#include "ipc/weights_layout.h"

namespace hearth {

class ResidentAdapters {
 public:
  // The segment at `path` when there is one (refusing one of another model), else none:
  // then requests that name an adapter are refused.
  static Result<ResidentAdapters> attach(const std::filesystem::path& path, const Fingerprint& base);

  bool present() const { return segment_.has_value(); }
  // What Model::create needs: slots and the largest rank (0, 0 without a segment).
  int32_t slots() const { return segment_ ? static_cast<int32_t>(segment_->n_slots()) : 0; }
  int32_t max_rank() const { return segment_ ? segment_->max_rank() : 0; }
  // The segment's nonce (0: none), and whether its file was replaced or removed since.
  uint64_t nonce() const { return segment_ ? segment_->nonce() : 0; }
  bool replaced() const { return segment_ && segment_->replaced(); }

  // Makes `model`'s slot `slot` hold the adapter loaded there under `id`: kNotFound when
  // the segment holds it no more (unloaded), kUnsupported without a segment.
  Status use(Model& model, int32_t slot, uint64_t id);
  // Every slot `input`'s rows name, as the segment holds it now.
  Status sync(Model& model, const ModelInput& input);
  // Frees each slot being unloaded (LoraSegment::free_unloaded) that `in_use(slot, id)`
  // says no request names any more. Rank 0, in its serving loop, between admissions.
  void release_unloaded(const std::function<bool(int32_t slot, uint64_t id)>& in_use);
  // The name of what slot `slot` holds (for log lines); "" when nothing.
  std::string name(int32_t slot) const;

 private:
  std::optional<LoraSegment> segment_;
  std::vector<uint64_t> held_;  // per slot: the load id the model holds (0: none)
};

}  // namespace hearth
