#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace hearth::kernels::cpu {
namespace {

// F16C from cpuid leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know it.
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
}

CpuIsa detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return avx512 ? CpuIsa::kAvx512 : avx2 ? CpuIsa::kAvx2 : CpuIsa::kScalar;
}

CpuIsa initial() {
  const CpuIsa best = detect();
  const char* env = std::getenv("HEARTH_CPU_ISA");
  if (env == nullptr) return best;
  CpuIsa wanted = best;
  if (std::strcmp(env, "scalar") == 0) wanted = CpuIsa::kScalar;
  if (std::strcmp(env, "avx2") == 0) wanted = CpuIsa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) wanted = CpuIsa::kAvx512;
  return static_cast<int>(wanted) <= static_cast<int>(best) ? wanted : best;
}

std::atomic<int>& current() {
  static std::atomic<int> isa{static_cast<int>(initial())};
  return isa;
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

CpuIsa cpu_isa_detected() {
  static const CpuIsa best = detect();
  return best;
}

CpuIsa cpu_isa() { return static_cast<CpuIsa>(current().load(std::memory_order_relaxed)); }

bool cpu_isa_force(CpuIsa isa) {
  if (static_cast<int>(isa) > static_cast<int>(cpu_isa_detected())) return false;
  current().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace hearth::kernels::cpu
