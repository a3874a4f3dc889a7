// Tests that force each CPU instruction-set path in turn (kernels/cpu/isa.h).
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

namespace hearth::testing {

// Every path this machine has, narrowest first (the scalar path always).
inline std::vector<kernels::cpu::CpuIsa> available_cpu_paths() {
  using kernels::cpu::CpuIsa;
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(kernels::cpu::cpu_isa_detected())) out.push_back(isa);
  }
  return out;
}

// "scalar avx2 avx512": the paths available_cpu_paths() gives on this machine.
inline std::string cpu_paths_covered() {
  std::string out;
  for (kernels::cpu::CpuIsa isa : available_cpu_paths()) {
    if (!out.empty()) out += ' ';
    out += kernels::cpu::cpu_isa_name(isa);
  }
  return out;
}

// Restores the active path when the test ends.
class CpuIsaGuard {
 public:
  CpuIsaGuard() : saved_(kernels::cpu::cpu_isa()) {}
  ~CpuIsaGuard() { kernels::cpu::cpu_isa_force(saved_); }
  CpuIsaGuard(const CpuIsaGuard&) = delete;
  CpuIsaGuard& operator=(const CpuIsaGuard&) = delete;

 private:
  kernels::cpu::CpuIsa saved_;
};

}  // namespace hearth::testing
