// The CUDA backend (engine/cuda/cuda_backend.cpp), built when nvcc is found: the Backend of
// one GPU. make_backend("cuda" or "cuda:N") reaches it.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "common/status.h"
#include "engine/core/backend.h"

namespace hearth {

class SharedDeviceMemory;  // ipc/device_memory.h

// The backend of CUDA device `device`: kUnavailable when no device is visible,
// kInvalidArgument for an index past the last one.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

// Makes `backend` (a CUDA backend) read the weights in `host_region` (one rank's data
// region of the weights segment) from `slab`, the loader's device copy of that region,
// instead of copying them itself: bind_weights then maps each tensor into the slab.
Status cuda_backend_use_slab(Backend& backend, std::shared_ptr<const SharedDeviceMemory> slab,
                             std::span<const std::byte> host_region);

}  // namespace hearth
