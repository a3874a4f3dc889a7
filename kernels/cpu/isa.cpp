#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace hearth::kernels::cpu {
namespace {

// F16C from cpuid leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know it.
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
}

// From cpuid (leaf 7, EDX bit 23): clang before 15 has no "avx512fp16" for
// __builtin_cpu_supports.
bool has_avx512fp16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (d & (1u << 23)) != 0;
}

// cpuid leaf 1's display family and model, as /proc/cpuinfo shows them; empty without it.
std::string family_and_model() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return {};
  unsigned family = (a >> 8) & 0xf, model = (a >> 4) & 0xf;
  if (family == 0xf) family += (a >> 20) & 0xff;
  if (family == 0x6 || family >= 0xf) model |= ((a >> 16) & 0xf) << 4;
  return "family " + std::to_string(family) + ", model " + std::to_string(model);
}

std::string model_name_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "unknown cpu" : line.substr(begin);
  }
  return "unknown cpu";
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

int clamp_prefetch(int bytes) { return bytes < 0 ? 0 : bytes > 65536 ? 65536 : bytes / 64 * 64; }

int parse_prefetch_env() {
  const char* env = std::getenv("HEARTH_CPU_PREFETCH");
  if (env == nullptr || *env == '\0') return -1;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (*end != '\0' || v < 0 || v > 65536) return -1;
  return static_cast<int>(v);
}

std::atomic<int>& prefetch() {
  static std::atomic<int> bytes{[] {
    const int env = parse_prefetch_env();
    return env >= 0 ? clamp_prefetch(env) : kDefaultPrefetchBytes;
  }()};
  return bytes;
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

std::string cpu_model_name() {
  const std::string fm = family_and_model();
  return fm.empty() ? model_name_line() : model_name_line() + " (" + fm + ")";
}

std::string cpu_host_summary() {
  __builtin_cpu_init();
  std::string s = cpu_model_name() + "; path " + std::string(cpu_isa_name(cpu_isa())) + ";";
  const auto flag = [&s](bool has, const char* name) {
    if (has) s += std::string(" ") + name;
  };
  flag(__builtin_cpu_supports("avx2"), "avx2");
  flag(__builtin_cpu_supports("fma"), "fma");
  flag(has_f16c(), "f16c");
  flag(__builtin_cpu_supports("avx512f"), "avx512f");
  flag(__builtin_cpu_supports("avx512bw"), "avx512bw");
  flag(__builtin_cpu_supports("avx512vl"), "avx512vl");
  flag(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  flag(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  flag(has_avx512fp16(), "avx512fp16");
  return s;
}

CpuIsa cpu_isa_detected() {
  static const CpuIsa best = detect();
  return best;
}

CpuIsa cpu_isa() { return static_cast<CpuIsa>(current().load(std::memory_order_relaxed)); }

int weight_prefetch_bytes() { return prefetch().load(std::memory_order_relaxed); }

void set_weight_prefetch_bytes(int bytes) { prefetch().store(clamp_prefetch(bytes), std::memory_order_relaxed); }

int weight_prefetch_from_env() { return parse_prefetch_env(); }

bool cpu_isa_force(CpuIsa isa) {
  if (static_cast<int>(isa) > static_cast<int>(cpu_isa_detected())) return false;
  current().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace hearth::kernels::cpu
