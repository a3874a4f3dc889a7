// The CUDA backend (engine/cuda_backend.cpp), built when nvcc is found: the Backend of
// one GPU. make_backend("cuda" or "cuda:N") reaches it; cuda_device_from_name parses the
// name alone (and is built everywhere, so flags are checked the same way in every build).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "common/status.h"
#include "engine/backend.h"

namespace hearth {
namespace kernels::cuda {
class SharedDeviceMemory;
}

// The device index of "cuda" (0) or "cuda:N"; kInvalidArgument for anything else.
Result<int> cuda_device_from_name(std::string_view name);

// The backend of CUDA device `device`: kUnavailable when no device is visible,
// kInvalidArgument for an index past the last one.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

// Makes `backend` (a CUDA backend) read the weights in `host_region` (one rank's data
// region of the weights segment) from `slab`, the loader's device copy of that region,
// instead of copying them itself: bind_weights then maps each tensor into the slab.
Status cuda_backend_use_slab(Backend& backend, std::shared_ptr<const kernels::cuda::SharedDeviceMemory> slab,
                             std::span<const std::byte> host_region);

}  // namespace hearth
