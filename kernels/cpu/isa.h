// Which instruction-set path the CPU kernels take, chosen at run time from cpuid.
//
// kAvx512 needs AVX-512 F/BW/VL/VNNI (and F16C, FMA); kAvx2 needs AVX2, FMA and F16C;
// kScalar runs anywhere and is the path the others are tested against. The choice can
// be narrowed with HEARTH_CPU_ISA=scalar|avx2|avx512 or, in tests, cpu_isa_force().
// Thread-safe (the choice is an atomic).
#pragma once

#include <string>
#include <string_view>

namespace hearth::kernels::cpu {

enum class CpuIsa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view cpu_isa_name(CpuIsa isa);

// The best path this CPU supports.
CpuIsa cpu_isa_detected();

// The path in use: the detected one, narrowed by HEARTH_CPU_ISA or cpu_isa_force().
CpuIsa cpu_isa();

// Uses `isa` from now on; returns false (and changes nothing) when the CPU lacks it.
bool cpu_isa_force(CpuIsa isa);

// /proc/cpuinfo's "model name" ("unknown cpu" when there is none) and cpuid's family and
// model, e.g. "AMD EPYC (family 25, model 17)": virtual machines often name only the
// vendor's line, which a Zen 4 and a Zen 5 host share, and the kernels' best settings
// differ between them (it is part of the tuning cache's key, engine/cpu/cpu_tuning.h).
std::string cpu_model_name();
// What benchmarks print beside their figures: the model name, the path in use, and the
// instruction-set extensions the kernels care about, e.g. "AMD EPYC (family 25, model
// 17); path avx512; avx2 fma f16c avx512f avx512bw avx512vl avx512vnni avx512bf16".
std::string cpu_host_summary();

// How far ahead of use (bytes) the matmul kernels prefetch a decode step's weight stream
// in software; 0 leaves it to the hardware prefetchers. Which distance is fastest depends
// on the host (hardware prefetchers, page size, memory latency), so the engine measures
// the candidates at start (engine/cpu/cpu_tuning.h) and sets it. HEARTH_CPU_PREFETCH=<bytes>
// fixes it for the process: the engine then skips its measurement.
inline constexpr int kDefaultPrefetchBytes = 8192;
int weight_prefetch_bytes();
// Sets the distance (clamped to [0, 65536], rounded down to whole cache lines).
void set_weight_prefetch_bytes(int bytes);
// The HEARTH_CPU_PREFETCH value, or -1 when it is unset or not a byte count in
// [0, 65536] (the engine refuses such a value: engine/cpu/cpu_tuning.h).
int weight_prefetch_from_env();

}  // namespace hearth::kernels::cpu
