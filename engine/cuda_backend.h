// The CUDA backend (engine/cuda_backend.cpp), built when nvcc is found: the Backend of
// one GPU. make_backend("cuda" or "cuda:N") reaches it; cuda_device_from_name parses the
// name alone (and is built everywhere, so flags are checked the same way in every build).
#pragma once

#include <memory>
#include <string_view>

#include "common/status.h"
#include "engine/backend.h"

namespace hearth {

// The device index of "cuda" (0) or "cuda:N"; kInvalidArgument for anything else.
Result<int> cuda_device_from_name(std::string_view name);

// The backend of CUDA device `device`: kUnavailable when no device is visible,
// kInvalidArgument for an index past the last one.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

}  // namespace hearth
