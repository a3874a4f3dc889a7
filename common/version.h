// What build this is: the project's version and the source commit it was configured
// from, for --version, /metrics (hearth_build_info) and system fingerprints.
#pragma once

#include <string>
#include <string_view>

namespace hearth {

// "0.1.0".
std::string_view hearth_version();
// The short commit hash of the source tree at configure time ("unknown" outside git).
std::string_view hearth_commit();
// Whether this build's CUDA device is the emulated one (HEARTH_CUDA=EMU: kernels/cuda/emu),
// which runs the CUDA kernels on the CPU; such a build says so wherever it says what it is.
bool cuda_emulated();
// "hearth-frontend 0.1.0 (commit 1a2b3c4)": what `--version` prints; an emulated build adds
// "[CUDA emulated on the CPU, not a GPU build]".
std::string version_line(std::string_view program);

}  // namespace hearth
