// The emulated cuBLASLt: D = alpha * op(A) op(B) + beta * C in column-major layouts, A and
// B fp16 or bf16, C and D float, accumulated in float in column order on the stream's
// host thread. One "algorithm" serves every shape it takes; a shape or type it does not
// take gets no heuristic result, as cuBLASLt answers for one it has no kernel for.
#include <cstring>
#include <memory>

#include "common/half.h"
#include "cublasLt.h"
#include "kernels/cuda/emu/internal.h"

struct cublasLtContext {
  int device = 0;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  size_t workspace = 0;
};

namespace {

bool is16(cudaDataType_t t) { return t == CUDA_R_16F || t == CUDA_R_16BF; }

float element(const cublasLtMatrixLayoutOpaque_t& l, const void* base, uint64_t r, uint64_t c) {
  const uint64_t i = r + c * static_cast<uint64_t>(l.ld);
  switch (l.type) {
    case CUDA_R_16F: return hearth::fp16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_16BF: return hearth::bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
  }
  return 0.0f;
}

// The product's m, n, k when the operands fit together, else false.
bool shape(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
           const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c, uint64_t& m, uint64_t& n,
           uint64_t& k) {
  m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  return kb == k && c.rows == m && c.cols == n && a.ld >= static_cast<int64_t>(a.rows) &&
         b.ld >= static_cast<int64_t>(b.rows) && c.ld >= static_cast<int64_t>(c.rows);
}

bool supported(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
               const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c) {
  uint64_t m = 0, n = 0, k = 0;
  return d.compute == CUBLAS_COMPUTE_32F && d.scale == CUDA_R_32F && is16(a.type) && a.type == b.type &&
         c.type == CUDA_R_32F && shape(d, a, b, c, m, n, k);
}

// The library's opaque objects: made into `*out`, or refused for a null `out`.
template <typename T>
cublasStatus_t make(T** out, T value) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = new T(value);
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t destroy(T* p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  return make(handle, cublasLtContext{hearth::emu::current_device()});
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { return destroy(handle); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  return make(desc, cublasLtMatmulDescOpaque_t{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N});
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return destroy(desc); }

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  if (desc == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
      cublasOperation_t op;
      std::memcpy(&op, buf, sizeof op);
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) = op;
      return CUBLAS_STATUS_SUCCESS;
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
  return make(layout, cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld});
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { return destroy(layout); }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return make(pref, cublasLtMatmulPreferenceOpaque_t{});
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { return destroy(pref); }

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (pref == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || bytes != sizeof(size_t)) return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memcpy(&pref->workspace, buf, sizeof(size_t));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  if (handle == nullptr || desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      pref == nullptr || requested < 1 || results == nullptr || found == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *found = 0;
  if (!supported(*desc, *a, *b, *c) || !supported(*desc, *a, *b, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = {};
  results[0].algo.data[0] = 0x68656d75;  // "hemu": the one algorithm
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void*, size_t,
                              cudaStream_t stream) {
  if (handle == nullptr || desc == nullptr || alpha == nullptr || beta == nullptr || a == nullptr || b == nullptr ||
      d == nullptr || a_layout == nullptr || b_layout == nullptr || c_layout == nullptr || d_layout == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (algo != nullptr && algo->data[0] != 0x68656d75) return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(*desc, *a_layout, *b_layout, *c_layout) || !supported(*desc, *a_layout, *b_layout, *d_layout)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  float al = 0, be = 0;
  std::memcpy(&al, alpha, sizeof al);
  std::memcpy(&be, beta, sizeof be);
  // The descriptors may be destroyed before the stream runs the product: copied here.
  const cublasLtMatmulDescOpaque_t op = *desc;
  const cublasLtMatrixLayoutOpaque_t la = *a_layout, lb = *b_layout, lc = *c_layout, ld = *d_layout;
  const cudaError_t e = hearth::emu::enqueue(stream, [=] {
    uint64_t m = 0, n = 0, k = 0;
    shape(op, la, lb, lc, m, n, k);
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (uint64_t l = 0; l < k; ++l) {
          const float x = op.trans_a == CUBLAS_OP_N ? element(la, a, i, l) : element(la, a, l, i);
          const float y = op.trans_b == CUBLAS_OP_N ? element(lb, b, l, j) : element(lb, b, j, l);
          sum += x * y;
        }
        float out = al * sum;
        if (be != 0.0f && c != nullptr) out += be * element(lc, c, i, j);
        static_cast<float*>(d)[i + j * static_cast<uint64_t>(ld.ld)] = out;
      }
    }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
