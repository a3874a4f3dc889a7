// The frontend's side of the instance's resident LoRA adapters (ipc/lora_segment.h): which
// adapter a request's `model` names, what /v1/models lists, and the run-time loads and
// unloads of POST /v1/load_lora_adapter and /v1/unload_lora_adapter (allowed with
// --allow-runtime-lora). The segment is shared by every frontend of the instance; loads
// and unloads of all of them go through its writers' lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/status.h"
#include "ipc/lora_segment.h"

namespace hearth {

// What a request runs with: an adapter's slot, load id and name.
struct AdapterRef {
  int32_t slot = -1;
  uint64_t id = 0;
  std::string name;
};

class FrontendAdapters {
 public:
  // The segment at `path` when there is one of this model (none is no error: the
  // instance keeps no adapters).
  Status attach(const std::filesystem::path& path, const Fingerprint& base);
  bool present() const { return segment_.has_value(); }
  uint32_t capacity() const { return segment_ ? segment_->n_slots() : 0; }
  uint64_t nonce() const { return segment_ ? segment_->nonce() : 0; }

  // The READY adapter named `model`, if any.
  std::optional<AdapterRef> find(std::string_view model) const;
  // Whether the adapter `ref` names is still loaded under its id (ready or being unloaded).
  bool holds(const AdapterRef& ref) const;
  // Every loaded adapter.
  std::vector<LoraSlotInfo> list() const;
  // /v1/models entries: each adapter with its `parent` (the base model's id).
  void list_models(boost::json::array& data, const std::string& parent, int32_t context) const;

  // POST /v1/load_lora_adapter's work: `loader` (hearth-loader --load-lora NAME=PATH)
  // reads `path` against the instance's weights into a free slot; the frontend reads no
  // model file itself. `reserved` are names the base model answers to (an adapter may not
  // take one).
  struct Loader {
    std::string program;  // hearth-loader
    std::string instance;
    std::string shm_dir;
  };
  Result<LoraSlotInfo> load(const Loader& loader, const std::string& name, const std::string& path,
                            const std::vector<std::string>& reserved);
  // POST /v1/unload_lora_adapter's work. This frontend stops taking requests for `name`
  // and waits until none of those it queued is still waiting for a broker slot; then the
  // adapter turns UNLOADING (no frontend takes new requests for it) and the engine frees
  // its slot once the requests in the broker that name it have finished. Returns when the
  // slot is free; kUnavailable when no engine serves or the requests still run after
  // `timeout` (the adapter stays UNLOADING, freed by the engine once nothing names it),
  // when the engine does not serve this segment (nothing changed), or when this frontend
  // stops (READY again, if this unload began it).
  struct UnloadHooks {
    std::function<bool(uint32_t slot, uint64_t id)> queued_here;  // a request here waits for a slot with it
    std::function<bool()> engine_down;
    std::function<bool()> engine_serves_segment;  // the engine attached this segment (it frees slots)
    std::function<bool()> stopping;
    std::chrono::milliseconds timeout{600000};  // then kUnavailable, the adapter left UNLOADING
  };
  Result<LoraSlotInfo> unload(const std::string& name, const UnloadHooks& hooks);

 private:
  std::optional<LoraSegment> segment_;
  std::mutex admin_mu_;  // one load at a time from this frontend (an unload waits without it)
  mutable std::mutex unloading_mu_;  // guards `unloading_`
  std::vector<std::string> unloading_;  // adapters this frontend takes no new requests for
};

// The body of a load or unload request: its fields, refusing others and wrong types.
struct LoraAdminRequest {
  std::string name;  // lora_name
  std::string path;  // lora_path (loads only)
};
Result<LoraAdminRequest> lora_admin_parse(std::string_view body, bool load);

}  // namespace hearth
