// Sampling on the device, as engine/core/sampler.cpp and the driver define it: per row, the
// log-normaliser and the top logprobs of the raw logits, then repetition / presence /
// frequency penalties, temperature, top-k, top-p, min-p and the seeded draw
// (kernels/sampling_math.h). A block of kSampleBlock threads per row, and no sort: every
// cut the host makes in its sorted candidates (the top-k-th, the first whose running
// probability reaches top-p, the draw) is found by a radix selection over the row
// (select_reaching: a byte of the keys' order bits per pass, four passes), so a row is
// read a bounded number of times whatever its vocabulary, and min-p is a threshold on
// the key. Sums that the CPU takes in order are block reductions here, in double: the
// same token except where a draw or a top-p threshold falls within double rounding of a
// boundary.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/sampling_math.h"

namespace hearth::kernels::cuda {
namespace {

constexpr int kSampleBlock = 1024;
constexpr int kWarps = kSampleBlock / 32;

// Scratch: the row's keys (penalised logits over the temperature; NaN for a token that
// is not a candidate), then penalty counts, seen and done flags.
struct SampleScratch {
  float* keys;
  int32_t* counts;
  int32_t* seen;
  int32_t* done;
};

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t row_cells(int64_t n_rows, int64_t vocab) { return align256(static_cast<size_t>(n_rows * vocab) * 4); }

SampleScratch carve(void* base, int64_t n_rows, int64_t vocab) {
  auto* p = static_cast<char*>(base);
  const size_t cells = row_cells(n_rows, vocab);
  SampleScratch s;
  s.keys = reinterpret_cast<float*>(p), p += cells;
  s.counts = reinterpret_cast<int32_t*>(p), p += cells;
  s.seen = reinterpret_cast<int32_t*>(p), p += cells;
  s.done = reinterpret_cast<int32_t*>(p);
  return s;
}

struct Best {
  float v;
  int32_t id;  // -1: none
};

// Whether a comes before b in the candidates' order (kLast: after it); a none never does.
template <bool kLast = false>
__device__ bool better(Best a, Best b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  return kLast ? dev::sampling_before(b.v, b.id, a.v, a.id) : dev::sampling_before(a.v, a.id, b.v, b.id);
}

template <bool kLast = false>
__device__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.id, o)};
    if (better<kLast>(other, b)) b = other;
  }
  return b;
}

// The first of the block's candidates in the candidates' order (kLast: the last).
template <bool kLast = false>
__device__ Best block_best(Best b, Best* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  b = warp_best<kLast>(b);
  __syncthreads();
  if (lane == 0) scratch[warp] = b;
  __syncthreads();
  b = lane < kWarps ? scratch[lane] : Best{0.0f, -1};
  return warp_best<kLast>(b);
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

// Whether a running sum has reached `target`: >= when `inclusive`, else >.
__device__ bool reaches(double sum, double target, bool inclusive) {
  return inclusive ? sum >= target : sum > target;
}

// The radix selection's shared state.
struct SelectScratch {
  double weight[256];  // per value of the pass's byte, largest first
  int32_t count[256];
  double carry;
  int32_t digit;
  int32_t id;
};

// Where a radix selection ended: the order bits of the element (or elements) reached,
// the members' weight before them, how many members have those bits and their weight.
struct Reach {
  bool found = false;
  uint32_t bits = 0;
  double carry = 0.0;
  int32_t count = 0;
  double weight = 0.0;
};

// Among the members of a row ordered by bits(i) descending, the first bits at which the
// running sum of weight(i) reaches `target`. Four passes, a byte of the bits each: a
// pass sums the weights of the members whose bits start with the bytes fixed so far per
// value of the next byte, and a warp finds the value where the sum, largest first,
// reaches the target. Every thread gets the result; the block calls it together.
template <typename Member, typename Bits, typename Weight>
__device__ Reach radix_reaching(int64_t n, Member member, Bits bits_of, Weight weight, double target, bool inclusive,
                                SelectScratch& sh) {
  Reach r;
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      sh.weight[b] = 0.0;
      sh.count[b] = 0;
    }
    __syncthreads();
    // Each thread sums a run of its members that fall in one bucket before adding it to
    // the shared one: in the first pass a row's keys share a few top bytes, and an atomic
    // per member would have the block's threads queue on those few buckets.
    int run_bucket = -1, run_count = 0;
    double run_weight = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      if (!member(i)) continue;
      const uint32_t bits = bits_of(i);
      if ((bits & mask) != r.bits) continue;
      const int bucket = 255 - static_cast<int>((bits >> shift) & 255u);
      if (bucket != run_bucket) {
        if (run_count > 0) {
          atomicAdd(&sh.weight[run_bucket], run_weight);
          atomicAdd(&sh.count[run_bucket], run_count);
        }
        run_bucket = bucket, run_weight = 0.0, run_count = 0;
      }
      run_weight += weight(i);
      ++run_count;
    }
    if (run_count > 0) {
      atomicAdd(&sh.weight[run_bucket], run_weight);
      atomicAdd(&sh.count[run_bucket], run_count);
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // each lane 8 buckets; a scan over the lanes finds the crossing
      const int lane = static_cast<int>(threadIdx.x);
      double own = 0.0;
      bool any = false;
      for (int j = 0; j < 8; ++j) {
        own += sh.weight[lane * 8 + j];
        any = any || sh.count[lane * 8 + j] > 0;
      }
      double through = own;
      for (int o = 1; o < 32; o <<= 1) {
        const double up = __shfl_up_sync(0xffffffffu, through, o);
        if (lane >= o) through += up;
      }
      int first = any && reaches(r.carry + through, target, inclusive) ? lane : 32;
      for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
      if (first == 32 && mask != 0) {
        // The first pass found the crossing inside this prefix; summed in another order
        // the members fall short of it by rounding: the last of them, as the host's walk
        // would end there.
        first = any ? lane : -1;
        for (int o = 16; o > 0; o >>= 1) first = max(first, __shfl_xor_sync(0xffffffffu, first, o));
      }
      if (lane == first) {
        double run = r.carry + (through - own), before = run;
        int digit = -1;
        for (int j = 0; j < 8; ++j) {
          const int b = lane * 8 + j;
          if (sh.count[b] == 0) continue;
          digit = b, before = run;  // the lane's last non-empty one where rounding keeps it short
          if (reaches(run + sh.weight[b], target, inclusive)) break;
          run += sh.weight[b];
        }
        sh.digit = digit;
        sh.carry = before;
      } else if (lane == 0 && (first == 32 || first < 0)) {
        sh.digit = -1;
      }
    }
    __syncthreads();
    const int digit = sh.digit;
    if (digit < 0) return Reach{};  // block-uniform
    r.carry = sh.carry;
    r.count = sh.count[digit];
    r.weight = sh.weight[digit];
    r.bits |= static_cast<uint32_t>(255 - digit) << shift;
    mask |= 255u << shift;
    __syncthreads();  // the next pass clears what was just read
  }
  r.found = true;
  return r;
}

// The first member of a row, in the candidates' order (key descending, id ascending), at
// which the running sum of weight(i) over the members reaches `target`; id -1 when their
// total falls short. A radix selection over the keys' order bits finds the key; when
// several members have it, they weigh the same (`weight` depends on the key alone), so
// the one reached is the j-th of them in id order, found by a second selection over
// their ids. Every thread gets the result; the block calls it together.
template <typename Member, typename Weight>
__device__ Best select_reaching(const float* keys, int64_t n, Member member, Weight weight, double target,
                                bool inclusive, SelectScratch& sh) {
  const Reach key = radix_reaching(
      n, member, [&](int64_t i) { return dev::sampling_order_bits(keys[i]); }, weight, target, inclusive, sh);
  if (!key.found) return Best{0.0f, -1};
  auto tie = [&](int64_t i) { return member(i) && dev::sampling_order_bits(keys[i]) == key.bits; };
  int32_t id = -1;
  if (key.count == 1) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      if (tie(i)) sh.id = static_cast<int32_t>(i);
    }
    __syncthreads();
    id = sh.id;
    __syncthreads();
  } else {
    // How many of the ties the sum needs (the last where rounding keeps it short), then
    // the one of that rank in id order (ids reversed, so the lowest ranks first).
    const double w = key.weight / key.count;
    int32_t j = key.count;
    if (w > 0.0) {
      const double estimate = ceil((target - key.carry) / w);
      j = estimate < 1.0 ? 1 : estimate < key.count ? static_cast<int32_t>(estimate) : key.count;
      while (j < key.count && !reaches(key.carry + j * w, target, inclusive)) ++j;
      while (j > 1 && reaches(key.carry + (j - 1) * w, target, inclusive)) --j;
    } else if (reaches(key.carry, target, inclusive)) {
      j = 1;
    }
    const Reach rank = radix_reaching(
        n, tie, [](int64_t i) { return ~static_cast<uint32_t>(i); }, [](int64_t) { return 1.0; },
        static_cast<double>(j), true, sh);
    if (!rank.found) return Best{0.0f, -1};  // counts are exact: not reached
    id = static_cast<int32_t>(~rank.bits);
  }
  return Best{keys[id], id};
}

// Sampler::sample's cuts and draw over a row's keys (n_valid candidates) without
// sorting them: the top-k-th candidate, the first whose running probability reaches
// top-p and the drawn one are radix selections (select_reaching); min-p keeps a
// candidate by its key. The drawn id ends in sel.id.
__device__ void draw(const float* keys, int64_t vocab, int64_t n_valid, const SamplingParams& sp, uint64_t n_draw,
                     Best* best_scratch, double* dscratch, SelectScratch& sel) {
  auto candidate = [&](int64_t i) { return !isnan(keys[i]); };
  Best top{0.0f, -1};
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const Best c{keys[i], static_cast<int32_t>(i)};
    if (candidate(i) && better(c, top)) top = c;
  }
  top = block_best(top, best_scratch);
  const float mx = top.v;
  auto e = [&](int64_t i) { return exp(static_cast<double>(keys[i] - mx)); };
  Best last{0.0f, -1};  // the last candidate kept; none: every one
  if (sp.top_k > 0 && sp.top_k < n_valid) {
    last = select_reaching(
        keys, vocab, candidate, [](int64_t) { return 1.0; }, static_cast<double>(sp.top_k), true, sel);
  }
  auto kept = [&](int64_t i) {
    return candidate(i) && (last.id < 0 || !dev::sampling_before(last.v, last.id, keys[i], static_cast<int32_t>(i)));
  };
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) total += kept(i) ? e(i) : 0.0;
  total = block_sum_d(total, dscratch);
  if (sp.top_p < 1.0f) {
    const Best cut = select_reaching(
        keys, vocab, kept, [&](int64_t i) { return e(i) / total; }, static_cast<double>(sp.top_p), true, sel);
    if (cut.id >= 0) last = cut;
  }
  const bool min_p = sp.min_p > 0.0f;
  const double log_min_p = min_p ? log(static_cast<double>(sp.min_p)) : 0.0;
  auto member = [&](int64_t i) {  // the first candidate is kept whatever min-p says
    return kept(i) && (!min_p || i == top.id || dev::sampling_min_p_keeps(keys[i], mx, log_min_p));
  };
  double kept_total = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) kept_total += member(i) ? e(i) : 0.0;
  kept_total = block_sum_d(kept_total, dscratch);
  const double r = dev::sampling_uniform_at(sp.seed, n_draw) * kept_total;
  Best chosen = select_reaching(keys, vocab, member, e, r, false, sel);
  if (chosen.id < 0) {  // the last kept candidate, where rounding keeps the sum short of r
    Best worst{0.0f, -1};
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const Best c{keys[i], static_cast<int32_t>(i)};
      if (member(i) && better<true>(c, worst)) worst = c;
    }
    chosen = block_best<true>(worst, best_scratch);
  }
  __syncthreads();  // every thread has read sel
  if (threadIdx.x == 0) sel.id = chosen.id;
  __syncthreads();
}

__global__ void __launch_bounds__(kSampleBlock) sample_kernel(SampleParams p, SampleScratch s) {
  __shared__ Best best_scratch[32];
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  __shared__ SelectScratch select;
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
  // At least one round: the top token is the row's fingerprint (SampleRowResult::top_id).
  // Each round takes the best of those after the last round's in the candidates' order (a
  // total order over (logit, id); NaN, a broken model's logit, has no place in it), so a
  // round is one pass over the row.
  const int rounds = k > 0 ? k : 1;
  Best prev{0.0f, -1};
  int n_top = 0;  // thread 0's count of the rounds, from the first, that found a token (a NaN row runs out)
  for (int round = 0; round < rounds; ++round) {
    Best b{0.0f, -1};
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const Best c{l[i], static_cast<int32_t>(i)};
      if ((round == 0 || better(prev, c)) && better(c, b)) b = c;
    }
    b = block_best(b, best_scratch);  // every thread's; its scratch is not reused before the next round's barrier
    prev = b;
    if (threadIdx.x == 0) {
      if (round == 0) {
        out.top_id = b.id;
        out.top_logit = b.v;
      }
      if (round < k) {
        out.top_ids[round] = b.id;
        out.top_logprobs[round] = b.v - log_z;
        if (b.id >= 0 && n_top == round) n_top = round + 1;
      }
    }
  }

  // Penalties, into a copy of the row (the raw logits stay for the logprobs).
  float* keys = s.keys + row * vocab;
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
      out.n_top = n_top;
    }
    return;
  }

  // Candidates: finite logits over the temperature (-0 as +0, so that equal keys order
  // by id as on the CPU); NaN marks the rest.
  const float inv_t = 1.0f / sp.temperature;
  const float none = hd_bits_float(0x7fc00000u);
  int valid = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = keys[i];
    const bool ok = v != -INFINITY && !isnan(v);
    keys[i] = ok ? dev::sampling_scaled_key(v, inv_t) : none;
    valid += ok ? 1 : 0;
  }
  const auto n_valid = static_cast<int64_t>(block_sum(static_cast<float>(valid), fscratch));  // after a barrier
  if (threadIdx.x == 0) {
    out.log_z = log_z;
    out.n_top = n_top;
  }
  if (n_valid == 0) {
    if (threadIdx.x == 0) {
      out.id = 0;
      out.logprob = l[0] - log_z;
    }
    return;
  }
  draw(keys, vocab, n_valid, sp, p.rows[row].draw, best_scratch, dscratch, select);
  if (threadIdx.x == 0) {
    const int32_t id = select.id;
    out.id = id;
    out.logprob = l[id] - log_z;
  }
}

}  // namespace

size_t sample_scratch_bytes(int64_t n_rows, int64_t vocab) { return 4 * row_cells(n_rows, vocab); }

cudaError_t sample(const SampleParams& p, cudaStream_t stream) {
  if (p.n_rows <= 0) return cudaSuccess;
  if (p.vocab <= 0 || p.n_rows * p.vocab > INT_MAX || p.logits == nullptr || p.rows == nullptr || p.out == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.scratch == nullptr || p.scratch_bytes < sample_scratch_bytes(p.n_rows, p.vocab)) return cudaErrorInvalidValue;
  const SampleScratch s = carve(p.scratch, p.n_rows, p.vocab);
  // Penalty counts and flags start from zero every call.
  if (const cudaError_t e = cudaMemsetAsync(s.counts, 0, 3 * row_cells(p.n_rows, p.vocab), stream); e != cudaSuccess) {
    return e;
  }
  HEARTH_LAUNCH(sample_kernel, static_cast<unsigned>(p.n_rows), kSampleBlock, 0, stream)(p, s);
  return launched();
}

}  // namespace hearth::kernels::cuda
