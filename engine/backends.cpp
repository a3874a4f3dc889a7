// make_backend: the engine's one place to choose a device kind.
#include "engine/backends.h"

#if HEARTH_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace hearth {

Status backend_check_name(std::string_view name) {
  if (name == "cpu" || name == "cpu-reference") return Status::ok();
  if (name.substr(0, 4) == "cuda") {
    // The name's form is checked the same way in every build, then whether this one has CUDA.
    HEARTH_RETURN_IF_ERROR(cuda_device_from_name(name).status());
#if HEARTH_HAVE_CUDA
    return Status::ok();
#else
    return make_error(ErrorCode::kUnsupported, "this build has no CUDA backend (nvcc was not found when it was "
                      "configured; rebuild with -DHEARTH_CUDA=ON): it has cpu and cpu-reference");
#endif
  }
#if HEARTH_HAVE_CUDA
  return make_error(ErrorCode::kUnsupported, "no backend \"{}\" in this build: it has cpu, cpu-reference and cuda[:N]",
                    name);
#else
  return make_error(ErrorCode::kUnsupported, "no backend \"{}\" in this build: it has cpu and cpu-reference", name);
#endif
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const CpuBackendOptions& cpu) {
  HEARTH_RETURN_IF_ERROR(backend_check_name(name));
#if HEARTH_HAVE_CUDA
  if (name.substr(0, 4) == "cuda") {
    HEARTH_ASSIGN_OR_RETURN(const int device, cuda_device_from_name(name));
    return make_cuda_backend(device);
  }
#endif
  CpuBackendOptions o = cpu;
  o.use_reference = name == "cpu-reference";
  return make_cpu_backend(o);
}

}  // namespace hearth
