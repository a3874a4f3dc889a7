// What CUDA devices this process can see. Compiled only when nvcc is found
// (HEARTH_CUDA); callers check HEARTH_HAVE_CUDA first. Thread-safe.
#pragma once

namespace hearth::kernels::cuda {

// Number of usable CUDA devices, 0 when there is no driver or no device.
int device_count();

// Compute capability (major * 10 + minor) of device `index`, or -1 when it cannot be read.
int compute_capability(int index);

}  // namespace hearth::kernels::cuda
