// The CPU backend (engine/cpu/cpu_backend.cpp): host memory, kernels/cpu ops (or
// kernels/reference for tests), a thread pool of its own.
#pragma once

#include <memory>

#include "engine/core/backend.h"

namespace hearth {

struct CpuBackendOptions {
  bool use_reference = false;  // the scalar reference kernels, one thread (tests and debugging)
  int threads = 0;             // 0: default_thread_count() (HEARTH_THREADS, else every core)
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace hearth
