// Group-wise weight quantization of one matrix: round-to-nearest (RTN) and GPTQ.
//
// A matrix W [rows = out_features, cols = in_features] becomes integer codes of `bits`
// bits with one fp16 scale and one integer zero per (group, row): w[r, c] = scale[g, r] *
// (q[r, c] - zero[g, r]) where g = g_idx[c]. The grid is AutoGPTQ's: over a group's
// values xmin = min(x, 0), xmax = max(x, 0) (symmetric: xmax = max(|xmin|, xmax), xmin =
// -xmax), scale = (xmax - xmin) / maxq rounded to fp16, zero = (maxq + 1) / 2 when
// symmetric, else round(-xmin / scale); q = clamp(round(x / scale) + zero, 0, maxq).
// Rounding is to nearest, ties to even. Scales are rounded to fp16 before any code is
// chosen, so the stored matrix is exactly what was optimised.
//
// GPTQ (Frantar et al., 2022) quantizes the columns one at a time and spreads each
// column's error over the columns not yet quantized, weighted by the inverse Hessian of
// the layer's reconstruction error, H = 2 X^T X / n over the calibration inputs X: the
// Cholesky form of H^-1 (after dampening H's diagonal by `damp` times its mean), lazy
// batches of 128 columns, optional act-order (columns by decreasing H[c, c]) with groups
// taken in that order (g_idx scattered) or fixed in the original order (static groups,
// g_idx[c] = c / group_size). RTN is the same grid without the error feedback.
// Pure functions over caller-owned data; a ThreadPool, when given, splits rows.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace hearth {

class ThreadPool;

namespace quant {

struct QuantScheme {
  int32_t bits = 4;          // 4 or 8
  int32_t group_size = 128;  // columns per group; a divisor of the matrix's columns
  bool sym = true;
  bool act_order = false;     // GPTQ only: quantize columns by decreasing H[c, c]
  bool static_groups = false; // with act_order: groups stay c / group_size
};

// "4-bit g128 sym", "8-bit g32 asym act-order static-groups".
std::string scheme_name(const QuantScheme& scheme);
// kInvalidArgument naming the problem: bits not 4 or 8, a group size that is not a
// positive multiple of 32 up to 4096, static groups without act-order.
Status scheme_check(const QuantScheme& scheme);

struct QuantizedMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  QuantScheme scheme;
  std::vector<uint8_t> q;        // [rows, cols] codes in 0..2^bits - 1
  std::vector<uint16_t> scales;  // [groups, rows] fp16
  std::vector<int32_t> zeros;    // [groups, rows]
  std::vector<int32_t> g_idx;    // [cols] group of each column

  int64_t groups() const { return cols / scheme.group_size; }
  float value(int64_t r, int64_t c) const;
  // Every value, [rows, cols] float.
  std::vector<float> dequantize() const;
  // Whether g_idx[c] == c / group_size for every column (the layout block formats hold).
  bool groups_in_order() const;
};

// The accumulated Hessian of one input of a layer: H = 2 X^T X / n over every row x of
// the calibration inputs seen, in double. Shared by the matrices reading that input
// (q/k/v, gate/up).
class Hessian {
 public:
  explicit Hessian(int64_t cols) : cols_(cols), sum_(static_cast<size_t>(cols * cols), 0.0) {}
  // Adds n rows of x ([n, cols]).
  void add(const float* x, int64_t n, ThreadPool* pool = nullptr);
  int64_t cols() const { return cols_; }
  int64_t samples() const { return n_; }
  // H itself, [cols, cols].
  std::vector<double> matrix() const;
  // The same, made in place: the accumulator is given up (one copy of cols^2 less).
  std::vector<double> take();

 private:
  int64_t cols_;
  int64_t n_ = 0;
  std::vector<double> sum_;  // X^T X
};

// Round-to-nearest. w: [rows, cols]. kInvalidArgument when the scheme is bad, does not
// fit the matrix, or asks for act-order (which needs a Hessian).
Result<QuantizedMatrix> rtn_quantize(std::span<const float> w, int64_t rows, int64_t cols, const QuantScheme& scheme);

// What GPTQ's column updates read, computed once for all the matrices reading one input:
// the column order (act-order sorts by decreasing H[c, c]), the columns no input reached
// (H[c, c] == 0), and the upper Cholesky factor of the dampened H^-1 in that order.
struct GptqFactor {
  int64_t cols = 0;
  std::vector<int64_t> perm;  // position -> column
  std::vector<bool> dead;     // by column
  std::vector<double> u;      // [cols, cols], upper triangle
};

// `h` ([cols, cols]) is consumed. kInvalidArgument on a bad damp or size, or when the
// dampened Hessian is not positive definite. Uses about two h's worth of memory.
Result<GptqFactor> gptq_factor(std::vector<double> h, int64_t cols, bool act_order, double damp,
                               ThreadPool* pool = nullptr);

// GPTQ of w ([rows, cols]) with a factor made for `scheme.act_order`.
Result<QuantizedMatrix> gptq_quantize(std::span<const float> w, int64_t rows, int64_t cols, const GptqFactor& factor,
                                      const QuantScheme& scheme, ThreadPool* pool = nullptr);

// GPTQ against the Hessian h ([cols, cols]): gptq_factor, then gptq_quantize. `damp`: fraction of the mean diagonal
// added to it (0.01 as the reference implementations). kInvalidArgument on a bad
// scheme or shapes and when the dampened Hessian is not positive
// definite (raise damp).
Result<QuantizedMatrix> gptq_quantize(std::span<const float> w, int64_t rows, int64_t cols, std::span<const double> h,
                                      const QuantScheme& scheme, double damp = 0.01, ThreadPool* pool = nullptr);

// The layer's reconstruction error of a quantized matrix: sum over rows of (w - q)^T H
// (w - q), the quantity GPTQ minimises (up to the constant 2 / n inside H).
double reconstruction_error(std::span<const float> w, const QuantizedMatrix& m, std::span<const double> h);

}  // namespace quant
}  // namespace hearth
