#include "quant/gptq.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "common/half.h"
#include "engine/cpu/thread_pool.h"
#include "kernels/cpu/isa.h"

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

// The vector loops of the factorisations and updates, built three times (AVX-512, AVX2
// with FMA, the baseline) and chosen per call by the kernels' instruction-set choice
// (kernels/cpu/isa.h, so HEARTH_CPU_ISA narrows it too). Plain target attributes, not
// ifunc-based clones, which crash under ThreadSanitizer. The reductions may be
// reordered (OpenMP simd), so results can differ in the last bits between those paths,
// never between thread counts.
#define HEARTH_GPTQ_LOOPS(SUFFIX, TARGET)                                                 \
  TARGET double dot_##SUFFIX(const double* a, const double* b, int64_t n) {              \
    double s = 0.0;                                                                      \
    _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < n; ++i) s += a[i] * b[i]; \
    return s;                                                                            \
  }                                                                                      \
  TARGET void sub_scaled_##SUFFIX(float* y, double a, const double* x, int64_t n) {      \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) y[i] -= static_cast<float>(a * x[i]); \
  }                                                                                      \
  TARGET void add_scaled_##SUFFIX(float* acc, float a, const float* x, int64_t n) {      \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) acc[i] += a * x[i];              \
  }                                                                                      \
  TARGET void add_to_double_##SUFFIX(double* y, const float* x, int64_t n) {             \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) y[i] += static_cast<double>(x[i]); \
  }

HEARTH_GPTQ_LOOPS(avx512, __attribute__((target("avx512f,avx2,fma"))))
HEARTH_GPTQ_LOOPS(avx2, __attribute__((target("avx2,fma"))))
HEARTH_GPTQ_LOOPS(base, )
#undef HEARTH_GPTQ_LOOPS

#define HEARTH_GPTQ_DISPATCH(NAME, ...)                                           \
  switch (kernels::cpu::cpu_isa()) {                                             \
    case kernels::cpu::CpuIsa::kAvx512: return NAME##_avx512(__VA_ARGS__);      \
    case kernels::cpu::CpuIsa::kAvx2: return NAME##_avx2(__VA_ARGS__);          \
    default: return NAME##_base(__VA_ARGS__);                                    \
  }

double dot(const double* a, const double* b, int64_t n) { HEARTH_GPTQ_DISPATCH(dot, a, b, n) }
// y[i] -= a * x[i] (float y, double x: GPTQ's weight updates).
void sub_scaled(float* y, double a, const double* x, int64_t n) { HEARTH_GPTQ_DISPATCH(sub_scaled, y, a, x, n) }
// acc[i] += a * x[i] over floats (the Hessian's token blocks).
void add_scaled(float* acc, float a, const float* x, int64_t n) { HEARTH_GPTQ_DISPATCH(add_scaled, acc, a, x, n) }
void add_to_double(double* y, const float* x, int64_t n) { HEARTH_GPTQ_DISPATCH(add_to_double, y, x, n) }
#undef HEARTH_GPTQ_DISPATCH

// Runs fn(i) for i in [0, n) where item i costs about i: interleaved over the tasks so
// that each gets a similar share.
template <typename Fn>
void split_triangle(ThreadPool* pool, int64_t n, int64_t work, Fn&& fn) {
  if (pool == nullptr || !pool->worth_splitting(work) || n < 2) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const int64_t tasks = std::min<int64_t>(n, pool->size() * 4);
  pool->parallel_for(tasks, [&](int64_t t) {
    for (int64_t i = t; i < n; i += tasks) fn(i);
  });
}

// In-place lower Cholesky factor of a (n x n, row-major, symmetric positive definite):
// a = L L^T, L in the lower triangle, read from the lower triangle only (the upper is
// left as it was). Blocks of 64 columns: each row below a block reads its prefix once
// for the block's 64 entries, so the factorisation streams memory n / 64 times instead
// of n. False when a pivot is not positive.
bool cholesky_lower(std::vector<double>& a, int64_t n, ThreadPool* pool) {
  constexpr int64_t kBlock = 64;
  auto row = [&](int64_t i) { return &a[static_cast<size_t>(i * n)]; };
  for (int64_t jb = 0; jb < n; jb += kBlock) {
    const int64_t je = std::min(n, jb + kBlock);
    for (int64_t j = jb; j < je; ++j) {  // the block's own rows
      double* rj = row(j);
      for (int64_t k = jb; k < j; ++k) rj[k] = (rj[k] - dot(rj, row(k), k)) / row(k)[k];
      const double d = rj[j] - dot(rj, rj, j);
      if (!(d > 0.0)) return false;
      rj[j] = std::sqrt(d);
    }
    split(pool, n - je, (je - jb) * je, [&](int64_t b, int64_t e) {
      for (int64_t i = je + b; i < je + e; ++i) {
        double* ri = row(i);
        for (int64_t j = jb; j < je; ++j) ri[j] = (ri[j] - dot(ri, row(j), j)) / row(j)[j];
      }
    });
  }
  return true;
}

// The upper Cholesky factor U of H^-1 (H^-1 = U^T U) from H, n x n row-major, lower
// triangle zero. With J the reversal, J H J = L L^T gives H = R R^T for the upper
// R = J L J, so H^-1 = (R^-1)^T R^-1 and U = R^-1 = J L^-1 J: one factorisation and
// one triangular inverse. Two n x n buffers at most: h's, which is reused, and one more.
Result<std::vector<double>> inverse_cholesky_upper(std::vector<double> h, int64_t n, ThreadPool* pool) {
  std::reverse(h.begin(), h.end());  // J H J: entry (i, j) <-> (n-1-i, n-1-j)
  if (!cholesky_lower(h, n, pool)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the calibration Hessian is not positive definite even when dampened: raise --damp or use "
                      "more calibration samples");
  }
  // Linv = L^-1 by forward substitution on each e_j, kept transposed (row j of lt is
  // column j of Linv, entries j..n-1), 64 columns at a time so that each row of L is
  // read once per block.
  constexpr int64_t kBlock = 64;
  std::vector<double> lt(static_cast<size_t>(n * n), 0.0);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  split_triangle(pool, blocks, n * n * n / 6, [&](int64_t bb) {
    const int64_t c0 = (blocks - 1 - bb) * kBlock, c1 = std::min(n, c0 + kBlock);  // longest first
    for (int64_t j = c0; j < c1; ++j) lt[static_cast<size_t>(j * n + j)] = 1.0 / h[static_cast<size_t>(j * n + j)];
    for (int64_t i = c0 + 1; i < n; ++i) {
      const double* li = &h[static_cast<size_t>(i * n)];
      for (int64_t j = c0; j < std::min(c1, i); ++j) {
        double* x = &lt[static_cast<size_t>(j * n)];
        x[i] = -dot(li + j, x + j, i - j) / li[i];
      }
    }
  });
  // U[a][b] = Linv[n-1-a][n-1-b] = lt[(n-1-b) n + (n-1-a)] for a <= b, into h's buffer.
  for (int64_t a = 0; a < n; ++a) {
    double* ua = &h[static_cast<size_t>(a * n)];
    std::fill(ua, ua + a, 0.0);
    for (int64_t b = a; b < n; ++b) ua[b] = lt[static_cast<size_t>((n - 1 - b) * n + (n - 1 - a))];
  }
  return h;
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
  // Lower triangle of X^T X, 16 tokens at a time: row i gains sum_t x[t, i] x[t, 0..i],
  // summed in float over the block and added to the double row once per block.
  constexpr int64_t kBlock = 16;
  const int threads = pool != nullptr ? pool->size() : 1;
  std::vector<std::vector<float>> scratch(static_cast<size_t>(threads) * 4, std::vector<float>(static_cast<size_t>(cols_)));
  std::atomic<int> next_scratch{0};
  for (int64_t t0 = 0; t0 < n; t0 += kBlock) {
    const int64_t tb = std::min(kBlock, n - t0);
    const float* xb = x + t0 * cols_;
    next_scratch = 0;
    const int64_t tasks = pool != nullptr && pool->worth_splitting(tb * cols_ * cols_ / 2) ? std::min<int64_t>(cols_, threads * 4) : 1;
    auto task = [&](int64_t t) {
      float* acc = scratch[static_cast<size_t>(next_scratch++)].data();
      for (int64_t i = t; i < cols_; i += tasks) {
        std::fill(acc, acc + i + 1, 0.0f);
        for (int64_t k = 0; k < tb; ++k) {
          const float xi = xb[k * cols_ + i];
          if (xi != 0.0f) add_scaled(acc, xi, xb + k * cols_, i + 1);
        }
        add_to_double(&sum_[static_cast<size_t>(i * cols_)], acc, i + 1);
      }
    };
    if (tasks == 1) {
      task(0);
    } else {
      pool->parallel_for(tasks, task);
    }
  }
  n_ += n;
}

std::vector<double> Hessian::matrix() const {
  Hessian copy = *this;
  return copy.take();
}

std::vector<double> Hessian::take() {
  const double f = n_ > 0 ? 2.0 / static_cast<double>(n_) : 0.0;
  for (int64_t i = 0; i < cols_; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const double v = sum_[static_cast<size_t>(i * cols_ + j)] * f;
      sum_[static_cast<size_t>(i * cols_ + j)] = v;
      sum_[static_cast<size_t>(j * cols_ + i)] = v;
    }
  }
  n_ = 0;
  return std::move(sum_);
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

Result<GptqFactor> gptq_factor(std::vector<double> h, int64_t cols, bool act_order, double damp, ThreadPool* pool) {
  if (cols <= 0 || static_cast<int64_t>(h.size()) != cols * cols) {
    return make_error(ErrorCode::kInvalidArgument, "a Hessian of {} values for {} columns", h.size(), cols);
  }
  if (!(damp > 0.0) || damp > 1.0) return make_error(ErrorCode::kInvalidArgument, "--damp must be in (0, 1], not {}", damp);
  GptqFactor f;
  f.cols = cols;
  f.dead.resize(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) f.dead[static_cast<size_t>(c)] = h[static_cast<size_t>(c * cols + c)] == 0.0;
  // Column order: act-order sorts by decreasing H[c, c] (stable, as argsort on the
  // reference's tensors is for distinct values).
  f.perm.resize(static_cast<size_t>(cols));
  std::iota(f.perm.begin(), f.perm.end(), 0);
  if (act_order) {
    std::stable_sort(f.perm.begin(), f.perm.end(), [&](int64_t a, int64_t b) {
      return h[static_cast<size_t>(a * cols + a)] > h[static_cast<size_t>(b * cols + b)];
    });
    std::vector<double> p(h.size());
    for (int64_t i = 0; i < cols; ++i) {
      const int64_t pi = f.perm[static_cast<size_t>(i)];
      for (int64_t j = 0; j < cols; ++j) {
        p[static_cast<size_t>(i * cols + j)] = h[static_cast<size_t>(pi * cols + f.perm[static_cast<size_t>(j)])];
      }
    }
    h = std::move(p);
  }
  // Columns no input reached get a unit diagonal, as the reference does (their weights
  // are zeroed by gptq_quantize); then the dampening.
  double mean_diag = 0.0;
  for (int64_t i = 0; i < cols; ++i) {
    double& d = h[static_cast<size_t>(i * cols + i)];
    if (d == 0.0) d = 1.0;
    mean_diag += d;
  }
  mean_diag /= static_cast<double>(cols);
  for (int64_t i = 0; i < cols; ++i) h[static_cast<size_t>(i * cols + i)] += damp * mean_diag;
  HEARTH_ASSIGN_OR_RETURN(f.u, inverse_cholesky_upper(std::move(h), cols, pool));
  return f;
}

Result<QuantizedMatrix> gptq_quantize(std::span<const float> w_in, int64_t rows, int64_t cols, const GptqFactor& f,
                                      const QuantScheme& scheme, ThreadPool* pool) {
  HEARTH_RETURN_IF_ERROR(check_shapes(w_in, rows, cols, scheme));
  if (f.cols != cols) {
    return make_error(ErrorCode::kInvalidArgument, "a Hessian factor of {} columns for a matrix of {}", f.cols, cols);
  }
  const bool act_order = !std::is_sorted(f.perm.begin(), f.perm.end());
  if (act_order && !scheme.act_order) {
    return make_error(ErrorCode::kInternal, "a factor made for act-order used without it");
  }
  const int64_t gs = scheme.group_size;
  const int32_t maxq = (1 << scheme.bits) - 1;
  const std::vector<int64_t>& perm = f.perm;
  const std::vector<double>& u = f.u;

  // W in the factor's column order, dead columns zeroed.
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      const int64_t c = perm[static_cast<size_t>(i)];
      w[static_cast<size_t>(r * cols + i)] = f.dead[static_cast<size_t>(c)] ? 0.0f : w_in[static_cast<size_t>(r * cols + c)];
    }
  }

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
  constexpr int64_t kChunk = 256;  // columns of the trailing update per task: the block's rows of U stay in L2
  std::vector<float> err(static_cast<size_t>(rows * kBlock));
  std::vector<Grid> current(static_cast<size_t>(rows));  // each row's grid for the group being quantized
  for (int64_t i1 = 0; i1 < cols; i1 += kBlock) {
    const int64_t i2 = std::min(cols, i1 + kBlock), count = i2 - i1;
    // The block's columns, one row at a time: quantize, and spread each column's error
    // over the block's later columns.
    split(pool, rows, count * count, [&](int64_t rb, int64_t re) {
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
          const double e = (wr[i] - dequantize_value(q, grid)) / d;
          er[i - i1] = static_cast<float>(e);
          sub_scaled(wr + i + 1, e, &u[static_cast<size_t>(i * cols + i + 1)], i2 - i - 1);
        }
      }
    });
    // The block's errors onto every later column: W[:, i2:] -= Err U[i1:i2, i2:], in
    // column chunks so that U's rows are read from memory once.
    const int64_t tail = cols - i2;
    if (tail == 0) continue;
    const int64_t chunks = (tail + kChunk - 1) / kChunk;
    split(pool, chunks, rows * count * kChunk, [&](int64_t cb, int64_t ce) {
      for (int64_t ch = cb; ch < ce; ++ch) {
        const int64_t j0 = i2 + ch * kChunk, j1 = std::min(cols, j0 + kChunk);
        for (int64_t r = 0; r < rows; ++r) {
          float* wr = &w[static_cast<size_t>(r * cols)];
          const float* er = &err[static_cast<size_t>(r * kBlock)];
          for (int64_t k = 0; k < count; ++k) {
            if (er[k] != 0.0f) sub_scaled(wr + j0, er[k], &u[static_cast<size_t>((i1 + k) * cols + j0)], j1 - j0);
          }
        }
      }
    });
  }
  return m;
}

Result<QuantizedMatrix> gptq_quantize(std::span<const float> w, int64_t rows, int64_t cols, std::span<const double> h,
                                      const QuantScheme& scheme, double damp, ThreadPool* pool) {
  HEARTH_RETURN_IF_ERROR(check_shapes(w, rows, cols, scheme));
  HEARTH_ASSIGN_OR_RETURN(GptqFactor f,
                          gptq_factor(std::vector<double>(h.begin(), h.end()), cols, scheme.act_order, damp, pool));
  return gptq_quantize(w, rows, cols, f, scheme, pool);
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
