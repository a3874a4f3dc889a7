// Warp-level matrix multiply-accumulate on tensor cores. CUDA sources only.
//
// mma_s8_m16n8k32: d += a * b, A 16 x 32 int8 (row-major), B 32 x 8 int8 (column-major),
// D 16 x 8 int32, the fragments spread over the warp's lanes as the PTX ISA's "Matrix
// Fragments for mma.m16n8k32" gives them (groupID = lane / 4, threadID_in_group =
// lane % 4, element i of a register in its byte i, lowest first):
//   a[0]: row groupID,     columns 4 * threadID_in_group + 0..3
//   a[1]: row groupID + 8, the same columns
//   a[2]: row groupID,     16 columns further
//   a[3]: row groupID + 8, 16 columns further
//   b[0]: column groupID, rows 4 * threadID_in_group + 0..3; b[1]: 16 rows further
//   d[0], d[1]: row groupID,     columns 2 * threadID_in_group and the next
//   d[2], d[3]: row groupID + 8, the same columns
//
// mma_f16_m16n8k16: d += a * b, A 16 x 16 f16 (row-major), B 16 x 8 f16 (column-major),
// D 16 x 8 f32 ("Matrix Fragments for mma.m16n8k16 with floating point type"; element i
// of a register in its half i, lowest first):
//   a[0]: row groupID,     columns 2 * threadID_in_group + 0..1
//   a[1]: row groupID + 8, the same columns
//   a[2]: row groupID,     8 columns further
//   a[3]: row groupID + 8, 8 columns further
//   b[0]: column groupID, rows 2 * threadID_in_group + 0..1; b[1]: 8 rows further
//   d: as for mma_s8_m16n8k32
//
// Every lane of the warp calls them together (sm_80 and later; the emulated device
// computes them from the PTX ISA's tables and reports a warp that does not).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::kernels::cuda {

__device__ __forceinline__ void mma_s8_m16n8k32(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
  __trap();  // the build targets sm_80 and later
#elif !defined(__CUDACC__)
  const int32_t c[4] = {d[0], d[1], d[2], d[3]};
  ::hearth::emu::mma_m16n8k32_s8(d, a, b, c);
#endif
}

__device__ __forceinline__ void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
  __trap();
#elif !defined(__CUDACC__)
  const float c[4] = {d[0], d[1], d[2], d[3]};
  ::hearth::emu::mma_m16n8k16_f16(d, a, b, c);
#endif
}

}  // namespace hearth::kernels::cuda
