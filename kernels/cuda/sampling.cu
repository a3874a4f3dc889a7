// Sampling on the device, as engine/core/sampler.cpp and the driver define it: per row, the
// log-normaliser and the top logprobs of the raw logits, then repetition / presence /
// frequency penalties, temperature, top-k, top-p, min-p and the seeded draw
// (kernels/sampling_math.h). Correct, not fast: a block of kSampleBlock threads per row,
// and a full stable radix sort of every row's candidates (CUB), so the candidate order is
// the CPU's (logit descending, id ascending). Sums that the CPU takes in order are block
// reductions and scans here, in double: the same token except where a draw or a top-p
// threshold falls within double rounding of a boundary.
#include <cuda_runtime.h>

#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/sampling_math.h"

namespace hearth::kernels::cuda {
namespace {

constexpr int kSampleBlock = 1024;
constexpr int kWarps = kSampleBlock / 32;

// Scratch: keys and ids twice (the sort's input and output), penalty counts, seen and
// done flags, segment offsets, valid counts, then CUB's temporary storage.
struct SampleScratch {
  float* keys_in;
  float* keys_out;
  int32_t* ids_in;
  int32_t* ids_out;
  int32_t* counts;
  int32_t* seen;
  int32_t* done;
  int32_t* offsets;  // n_rows + 1
  int32_t* valid;    // n_rows
  void* cub;
  size_t cub_bytes;
};

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t cub_bytes(int64_t n_rows, int64_t vocab) {
  size_t bytes = 0;
  const int32_t offsets[2] = {0, 0};  // the size query reads no offsets, but takes real pointers
  cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const float*>(nullptr),
                                                     static_cast<float*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                     static_cast<int32_t*>(nullptr), static_cast<int>(n_rows * vocab),
                                                     static_cast<int>(n_rows), offsets, offsets + 1);
  return bytes;
}

SampleScratch carve(void* base, int64_t n_rows, int64_t vocab) {
  auto* p = static_cast<char*>(base);
  const size_t cells = align256(static_cast<size_t>(n_rows * vocab) * 4);
  SampleScratch s;
  s.keys_in = reinterpret_cast<float*>(p), p += cells;
  s.keys_out = reinterpret_cast<float*>(p), p += cells;
  s.ids_in = reinterpret_cast<int32_t*>(p), p += cells;
  s.ids_out = reinterpret_cast<int32_t*>(p), p += cells;
  s.counts = reinterpret_cast<int32_t*>(p), p += cells;
  s.seen = reinterpret_cast<int32_t*>(p), p += cells;
  s.done = reinterpret_cast<int32_t*>(p), p += cells;
  s.offsets = reinterpret_cast<int32_t*>(p), p += align256(static_cast<size_t>(n_rows + 1) * 4);
  s.valid = reinterpret_cast<int32_t*>(p), p += align256(static_cast<size_t>(n_rows) * 4);
  s.cub = p;
  s.cub_bytes = cub_bytes(n_rows, vocab);
  return s;
}

struct Best {
  float v;
  int32_t id;  // -1: none
};

__device__ bool better(Best a, Best b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  return dev::sampling_before(a.v, a.id, b.v, b.id);
}

__device__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.id, o)};
    if (better(other, b)) b = other;
  }
  return b;
}

__device__ Best block_best(Best b, Best* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  b = warp_best(b);
  __syncthreads();
  if (lane == 0) scratch[warp] = b;
  __syncthreads();
  b = lane < kWarps ? scratch[lane] : Best{0.0f, -1};
  return warp_best(b);
}

__device__ double block_sum_d(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ int block_min_i(int v, int* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : INT_MAX;
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Inclusive scan over the block in thread order; `total` gets the block's sum.
__device__ double block_scan_d(double v, double* scratch, double& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += up;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < kWarps ? scratch[lane] : 0.0;
    for (int o = 1; o < 32; o <<= 1) {
      const double up = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += up;
    }
    if (lane < kWarps) scratch[lane] = w;  // inclusive prefix of the warps' sums
  }
  __syncthreads();
  if (warp > 0) v += scratch[warp - 1];
  total = scratch[kWarps - 1];
  return v;
}

// The first index i < n whose running sum of term(i) reaches the threshold (`reached`
// says how: >= or >), or INT_MAX.
template <typename Term>
__device__ int first_reaching(int n, double threshold, bool inclusive_equal, Term term, double* dscratch,
                              int* iscratch) {
  double carry = 0.0;
  for (int base = 0; base < n; base += kSampleBlock) {
    const int i = base + static_cast<int>(threadIdx.x);
    double total = 0.0;
    const double prefix = block_scan_d(i < n ? term(i) : 0.0, dscratch, total) + carry;
    const bool hit = i < n && (inclusive_equal ? prefix >= threshold : prefix > threshold);
    const int first = block_min_i(hit ? i : INT_MAX, iscratch);
    if (first != INT_MAX) return first;
    carry += total;
  }
  return INT_MAX;
}

__global__ void sample_prepare_kernel(SampleParams p, SampleScratch s) {
  __shared__ Best best_scratch[32];
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  const int64_t row = blockIdx.x;
  const int64_t vocab = p.vocab;
  const float* l = p.logits + row * vocab;
  const SampleRowParams rp = p.rows[row];
  const SamplingParams& sp = rp.sampling;
  SampleRowResult& out = p.out[row];

  // The raw distribution's normaliser and top logprobs (what the API reports).
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, l[i]);
  mx = block_max(mx, fscratch);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) sum += exp(static_cast<double>(l[i] - mx));
  sum = block_sum_d(sum, dscratch);
  const float log_z = mx + static_cast<float>(log(sum));
  int k = rp.top_logprobs < 0 ? 0 : rp.top_logprobs;
  if (k > kMaxTopLogprobs) k = kMaxTopLogprobs;
  if (k > vocab) k = static_cast<int>(vocab);
  __shared__ int32_t chosen[kMaxTopLogprobs];
  // At least one round: the top token is the row's fingerprint (SampleRowResult::top_id).
  const int rounds = k > 0 ? k : 1;
  for (int round = 0; round < rounds; ++round) {
    Best b{0.0f, -1};
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      bool taken = false;
      for (int j = 0; j < round; ++j) taken = taken || chosen[j] == i;
      const Best c{l[i], static_cast<int32_t>(i)};
      if (!taken && better(c, b)) b = c;
    }
    b = block_best(b, best_scratch);
    if (threadIdx.x == 0) {
      chosen[round] = b.id;
      if (round == 0) {
        out.top_id = b.id;
        out.top_logit = b.v;
      }
      if (round < k) {
        out.top_ids[round] = b.id;
        out.top_logprobs[round] = b.v - log_z;
      }
    }
    __syncthreads();
  }

  // Penalties, into a copy of the row (the raw logits stay for the logprobs).
  float* keys = s.keys_in + row * vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) keys[i] = l[i];
  const bool penalties = sp.repetition_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f;
  if (penalties) {
    int32_t* counts = s.counts + row * vocab;
    int32_t* seen = s.seen + row * vocab;
    int32_t* done = s.done + row * vocab;
    const int32_t* output = p.tokens + rp.output_begin;
    const int32_t* prompt = p.tokens + rp.prompt_begin;
    const int32_t n_prompt = sp.repetition_penalty != 1.0f ? rp.prompt_count : 0;
    for (int32_t j = threadIdx.x; j < rp.output_count; j += blockDim.x) {
      const int32_t id = output[j];
      if (id < 0 || id >= vocab) continue;
      atomicAdd(&counts[id], 1);
      seen[id] = 1;
    }
    for (int32_t j = threadIdx.x; j < n_prompt; j += blockDim.x) {
      const int32_t id = prompt[j];
      if (id >= 0 && id < vocab) seen[id] = 1;
    }
    __syncthreads();
    for (int32_t j = threadIdx.x; j < rp.output_count + n_prompt; j += blockDim.x) {
      const int32_t id = j < rp.output_count ? output[j] : prompt[j - rp.output_count];
      if (id < 0 || id >= vocab || atomicCAS(&done[id], 0, 1) != 0) continue;
      keys[id] = dev::sampling_penalize(l[id], seen[id] != 0, counts[id], sp.repetition_penalty, sp.presence_penalty,
                                        sp.frequency_penalty);
    }
    __syncthreads();
  }

  if (sp.temperature == 0.0f) {  // greedy: the first of the largest
    Best b{0.0f, -1};
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const Best c{keys[i], static_cast<int32_t>(i)};
      if (better(c, b)) b = c;
    }
    b = block_best(b, best_scratch);
    if (threadIdx.x == 0) {
      const int32_t id = b.id < 0 ? 0 : b.id;
      out.id = id;
      out.logprob = l[id] - log_z;
      out.log_z = log_z;
      out.n_top = k;
      s.valid[row] = -1;  // nothing to draw
    }
  } else {
    // Candidates for the sort: finite logits over the temperature (-0 as +0, so ties
    // order by id as on the CPU); the rest sink to the end as -inf.
    const float inv_t = 1.0f / sp.temperature;
    int32_t* ids = s.ids_in + row * vocab;
    int valid = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = keys[i];
      const bool ok = v != -INFINITY && !isnan(v);
      keys[i] = ok ? v * inv_t + 0.0f : -INFINITY;
      ids[i] = static_cast<int32_t>(i);
      valid += ok ? 1 : 0;
    }
    const float n_valid = block_sum(static_cast<float>(valid), fscratch);
    if (threadIdx.x == 0) {
      s.valid[row] = static_cast<int32_t>(n_valid);
      out.log_z = log_z;
      out.n_top = k;
    }
  }
  if (threadIdx.x == 0) s.offsets[row] = static_cast<int32_t>(row * vocab);
  if (threadIdx.x == 0 && row + 1 == p.n_rows) s.offsets[row + 1] = static_cast<int32_t>((row + 1) * vocab);
}

__global__ void sample_draw_kernel(SampleParams p, SampleScratch s) {
  __shared__ double dscratch[32];
  __shared__ int iscratch[32];
  const int64_t row = blockIdx.x;
  const int n_valid = s.valid[row];
  if (n_valid < 0) return;  // greedy
  const int64_t vocab = p.vocab;
  const float* l = p.logits + row * vocab;
  const SamplingParams sp = p.rows[row].sampling;
  SampleRowResult& out = p.out[row];
  if (n_valid == 0) {
    if (threadIdx.x == 0) {
      out.id = 0;
      out.logprob = l[0] - out.log_z;
    }
    return;
  }
  const float* keys = s.keys_out + row * vocab;
  const int32_t* ids = s.ids_out + row * vocab;
  int keep = n_valid;
  if (sp.top_k > 0 && sp.top_k < keep) keep = sp.top_k;
  const float mx = keys[0];
  auto e = [&](int i) { return exp(static_cast<double>(keys[i] - mx)); };
  double total = 0.0;
  for (int i = threadIdx.x; i < keep; i += blockDim.x) total += e(i);
  total = block_sum_d(total, dscratch);
  if (sp.top_p < 1.0f) {
    const int cut = first_reaching(
        keep, static_cast<double>(sp.top_p), true, [&](int i) { return e(i) / total; }, dscratch, iscratch);
    if (cut != INT_MAX) keep = cut + 1;
  }
  if (sp.min_p > 0.0f) {
    const double threshold = log(static_cast<double>(sp.min_p));
    int first_out = INT_MAX;
    for (int i = 1 + threadIdx.x; i < keep; i += blockDim.x) {
      if (!dev::sampling_min_p_keeps(keys[i], mx, threshold)) first_out = min(first_out, i);
    }
    first_out = block_min_i(first_out, iscratch);
    if (first_out != INT_MAX) keep = first_out;
  }
  double kept = 0.0;
  for (int i = threadIdx.x; i < keep; i += blockDim.x) kept += e(i);
  kept = block_sum_d(kept, dscratch);
  const double r = dev::sampling_uniform_at(sp.seed, p.rows[row].draw) * kept;
  int chosen = first_reaching(keep, r, false, e, dscratch, iscratch);
  if (chosen == INT_MAX) chosen = keep - 1;
  if (threadIdx.x == 0) {
    const int32_t id = ids[chosen];
    out.id = id;
    out.logprob = l[id] - out.log_z;
  }
}

}  // namespace

size_t sample_scratch_bytes(int64_t n_rows, int64_t vocab) {
  const size_t cells = align256(static_cast<size_t>(n_rows * vocab) * 4);
  return 7 * cells + align256(static_cast<size_t>(n_rows + 1) * 4) + align256(static_cast<size_t>(n_rows) * 4) +
         cub_bytes(n_rows, vocab);
}

cudaError_t sample(const SampleParams& p, cudaStream_t stream) {
  if (p.n_rows <= 0) return cudaSuccess;
  if (p.vocab <= 0 || p.n_rows * p.vocab > INT_MAX || p.logits == nullptr || p.rows == nullptr || p.out == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.scratch == nullptr || p.scratch_bytes < sample_scratch_bytes(p.n_rows, p.vocab)) return cudaErrorInvalidValue;
  SampleScratch s = carve(p.scratch, p.n_rows, p.vocab);
  // Penalty counts and flags start from zero every call.
  const size_t cells = align256(static_cast<size_t>(p.n_rows * p.vocab) * 4);
  if (const cudaError_t e = cudaMemsetAsync(s.counts, 0, 3 * cells, stream); e != cudaSuccess) return e;
  const auto grid = static_cast<unsigned>(p.n_rows);
  HEARTH_LAUNCH(sample_prepare_kernel, grid, kSampleBlock, 0, stream)(p, s);
  if (const cudaError_t e = launched(); e != cudaSuccess) return e;
  size_t bytes = s.cub_bytes;
  if (const cudaError_t e = cub::DeviceSegmentedRadixSort::SortPairsDescending(
          s.cub, bytes, s.keys_in, s.keys_out, s.ids_in, s.ids_out, static_cast<int>(p.n_rows * p.vocab),
          static_cast<int>(p.n_rows), s.offsets, s.offsets + 1, 0, 32, stream);
      e != cudaSuccess) {
    return e;
  }
  HEARTH_LAUNCH(sample_draw_kernel, grid, kSampleBlock, 0, stream)(p, s);
  return launched();
}

}  // namespace hearth::kernels::cuda
