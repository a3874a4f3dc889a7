#include "engine/serve/resident_adapters.h"

#include <system_error>

#include "common/log.h"

namespace hearth {

Result<ResidentAdapters> ResidentAdapters::attach(const std::filesystem::path& path, const Fingerprint& base) {
  ResidentAdapters out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  HEARTH_ASSIGN_OR_RETURN(LoraSegment segment, LoraSegment::attach(path, /*writable=*/true));
  if (!(segment.header().base == base)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} holds adapters of another model ({}); restart hearth-loader, which replaces it",
                      path.string(), segment.header().base.hex());
  }
  out.held_.assign(segment.n_slots(), 0);
  out.segment_.emplace(std::move(segment));
  return out;
}

Status ResidentAdapters::use(Model& model, int32_t slot, uint64_t id) {
  if (!segment_) {
    return make_error(ErrorCode::kUnsupported, "this engine started without resident adapters (hearth-loader --lora)");
  }
  if (slot < 0 || slot >= slots()) return make_error(ErrorCode::kOutOfRange, "adapter slot {} of {}", slot, slots());
  const auto i = static_cast<size_t>(slot);
  const LoraSlotHeader& s = segment_->slot(static_cast<uint32_t>(slot));
  const auto state = static_cast<LoraSlotState>(s.state.load(std::memory_order_acquire));
  if ((state != LoraSlotState::kReady && state != LoraSlotState::kUnloading) ||
      s.id.load(std::memory_order_acquire) != id) {
    return make_error(ErrorCode::kNotFound, "model: the adapter this request named was unloaded before it ran");
  }
  if (held_[i] == id && model.adapter_loaded(slot)) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(LoraAdapter adapter, segment_->read(static_cast<uint32_t>(slot), id));
  held_[i] = 0;
  if (Status st = model.set_adapter(slot, adapter); !st.is_ok()) {
    model.clear_adapter(slot);
    return st.with_context(fmt::format("adapter \"{}\"", adapter.name));
  }
  held_[i] = id;
  HEARTH_LOG_INFO("adapter {} in slot {}: {} matrices of rank up to {}", adapter.name, slot, adapter.matrices.size(),
                  adapter.max_rank);
  return Status::ok();
}

Status ResidentAdapters::sync(Model& model, const ModelInput& input) {
  if (!input.has_adapters()) return Status::ok();
  int32_t last = -1;
  for (const int32_t slot : input.adapters) {
    if (slot < 0 || slot == last) continue;
    last = slot;
    if (!segment_ || slot >= slots()) return use(model, slot, 0);
    const uint64_t id = segment_->slot(static_cast<uint32_t>(slot)).id.load(std::memory_order_acquire);
    HEARTH_RETURN_IF_ERROR(use(model, slot, id));
  }
  return Status::ok();
}

void ResidentAdapters::release_unloaded(const std::function<bool(int32_t slot, uint64_t id)>& in_use) {
  if (!segment_) return;
  for (uint32_t i = 0; i < segment_->n_slots(); ++i) {
    const LoraSlotHeader& s = segment_->slot(i);
    if (s.state.load(std::memory_order_acquire) != static_cast<uint32_t>(LoraSlotState::kUnloading)) continue;
    const uint64_t id = s.id.load(std::memory_order_acquire);
    if (in_use(static_cast<int32_t>(i), id)) continue;
    const std::string unloaded = name(static_cast<int32_t>(i));
    if (segment_->free_unloaded(i, id)) HEARTH_LOG_INFO("adapter {} unloaded: slot {} is free", unloaded, i);
  }
}

std::string ResidentAdapters::name(int32_t slot) const {
  if (!segment_ || slot < 0 || slot >= slots()) return "";
  const LoraSlotHeader& s = segment_->slot(static_cast<uint32_t>(slot));
  return std::string(s.name, ::strnlen(s.name, sizeof(s.name)));
}

}  // namespace hearth
