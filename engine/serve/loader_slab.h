// An engine rank's side of hearth-loader --device: asks the loader for its rank's device
// slab (ipc/slab_channel.h), checks that it is this segment's and this GPU's, maps it
// (ipc/device_memory.h) and hands it to the CUDA backend, which then reads the weights in
// place. With no loader serving slabs (started without --device) or a backend that runs
// from host memory, nothing happens and the backend copies the weights itself.
#pragma once

#include <filesystem>
#include <string_view>

#include "common/status.h"
#include "engine/core/backend.h"
#include "ipc/weights_segment.h"

namespace hearth {

// kFormat / kInvalidArgument when the loader's slab is for another model, layout, GPU or
// rank split (the message says which, and which flag to change).
Status backend_use_loader_slab(Backend& backend, const AttachedWeights& weights, int rank,
                               const std::filesystem::path& shm_dir, std::string_view instance);

}  // namespace hearth
