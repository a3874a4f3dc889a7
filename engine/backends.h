// make_backend: the engine's one place to choose a device kind, above the backends
// (engine/cpu, engine/cuda) and the interface they implement (engine/core/backend.h).
#pragma once

#include <memory>
#include <string_view>

#include "common/status.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu_backend.h"

namespace hearth {

// The backend named `name`: "cpu", "cpu-reference" (the scalar reference kernels), and
// "cuda" / "cuda:N" where the build has CUDA; kUnsupported naming the ones this build
// has for any other.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const CpuBackendOptions& cpu = {});
// make_backend's check of `name` alone, without creating anything (flag parsing).
Status backend_check_name(std::string_view name);

}  // namespace hearth
