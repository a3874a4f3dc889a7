#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/half.h"
#include "engine/thread_pool.h"

namespace hearth::quant {
namespace {

// Runs fn(begin, end) over [0, n) in about as many parts as the pool has threads.
template <typename Fn>
void split(ThreadPool* pool, int64_t n, int64_t work_per_item, Fn&& fn) {
  if (pool == nullptr || !pool->worth_splitting(n * work_per_item) || n < 2) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t parts = std::min<int64_t>(n, pool->size() * 4);
  pool->parallel_for(parts, [&](int64_t p) { fn(n * p / parts, n * (p + 1) / parts); });
}

// One group's grid on one row.
struct Grid {
  float scale = 1.0f;
  int32_t zero = 0;
};

Grid find_grid(const float* x, int64_t n, int64_t stride, const QuantScheme& s) {
  const int32_t maxq = (1 << s.bits) - 1;
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  if (s.sym) {
    hi = std::max(-lo, hi);
    lo = -hi;
  }
  if (lo == 0.0f && hi == 0.0f) {
    lo = -1.0f;
    hi = 1.0f;
  }
  Grid g;
  g.scale = fp16_to_f32(f32_to_fp16((hi - lo) / static_cast<float>(maxq)));
  if (!(g.scale > 0.0f)) g.scale = fp16_to_f32(1);  // below fp16's range: its smallest step
  g.zero = s.sym ? (maxq + 1) / 2 : std::clamp(static_cast<int32_t>(std::nearbyint(-lo / g.scale)), 0, maxq);
  return g;
}

int32_t quantize_value(float x, const Grid& g, int32_t maxq) {
  const float q = std::nearbyint(x / g.scale) + static_cast<float>(g.zero);
  return static_cast<int32_t>(std::clamp(q, 0.0f, static_cast<float>(maxq)));
}

float dequantize_value(int32_t q, const Grid& g) { return g.scale * static_cast<float>(q - g.zero); }

QuantizedMatrix empty_result(int64_t rows, int64_t cols, const QuantScheme& scheme) {
  QuantizedMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.scheme = scheme;
  m.q.assign(static_cast<size_t>(rows * cols), 0);
  m.scales.assign(static_cast<size_t>(m.groups() * rows), 0);
  m.zeros.assign(static_cast<size_t>(m.groups() * rows), 0);
  m.g_idx.resize(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) m.g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(c / scheme.group_size);
  return m;
}

void store_grid(QuantizedMatrix& m, int64_t group, int64_t r, const Grid& g) {
  m.scales[static_cast<size_t>(group * m.rows + r)] = f32_to_fp16(g.scale);
  m.zeros[static_cast<size_t>(group * m.rows + r)] = g.zero;
}

Status check_shapes(std::span<const float> w, int64_t rows, int64_t cols, const QuantScheme& scheme) {
  HEARTH_RETURN_IF_ERROR(scheme_check(scheme));
  if (rows <= 0 || cols <= 0 || static_cast<int64_t>(w.size()) != rows * cols) {
    return make_error(ErrorCode::kInvalidArgument, "a [{}, {}] matrix cannot hold {} values", rows, cols, w.size());
  }
  if (cols % scheme.group_size != 0) {
    return make_error(ErrorCode::kInvalidArgument, "groups of {} do not divide the matrix's {} columns",
                      scheme.group_size, cols);
  }
  return Status::ok();
}

// In-place lower Cholesky factor of a (n x n, row-major, symmetric positive definite):
// a = L L^T, L in the lower triangle (the upper is left as it was). False when a pivot
// is not positive.
bool cholesky_lower(std::vector<double>& a, int64_t n, ThreadPool* pool) {
  for (int64_t j = 0; j < n; ++j) {
    double* rj = &a[static_cast<size_t>(j * n)];
    double d = rj[j];
    for (int64_t k = 0; k < j; ++k) d -= rj[k] * rj[k];
    if (!(d > 0.0)) return false;
    const double ljj = std::sqrt(d);
    rj[j] = ljj;
    split(pool, n - j - 1, j + 1, [&](int64_t b, int64_t e) {
      for (int64_t i = j + 1 + b; i < j + 1 + e; ++i) {
        double* ri = &a[static_cast<size_t>(i * n)];
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        int64_t k = 0;
        for (; k + 4 <= j; k += 4) {
          s0 += ri[k] * rj[k];
          s1 += ri[k + 1] * rj[k + 1];
          s2 += ri[k + 2] * rj[k + 2];
          s3 += ri[k + 3] * rj[k + 3];
        }
        for (; k < j; ++k) s0 += ri[k] * rj[k];
        ri[j] = (ri[j] - ((s0 + s1) + (s2 + s3))) / ljj;
      }
    });
  }
  return true;
}

// The upper Cholesky factor U of H^-1 (H^-1 = U^T U), from H: the matrix GPTQ's column
// updates read. n x n, row-major, lower triangle zero.
Result<std::vector<double>> inverse_cholesky_upper(std::vector<double> h, int64_t n, ThreadPool* pool) {
  if (!cholesky_lower(h, n, pool)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the calibration Hessian is not positive definite even when dampened: raise --damp or use "
                      "more calibration samples");
  }
  // Linv = L^-1 (lower), by forward substitution one column of the identity at a time:
  // column j's entries i >= j. Stored transposed (row j of lt = column j of Linv) so
  // each solve writes a contiguous row.
  std::vector<double> lt(static_cast<size_t>(n * n), 0.0);
  split(pool, n, n * n / 2, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      double* x = &lt[static_cast<size_t>(j * n)];
      for (int64_t i = j; i < n; ++i) {
        const double* li = &h[static_cast<size_t>(i * n)];
        double s = i == j ? 1.0 : 0.0;
        for (int64_t k = j; k < i; ++k) s -= li[k] * x[k];
        x[i] = s / li[i];
      }
    }
  });
  // H^-1 = Linv^T Linv: entry (a, b) = sum_k Linv[k, a] Linv[k, b] = dot(lt[a], lt[b])
  // over k >= max(a, b).
  std::vector<double> inv(static_cast<size_t>(n * n), 0.0);
  split(pool, n, n * n / 2, [&](int64_t b0, int64_t e0) {
    for (int64_t a = b0; a < e0; ++a) {
      const double* ra = &lt[static_cast<size_t>(a * n)];
      for (int64_t b = 0; b <= a; ++b) {
        const double* rb = &lt[static_cast<size_t>(b * n)];
        double s = 0.0;
        for (int64_t k = a; k < n; ++k) s += ra[k] * rb[k];
        inv[static_cast<size_t>(a * n + b)] = s;
      }
    }
  });
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = a + 1; b < n; ++b) inv[static_cast<size_t>(a * n + b)] = inv[static_cast<size_t>(b * n + a)];
  }
  if (!cholesky_lower(inv, n, pool)) {
    return make_error(ErrorCode::kInvalidArgument, "the inverse calibration Hessian is not positive definite: raise --damp");
  }
  // U = L'^T where inv = L' L'^T.
  std::vector<double> u(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) u[static_cast<size_t>(j * n + i)] = inv[static_cast<size_t>(i * n + j)];
  }
  return u;
}

}  // namespace

std::string scheme_name(const QuantScheme& s) {
  std::string name = std::to_string(s.bits) + "-bit g" + std::to_string(s.group_size) + (s.sym ? " sym" : " asym");
  if (s.act_order) name += " act-order";
  if (s.static_groups) name += " static-groups";
  return name;
}

Status scheme_check(const QuantScheme& s) {
  if (s.bits != 4 && s.bits != 8) return make_error(ErrorCode::kInvalidArgument, "--bits must be 4 or 8, not {}", s.bits);
  if (s.group_size <= 0 || s.group_size % 32 != 0 || s.group_size > 4096) {
    return make_error(ErrorCode::kInvalidArgument, "--group-size must be a multiple of 32 up to 4096, not {}",
                      s.group_size);
  }
  if (s.static_groups && !s.act_order) {
    return make_error(ErrorCode::kInvalidArgument, "--static-groups only applies with --act-order");
  }
  return Status::ok();
}

float QuantizedMatrix::value(int64_t r, int64_t c) const {
  const int64_t g = g_idx[static_cast<size_t>(c)];
  const auto i = static_cast<size_t>(g * rows + r);
  return fp16_to_f32(scales[i]) * static_cast<float>(q[static_cast<size_t>(r * cols + c)] - zeros[i]);
}

std::vector<float> QuantizedMatrix::dequantize() const {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = value(r, c);
  }
  return out;
}

bool QuantizedMatrix::groups_in_order() const {
  for (int64_t c = 0; c < cols; ++c) {
    if (g_idx[static_cast<size_t>(c)] != c / scheme.group_size) return false;
  }
  return true;
}

void Hessian::add(const float* x, int64_t n, ThreadPool* pool) {
  // Lower triangle of X^T X; matrix() mirrors it.
  split(pool, cols_, n * cols_ / 2, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double* row = &sum_[static_cast<size_t>(i * cols_)];
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * cols_;
        const double xi = xt[i];
        if (xi == 0.0) continue;
        for (int64_t j = 0; j <= i; ++j) row[j] += xi * static_cast<double>(xt[j]);
      }
    }
  });
  n_ += n;
}

std::vector<double> Hessian::matrix() const {
  std::vector<double> h(sum_.size());
  const double f = n_ > 0 ? 2.0 / static_cast<double>(n_) : 0.0;
  for (int64_t i = 0; i < cols_; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const double v = sum_[static_cast<size_t>(i * cols_ + j)] * f;
      h[static_cast<size_t>(i * cols_ + j)] = v;
      h[static_cast<size_t>(j * cols_ + i)] = v;
    }
  }
  return h;
}

Result<QuantizedMatrix> rtn_quantize(std::span<const float> w, int64_t rows, int64_t cols, const QuantScheme& scheme) {
  HEARTH_RETURN_IF_ERROR(check_shapes(w, rows, cols, scheme));
  if (scheme.act_order) return make_error(ErrorCode::kInvalidArgument, "--act-order needs --method gptq");
  QuantizedMatrix m = empty_result(rows, cols, scheme);
  const int32_t maxq = (1 << scheme.bits) - 1;
  const int64_t gs = scheme.group_size;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < m.groups(); ++g) {
      const float* x = w.data() + r * cols + g * gs;
      const Grid grid = find_grid(x, gs, 1, scheme);
      store_grid(m, g, r, grid);
      for (int64_t i = 0; i < gs; ++i) {
        m.q[static_cast<size_t>(r * cols + g * gs + i)] = static_cast<uint8_t>(quantize_value(x[i], grid, maxq));
      }
    }
  }
  return m;
}

Result<QuantizedMatrix> gptq_quantize(std::span<const float> w_in, int64_t rows, int64_t cols,
                                      std::span<const double> h_in, const QuantScheme& scheme, double damp,
                                      ThreadPool* pool) {
  HEARTH_RETURN_IF_ERROR(check_shapes(w_in, rows, cols, scheme));
  if (static_cast<int64_t>(h_in.size()) != cols * cols) {
    return make_error(ErrorCode::kInvalidArgument, "a Hessian of {} values for {} columns", h_in.size(), cols);
  }
  if (!(damp > 0.0) || damp > 1.0) return make_error(ErrorCode::kInvalidArgument, "--damp must be in (0, 1], not {}", damp);
  const int64_t gs = scheme.group_size;
  const int32_t maxq = (1 << scheme.bits) - 1;

  // Column order: act-order sorts by decreasing H[c, c] (stable, as argsort on the
  // reference's tensors is for distinct values).
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (scheme.act_order) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return h_in[static_cast<size_t>(a * cols + a)] > h_in[static_cast<size_t>(b * cols + b)];
    });
  }
  // W and H in that order; columns no input ever reached (H[c, c] == 0) are zeroed and
  // given a unit diagonal, as the reference does.
  std::vector<float> w(static_cast<size_t>(rows * cols));
  std::vector<double> h(static_cast<size_t>(cols * cols));
  for (int64_t i = 0; i < cols; ++i) {
    const int64_t pi = perm[static_cast<size_t>(i)];
    for (int64_t j = 0; j < cols; ++j) h[static_cast<size_t>(i * cols + j)] = h_in[static_cast<size_t>(pi * cols + perm[static_cast<size_t>(j)])];
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) w[static_cast<size_t>(r * cols + i)] = w_in[static_cast<size_t>(r * cols + perm[static_cast<size_t>(i)])];
  }
  double mean_diag = 0.0;
  for (int64_t i = 0; i < cols; ++i) {
    double& d = h[static_cast<size_t>(i * cols + i)];
    if (d == 0.0) {
      d = 1.0;
      for (int64_t r = 0; r < rows; ++r) w[static_cast<size_t>(r * cols + i)] = 0.0f;
    }
    mean_diag += d;
  }
  mean_diag /= static_cast<double>(cols);
  for (int64_t i = 0; i < cols; ++i) h[static_cast<size_t>(i * cols + i)] += damp * mean_diag;
  HEARTH_ASSIGN_OR_RETURN(const std::vector<double> u, inverse_cholesky_upper(std::move(h), cols, pool));

  QuantizedMatrix m = empty_result(rows, cols, scheme);
  // Static groups: each original group's grid from the weights as given.
  std::vector<Grid> fixed;
  if (scheme.static_groups) {
    fixed.resize(static_cast<size_t>(m.groups() * rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < m.groups(); ++g) {
        const Grid grid = find_grid(w_in.data() + r * cols + g * gs, gs, 1, scheme);
        fixed[static_cast<size_t>(g * rows + r)] = grid;
        store_grid(m, g, r, grid);
      }
    }
  } else if (scheme.act_order) {
    for (int64_t i = 0; i < cols; ++i) m.g_idx[static_cast<size_t>(perm[static_cast<size_t>(i)])] = static_cast<int32_t>(i / gs);
  }

  constexpr int64_t kBlock = 128;
  std::vector<float> err(static_cast<size_t>(rows * kBlock));
  std::vector<Grid> current(static_cast<size_t>(rows));  // each row's grid for the group being quantized
  for (int64_t i1 = 0; i1 < cols; i1 += kBlock) {
    const int64_t i2 = std::min(cols, i1 + kBlock), count = i2 - i1;
    split(pool, rows, count * (count + cols), [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        float* wr = &w[static_cast<size_t>(r * cols)];
        float* er = &err[static_cast<size_t>(r * kBlock)];
        for (int64_t i = i1; i < i2; ++i) {
          const int64_t orig = perm[static_cast<size_t>(i)];
          Grid grid;
          if (scheme.static_groups) {
            grid = fixed[static_cast<size_t>((orig / gs) * rows + r)];
          } else {
            if (i % gs == 0) {  // a new group: its grid from the columns as updated so far
              current[static_cast<size_t>(r)] = find_grid(wr + i, gs, 1, scheme);
              store_grid(m, i / gs, r, current[static_cast<size_t>(r)]);
            }
            grid = current[static_cast<size_t>(r)];
          }
          const int32_t q = quantize_value(wr[i], grid, maxq);
          m.q[static_cast<size_t>(r * cols + orig)] = static_cast<uint8_t>(q);
          const double d = u[static_cast<size_t>(i * cols + i)];
          const float e = static_cast<float>((wr[i] - dequantize_value(q, grid)) / d);
          er[i - i1] = e;
          const double* ui = &u[static_cast<size_t>(i * cols)];
          for (int64_t j = i + 1; j < i2; ++j) wr[j] -= static_cast<float>(e * ui[j]);
        }
        // The block's errors onto the columns after it.
        for (int64_t k = 0; k < count; ++k) {
          const double e = er[k];
          if (e == 0.0) continue;
          const double* uk = &u[static_cast<size_t>((i1 + k) * cols)];
          for (int64_t j = i2; j < cols; ++j) wr[j] -= static_cast<float>(e * uk[j]);
        }
      }
    });
  }
  return m;
}

double reconstruction_error(std::span<const float> w, const QuantizedMatrix& m, std::span<const double> h) {
  const int64_t cols = m.cols;
  std::vector<double> d(static_cast<size_t>(cols));
  double total = 0.0;
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) d[static_cast<size_t>(c)] = w[static_cast<size_t>(r * cols + c)] - m.value(r, c);
    for (int64_t a = 0; a < cols; ++a) {
      double s = 0.0;
      for (int64_t b = 0; b < cols; ++b) s += h[static_cast<size_t>(a * cols + b)] * d[static_cast<size_t>(b)];
      total += d[static_cast<size_t>(a)] * s;
    }
  }
  return total;
}

}  // namespace hearth::quant
