// The CUDA kernels' per-element arithmetic (kernels/device_math.h, kernels/sampling_math.h)
// on the host, against kernels/reference on random inputs, fresh each run (the seed is
// printed). Where a kernel's result depends on the order it combines values in (warp
// sums, attention tiles), a host model of that order built from the same functions is
// checked against the reference too, so what the device computes is known before any
// device runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/half.h"
#include "kernels/attention_params.h"
#include "kernels/cuda/launch.h"
#include "kernels/device_math.h"
#include "kernels/reference/reference.h"
#include "kernels/sampling_math.h"
#include "loader/quantize.h"
#include "tests/unit/kernels/group_quant_matrix.h"

namespace hearth::kernels {
namespace {

using testing::GroupQuantMatrix;
using testing::make_group_quant;

uint32_t fresh_seed() {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return seed;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(DeviceMathTest, QuantizedBlocksDequantizeAsTheReference) {
  std::mt19937 rng(fresh_seed());
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    const int64_t n = 32 * 37;
    const auto x = random_floats(static_cast<size_t>(n), rng, 3.0f);
    const auto blocks = quantize(type, x);
    std::vector<float> want(static_cast<size_t>(n));
    ref::dequantize_row(type, blocks.data(), want.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float got = type == DType::kQ8_0
                            ? dev::q8_0_value(reinterpret_cast<const BlockQ8_0*>(blocks.data())[i / 32], i % 32)
                            : dev::q4_0_value(reinterpret_cast<const BlockQ4_0*>(blocks.data())[i / 32], i % 32);
      ASSERT_EQ(got, want[static_cast<size_t>(i)]) << dtype_name(type) << " element " << i;
    }
  }
}

TEST(DeviceMathTest, FloatRowsReadAsTheReference) {
  std::mt19937 rng(fresh_seed());
  const auto x = random_floats(301, rng, 100.0f);
  std::vector<uint16_t> h(x.size()), b(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    h[i] = f32_to_fp16(x[i]);
    b[i] = f32_to_bf16(x[i]);
  }
  std::vector<float> want(x.size());
  for (auto [type, data] : {std::pair<DType, const void*>{DType::kF32, x.data()}, {DType::kF16, h.data()},
                            {DType::kBF16, b.data()}}) {
    ref::dequantize_row(type, data, want.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(dev::float_row_value(type, data, static_cast<int64_t>(i)), want[i]) << dtype_name(type) << " " << i;
    }
  }
  EXPECT_EQ(dev::float_row_value(DType::kQ8_0, x.data(), 0), 0.0f) << "not a float type";
}

TEST(DeviceMathTest, GroupQuantWeightsMatchTheFormatAndTheReference) {
  std::mt19937 rng(fresh_seed());
  for (int32_t bits : {4, 8}) {
    for (bool act_order : {false, true}) {
      for (int32_t zero_offset : {0, 1}) {
        const int64_t rows = 8 * (1 + static_cast<int64_t>(rng() % 6)), cols = 32 * (1 + static_cast<int64_t>(rng() % 9));
        const int32_t group_size = act_order ? 32 : 64;
        GroupQuantMatrix m = make_group_quant(rows, cols, bits, group_size, act_order, rng);
        m.view.zero_offset = zero_offset;
        std::vector<float> want(static_cast<size_t>(rows * cols));
        ref::dequantize_group_quant(m.view, want.data());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const int32_t g = act_order ? m.g_idx[static_cast<size_t>(c)] : static_cast<int32_t>(c / group_size);
            const float expect = fp16_to_f32(m.scales[static_cast<size_t>(g * rows + r)]) *
                                 static_cast<float>(m.q[static_cast<size_t>(r * cols + c)] -
                                                    m.z[static_cast<size_t>(g * rows + r)] - zero_offset);
            ASSERT_EQ(dev::group_quant_value(m.view, r, c), expect) << bits << " bits, (" << r << ", " << c << ")";
            ASSERT_EQ(want[static_cast<size_t>(r * cols + c)], expect) << "reference, (" << r << ", " << c << ")";
          }
        }
      }
    }
  }
}

// The Q8_0/Q4_0 product as the matvec kernel sums it: lane l takes blocks l, l+32, ...
// (integer sums, then d_w * d_x), and the warp adds its lanes by xor butterflies.
float kernel_model_quant_dot(DType type, const std::byte* row, const float* x, int64_t cols) {
  const int64_t blocks = cols / 32;
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> d(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    d[static_cast<size_t>(b)] = dev::act_block_scale(amax);
    for (int j = 0; j < 32; ++j) {
      q[static_cast<size_t>(b * 32 + j)] = static_cast<int8_t>(dev::act_quantize(x[b * 32 + j], d[static_cast<size_t>(b)]));
    }
  }
  float lanes[32] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int64_t b = lane; b < blocks; b += 32) {
      int32_t isum = 0;
      float dw;
      for (int j = 0; j < 32; ++j) {
        int32_t wq;
        if (type == DType::kQ8_0) {
          const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
          wq = dev::q8_0_int(blk, j);
          dw = fp16_to_f32(blk.d);
        } else {
          const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
          wq = dev::q4_0_int(blk, j);
          dw = fp16_to_f32(blk.d);
        }
        isum += wq * q[static_cast<size_t>(b * 32 + j)];
      }
      lanes[lane] += (dw * d[static_cast<size_t>(b)]) * static_cast<float>(isum);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ o];
    std::copy(next, next + 32, lanes);
  }
  return lanes[0];
}

TEST(DeviceMathTest, QuantizedProductsSumAsTheReferenceToRounding) {
  std::mt19937 rng(fresh_seed());
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 17), cols = 32 * (1 + static_cast<int64_t>(rng() % 80));
    const int64_t n = 1 + static_cast<int64_t>(rng() % 4);
    const auto w = quantize(type, random_floats(static_cast<size_t>(rows * cols), rng));
    auto x = random_floats(static_cast<size_t>(n * cols), rng, 2.0f);
    std::fill_n(x.begin(), 32, 0.0f);  // an all-zero block: scale 0, every q 0
    std::vector<float> want(static_cast<size_t>(n * rows));
    ref::matmul(type, w.data(), rows, cols, x.data(), n, want.data());
    const int64_t row_bytes = cols / 32 * dtype_block_bytes(type);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const float got = kernel_model_quant_dot(type, w.data() + r * row_bytes, x.data() + t * cols, cols);
        const float ref = want[static_cast<size_t>(t * rows + r)];
        ASSERT_NEAR(got, ref, 1e-4f * (1.0f + std::fabs(ref))) << dtype_name(type) << " row " << r << " token " << t;
      }
    }
  }
}

TEST(DeviceMathTest, OnlineSoftmaxMergesToTheTwoPassResult) {
  std::mt19937 rng(fresh_seed());
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 700);
    const auto scores = random_floats(static_cast<size_t>(n), rng, 20.0f);
    const auto values = random_floats(static_cast<size_t>(n), rng);
    // Two passes.
    const float max = *std::max_element(scores.begin(), scores.end());
    double sum = 0.0, acc = 0.0;
    for (int i = 0; i < n; ++i) {
      sum += std::exp(static_cast<double>(scores[static_cast<size_t>(i)] - max));
      acc += std::exp(static_cast<double>(scores[static_cast<size_t>(i)] - max)) * values[static_cast<size_t>(i)];
    }
    const double want = acc / sum;
    // One score at a time.
    dev::SoftmaxState st;
    float out = 0.0f;
    for (int i = 0; i < n; ++i) {
      float rescale, weight;
      dev::softmax_push(st, scores[static_cast<size_t>(i)], rescale, weight);
      out = out * rescale + weight * values[static_cast<size_t>(i)];
    }
    EXPECT_NEAR(out / st.sum, want, 1e-5);
    // Random tiles, merged in order, then as split-K partials merged in reverse.
    std::vector<std::pair<dev::SoftmaxState, float>> parts;
    for (int i = 0; i < n;) {
      const int len = 1 + static_cast<int>(rng() % 130);
      dev::SoftmaxState tile;
      float part = 0.0f;
      for (int j = i; j < std::min(n, i + len); ++j) {
        float rescale, weight;
        dev::softmax_push(tile, scores[static_cast<size_t>(j)], rescale, weight);
        part = part * rescale + weight * values[static_cast<size_t>(j)];
      }
      parts.emplace_back(tile, part);
      i += len;
    }
    dev::SoftmaxState merged;
    float merged_out = 0.0f;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      float sa, sb;
      dev::softmax_merge(merged, it->first, sa, sb);
      merged_out = merged_out * sa + it->second * sb;
    }
    EXPECT_NEAR(merged_out / merged.sum, want, 1e-5);
  }
  // Merging an empty state changes nothing.
  dev::SoftmaxState a{1.0f, 2.0f}, empty;
  float sa, sb;
  dev::softmax_merge(a, empty, sa, sb);
  EXPECT_EQ(sa, 1.0f);
  EXPECT_EQ(sb, 0.0f);
  EXPECT_EQ(a.sum, 2.0f);
}

// The attention kernel's algorithm on the host: per (token, head), keys a tile of
// kAttentionBlock at a time, each tile's state merged into the running one.
void kernel_model_attention(const AttentionParams& p) {
  constexpr int kTile = static_cast<int>(cuda::kAttentionBlock);
  const int32_t group = p.n_heads / p.n_kv_heads;
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t first = attention_first_key(pos, p.sliding_window);
    for (int32_t h = 0; h < p.n_heads; ++h) {
      const float* q = p.q + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      const int32_t kvh = h / group;
      std::vector<float> acc(static_cast<size_t>(p.head_dim), 0.0f), e(kTile);
      dev::SoftmaxState state;
      for (int32_t k0 = first; k0 <= pos; k0 += kTile) {
        dev::SoftmaxState tile;
        std::vector<float> scores(kTile, -INFINITY);
        for (int i = 0; i < kTile && k0 + i <= pos; ++i) {
          const int32_t k = k0 + i;
          const int64_t block = dev::kv_position_block(p.block_table, k, p.block_size);
          float dot = 0.0f;
          for (int32_t d = 0; d < p.head_dim; ++d) {
            dot += q[d] * dev::kv_element_load(
                              p.k_cache, p.kv_dtype,
                              kv_key_index(block, kvh, d, k % p.block_size, p.n_kv_heads, p.head_dim, p.block_size));
          }
          scores[static_cast<size_t>(i)] = dot * p.scale;
        }
        tile.max = *std::max_element(scores.begin(), scores.end());
        for (int i = 0; i < kTile; ++i) {
          e[static_cast<size_t>(i)] = k0 + i <= pos ? std::exp(scores[static_cast<size_t>(i)] - tile.max) : 0.0f;
          tile.sum += e[static_cast<size_t>(i)];
        }
        float sr, st;
        dev::softmax_merge(state, tile, sr, st);
        const int32_t n_keys = std::min(kTile, pos - k0 + 1);
        for (int32_t d = 0; d < p.head_dim; ++d) {
          float part = 0.0f;
          for (int32_t j = 0; j < n_keys; ++j) {
            const int32_t kk = k0 + j;
            const int64_t value = kv_value_index(dev::kv_position_block(p.block_table, kk, p.block_size), kvh,
                                                 kk % p.block_size, p.n_kv_heads, p.head_dim, p.block_size);
            part += e[static_cast<size_t>(j)] * dev::kv_element_load(p.v_cache, p.kv_dtype, value + d);
          }
          acc[static_cast<size_t>(d)] = acc[static_cast<size_t>(d)] * sr + part * st;
        }
      }
      float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      for (int32_t d = 0; d < p.head_dim; ++d) out[d] = acc[static_cast<size_t>(d)] / state.sum;
    }
  }
}

TEST(DeviceMathTest, TiledAttentionOverPagedBlocksMatchesTheReference) {
  std::mt19937 rng(fresh_seed());
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (int trial = 0; trial < 4; ++trial) {
      const int32_t n_kv_heads = 1 + static_cast<int32_t>(rng() % 3);
      const int32_t n_heads = n_kv_heads * (1 + static_cast<int32_t>(rng() % 3));
      const int32_t head_dim = 2 * (1 + static_cast<int32_t>(rng() % 40));
      const int32_t block_size = 1 << (rng() % 6);
      const int32_t context = 1 + static_cast<int32_t>(rng() % 300);
      const int32_t n_blocks = (context + block_size - 1) / block_size + 3;
      std::vector<int32_t> table(static_cast<size_t>(n_blocks));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), rng);  // blocks anywhere in the cache
      const int64_t cache_elems = static_cast<int64_t>(n_blocks) * n_kv_heads * head_dim * block_size;
      const int32_t bytes = kv_dtype_bytes(dtype);
      std::vector<std::byte> kc(static_cast<size_t>(cache_elems * bytes)), vc(kc.size());
      const auto kv = random_floats(static_cast<size_t>(cache_elems), rng);
      const auto vv = random_floats(static_cast<size_t>(cache_elems), rng);
      for (int64_t i = 0; i < cache_elems; ++i) {
        dev::kv_element_store(kc.data(), dtype, i, kv[static_cast<size_t>(i)]);
        dev::kv_element_store(vc.data(), dtype, i, vv[static_cast<size_t>(i)]);
      }
      // A chunk of queries ending at the context (prefill), or the last one (decode).
      const int32_t n_tokens = trial % 2 == 0 ? std::min(context, 1 + static_cast<int32_t>(rng() % 20)) : 1;
      std::vector<int32_t> positions(static_cast<size_t>(n_tokens));
      for (int32_t i = 0; i < n_tokens; ++i) positions[static_cast<size_t>(i)] = context - n_tokens + i;
      const auto q = random_floats(static_cast<size_t>(n_tokens * n_heads * head_dim), rng, 2.0f);
      std::vector<float> want(q.size()), got(q.size(), NAN);
      AttentionParams p;
      p.q = q.data();
      p.k_cache = kc.data();
      p.v_cache = vc.data();
      p.block_table = table.data();
      p.positions = positions.data();
      p.block_size = block_size;
      p.n_tokens = n_tokens;
      p.n_heads = n_heads;
      p.n_kv_heads = n_kv_heads;
      p.head_dim = head_dim;
      p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      p.sliding_window = trial == 3 ? 1 + static_cast<int32_t>(rng() % 50) : 0;
      p.kv_dtype = dtype;
      p.out = want.data();
      ref::attention(p);
      p.out = got.data();
      kernel_model_attention(p);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-5f) << kv_dtype_name(dtype) << " trial " << trial << " element " << i;
      }
    }
  }
}

TEST(DeviceMathTest, KvStoreWritesTheReferencesBits) {
  std::mt19937 rng(fresh_seed());
  const int32_t n_kv_heads = 3, head_dim = 10, block_size = 4, n_blocks = 6;
  const int64_t n_tokens = 9;
  std::vector<int32_t> slots(static_cast<size_t>(n_blocks * block_size));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(n_tokens));
  auto k = random_floats(static_cast<size_t>(n_tokens * n_kv_heads * head_dim), rng, 70000.0f);
  const auto v = random_floats(k.size(), rng);
  k[0] = NAN;
  k[1] = INFINITY;
  k[2] = 1e-8f;  // subnormal in f16
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    const size_t bytes = static_cast<size_t>(n_blocks * block_size * n_kv_heads * head_dim * kv_dtype_bytes(dtype));
    std::vector<std::byte> kw(bytes), vw(bytes), kg(bytes), vg(bytes);
    const KvStoreParams p{k.data(), v.data(), kw.data(), vw.data(), slots.data(), n_tokens, n_kv_heads, head_dim,
                          block_size, dtype};
    ref::kv_store(p);
    // The kernel's indexing: one thread per (token, kv head, d).
    const int64_t kv_dim = n_kv_heads * head_dim;
    for (int64_t i = 0; i < n_tokens * kv_dim; ++i) {
      const int64_t t = i / kv_dim;
      const auto h = static_cast<int32_t>((i % kv_dim) / head_dim);
      const auto d = static_cast<int32_t>(i % head_dim);
      const int64_t block = dev::kv_slot_block(slots[static_cast<size_t>(t)], block_size);
      const int32_t offset = dev::kv_slot_offset(slots[static_cast<size_t>(t)], block_size);
      dev::kv_element_store(kg.data(), dtype, kv_key_index(block, h, d, offset, n_kv_heads, head_dim, block_size),
                            k[static_cast<size_t>(i)]);
      dev::kv_element_store(vg.data(), dtype, kv_value_index(block, h, offset, n_kv_heads, head_dim, block_size) + d,
                            v[static_cast<size_t>(i)]);
    }
    EXPECT_EQ(kg, kw) << kv_dtype_name(dtype);
    EXPECT_EQ(vg, vw) << kv_dtype_name(dtype);
  }
}

TEST(DeviceMathTest, RopeRotatesAsTheReference) {
  std::mt19937 rng(fresh_seed());
  const int64_t n = 5, n_heads = 3, head_dim = 18;
  std::vector<int32_t> positions = {0, 1, 17, 500, 4095};
  for (int64_t rotary : {head_dim, int64_t{6}})
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
    std::vector<float> inv_freq(static_cast<size_t>(rotary / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / rotary));
    }
    auto want = random_floats(static_cast<size_t>(n * n_heads * head_dim), rng);
    auto got = want;
    ref::rope(want.data(), n, n_heads, head_dim, rotary, positions.data(), inv_freq.data(), style);
    for (int64_t row = 0; row < n * n_heads; ++row) {
      for (int32_t i = 0; i < rotary / 2; ++i) {
        int32_t a, b;
        dev::rope_pair(i, static_cast<int32_t>(rotary), style == RopeStyle::kInterleaved, a, b);
        float* v = got.data() + row * head_dim;
        dev::rope_rotate(v[a], v[b], positions[static_cast<size_t>(row / n_heads)], inv_freq[static_cast<size_t>(i)]);
      }
    }
    // The host's cosf/sinf against std::cos/sin: the same function to a few ulp (the
    // device's differ by their documented 2 ulp).
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << "element " << i;
  }
}

TEST(DeviceMathTest, ElementwiseOpsMatchTheReference) {
  std::mt19937 rng(fresh_seed());
  const int64_t n = 3, dim = 77;
  const auto x = random_floats(static_cast<size_t>(n * dim), rng, 4.0f);
  const auto up = random_floats(x.size(), rng);
  const auto w = random_floats(static_cast<size_t>(dim), rng);
  std::vector<float> want(x.size());
  ref::swiglu(x.data(), up.data(), n * dim, want.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_FLOAT_EQ(dev::silu_mul(x[i], up[i]), want[i]);
  ref::rms_norm(x.data(), w.data(), n, dim, 1e-5f, want.data());
  for (int64_t t = 0; t < n; ++t) {
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += x[static_cast<size_t>(t * dim + i)] * x[static_cast<size_t>(t * dim + i)];
    const float scale = dev::rms_inv(ss, dim, 1e-5f);
    for (int64_t i = 0; i < dim; ++i) {
      ASSERT_FLOAT_EQ(w[static_cast<size_t>(i)] * (scale * x[static_cast<size_t>(t * dim + i)]),
                      want[static_cast<size_t>(t * dim + i)]);
    }
  }
  for (bool tanh_form : {false, true}) {  // GELU of the gate, times up (GeGLU) and alone
    ref::gelu(x.data(), up.data(), n * dim, tanh_form, want.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(dev::gelu(x[i], tanh_form) * up[i], want[i], 2e-6f * (1 + std::fabs(want[i]))) << x[i];
    }
  }
  {  // softcap and the sigmoid gate
    std::vector<float> capped = x;
    ref::softcap(capped.data(), n * dim, 1.5f);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(dev::softcap(x[i], 1.5f), capped[i], 1e-6f) << x[i];
    EXPECT_EQ(dev::softcap(3.0f, 0.0f), 3.0f);  // no cap
    std::vector<float> gated = x;
    ref::sigmoid_gate_rows(gated.data(), up.data(), n, dim);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < dim; ++i) {
        const size_t j = static_cast<size_t>(t * dim + i);
        ASSERT_NEAR(dev::sigmoid(up[static_cast<size_t>(t)]) * x[j], gated[j], 1e-6f * (1 + std::fabs(x[j])));
      }
    }
  }
  const auto b = random_floats(static_cast<size_t>(dim), rng);
  ref::layer_norm(x.data(), w.data(), b.data(), n, dim, 1e-5f, want.data());
  for (int64_t t = 0; t < n; ++t) {
    const float* r = x.data() + t * dim;
    float sum = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum += r[i];
    const float mean = sum / static_cast<float>(dim);
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += (r[i] - mean) * (r[i] - mean);
    const float inv = dev::layer_norm_inv(ss, dim, 1e-5f);
    for (int64_t i = 0; i < dim; ++i) {
      ASSERT_NEAR(dev::layer_norm_value(r[i], mean, inv, w.data(), b.data(), i), want[static_cast<size_t>(t * dim + i)],
                  1e-5f);
    }
  }
}

TEST(DeviceMathTest, MoeTopKAndCombineAsTheReference) {
  std::mt19937 rng(fresh_seed());
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t experts = 1 + static_cast<int32_t>(rng() % 128);
    const int32_t k = 1 + static_cast<int32_t>(rng() % std::min(experts, 16));
    auto logits = random_floats(static_cast<size_t>(experts), rng, 6.0f);
    const bool normalize = rng() % 2 == 0;
    std::vector<int32_t> want_ids(static_cast<size_t>(k)), got_ids(want_ids.size());
    std::vector<float> want_w(want_ids.size()), got_w(want_ids.size());
    // Softmax routing, or sigmoid scores with a bias on the choice and a scale.
    const auto bias = random_floats(static_cast<size_t>(experts), rng, 0.3f);
    const bool sigmoid = rng() % 2 == 0;
    const kernels::MoeRouting r{experts, k, normalize, sigmoid, sigmoid ? bias.data() : nullptr, sigmoid ? 2.5f : 1.0f};
    ref::moe_route(logits.data(), 1, r, want_ids.data(), want_w.data());
    dev::moe_top_k(logits.data(), r, got_ids.data(), got_w.data());
    ASSERT_EQ(got_ids, want_ids) << experts << " experts, top " << k;
    for (int32_t j = 0; j < k; ++j) ASSERT_NEAR(got_w[static_cast<size_t>(j)], want_w[static_cast<size_t>(j)], 1e-6f);
    const int64_t dim = 5;
    const auto rows = random_floats(static_cast<size_t>(k * dim), rng);
    std::vector<int32_t> pos(static_cast<size_t>(k));
    for (int32_t j = 0; j < k; ++j) pos[static_cast<size_t>(j)] = k - 1 - j;
    std::vector<float> want(static_cast<size_t>(dim));
    ref::moe_combine(rows.data(), pos.data(), got_w.data(), 1, k, dim, want.data());
    for (int64_t i = 0; i < dim; ++i) {
      ASSERT_NEAR(dev::moe_combine_value(rows.data(), pos.data(), got_w.data(), k, dim, i), want[static_cast<size_t>(i)],
                  1e-5f);
    }
  }
}

TEST(DeviceMathTest, StepSequenceOfFindsEachTokensSequence) {
  std::mt19937 rng(fresh_seed());
  for (int trial = 0; trial < 100; ++trial) {
    const int32_t n_seqs = 1 + static_cast<int32_t>(rng() % 40);
    std::vector<int32_t> qs(static_cast<size_t>(n_seqs) + 1, 0);
    for (int32_t s = 0; s < n_seqs; ++s) qs[static_cast<size_t>(s) + 1] = qs[static_cast<size_t>(s)] + 1 + static_cast<int32_t>(rng() % 9);
    for (int32_t t = 0; t < qs.back(); ++t) {
      const int32_t want = static_cast<int32_t>(std::upper_bound(qs.begin(), qs.end(), t) - qs.begin()) - 1;
      ASSERT_EQ(dev::step_sequence_of(qs.data(), n_seqs, t), want) << "token " << t;
    }
  }
}

TEST(DeviceMathTest, SamplingStreamAndPenaltiesAreTheSamplersDefinitions) {
  // splitmix64 from its published definition, stepped from the seed.
  uint64_t state = 1234;
  for (uint64_t n = 0; n < 100; ++n) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double want = static_cast<double>(z >> 11) * 0x1.0p-53;
    ASSERT_EQ(dev::sampling_uniform_at(1234, n), want) << "draw " << n;
    ASSERT_GE(want, 0.0);
    ASSERT_LT(want, 1.0);
  }
  EXPECT_FLOAT_EQ(dev::sampling_penalize(2.0f, true, 0, 2.0f, 0.5f, 0.25f), 1.0f);    // seen in the prompt only
  EXPECT_FLOAT_EQ(dev::sampling_penalize(-2.0f, true, 0, 2.0f, 0.5f, 0.25f), -4.0f);
  EXPECT_FLOAT_EQ(dev::sampling_penalize(2.0f, true, 3, 1.0f, 0.5f, 0.25f), 2.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(dev::sampling_penalize(2.0f, false, 0, 2.0f, 0.5f, 0.25f), 2.0f);  // untouched
  EXPECT_TRUE(dev::sampling_before(1.0f, 5, 0.5f, 1));
  EXPECT_TRUE(dev::sampling_before(1.0f, 1, 1.0f, 5));
  EXPECT_FALSE(dev::sampling_before(1.0f, 5, 1.0f, 1));
  EXPECT_TRUE(dev::sampling_min_p_keeps(-1.0f, 0.0f, std::log(0.3)));
  EXPECT_FALSE(dev::sampling_min_p_keeps(-2.0f, 0.0f, std::log(0.3)));
}

// The weight-streaming products' packed arithmetic: dot4_i8 is the sum of four signed
// byte products; q8_0_word / q4_0_word pack q8_0_int / q4_0_int four at a time; a 16-byte
// read of a float row gives float_row_value's values.
TEST(DeviceMathTest, PackedWeightWordsAndDotsMatchTheElementwiseReads) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> word;
  for (int trial = 0; trial < 20000; ++trial) {
    const uint32_t a = word(rng), b = word(rng);
    const auto c = static_cast<int32_t>(word(rng) % 2000001) - 1000000;
    int32_t want = c;
    for (int k = 0; k < 4; ++k) {
      want += static_cast<int8_t>(a >> (8 * k)) * static_cast<int8_t>(b >> (8 * k));
    }
    ASSERT_EQ(dev::dot4_i8(a, b, c), want);
  }
  EXPECT_EQ(dev::dot4_i8(0x80808080u, 0x80808080u, 0), 4 * 128 * 128) << "-128 * -128, four times";
  EXPECT_EQ(dev::dot4_i8(0x7f7f7f7fu, 0x80808080u, 0), -4 * 127 * 128);
  for (int trial = 0; trial < 2000; ++trial) {
    BlockQ8_0 q8;
    BlockQ4_0 q4;
    q8.d = q4.d = static_cast<uint16_t>(word(rng));
    for (int8_t& v : q8.qs) v = static_cast<int8_t>(word(rng));
    for (uint8_t& v : q4.qs) v = static_cast<uint8_t>(word(rng));
    for (int i = 0; i < 8; ++i) {
      const uint32_t w8 = dev::q8_0_word(q8, i), w4 = dev::q4_0_word(q4, i);
      for (int k = 0; k < 4; ++k) {
        ASSERT_EQ(static_cast<int8_t>(w8 >> (8 * k)), dev::q8_0_int(q8, 4 * i + k)) << "q8_0 value " << 4 * i + k;
        ASSERT_EQ(static_cast<int8_t>(w4 >> (8 * k)), dev::q4_0_int(q4, 4 * i + k)) << "q4_0 value " << 4 * i + k;
      }
    }
  }
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<float> f32(16);
  std::vector<uint16_t> f16(16), bf16(16);
  for (size_t i = 0; i < 16; ++i) {
    f32[i] = value(rng);
    f16[i] = f32_to_fp16(f32[i]);
    bf16[i] = f32_to_bf16(f32[i]);
  }
  float got[8];
  for (int at = 0; at < 2; ++at) {
    dev::float_values16(DType::kF32, dev::load16(f32.data() + 4 * at), got);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(got[i], dev::float_row_value(DType::kF32, f32.data(), 4 * at + i));
    dev::float_values16(DType::kF16, dev::load16(f16.data() + 8 * at), got);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(got[i], dev::float_row_value(DType::kF16, f16.data(), 8 * at + i));
    dev::float_values16(DType::kBF16, dev::load16(bf16.data() + 8 * at), got);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(got[i], dev::float_row_value(DType::kBF16, bf16.data(), 8 * at + i));
  }
}

// Split attention's key ranges cover a query's keys once and in order, each (but the
// last non-empty one) a whole number of tiles, for every split count, window and tile.
TEST(DeviceMathTest, AttentionSplitRangesCoverTheKeysOnceInOrder) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t pos = static_cast<int32_t>(rng() % 20000);
    const int32_t window = trial % 3 == 0 ? static_cast<int32_t>(1 + rng() % 3000) : 0;
    const int32_t first = attention_first_key(pos, window);
    const int32_t splits = static_cast<int32_t>(1 + rng() % 64);
    const int32_t granule = trial % 2 == 0 ? 128 : static_cast<int32_t>(1 + rng() % 200);
    int32_t next = first;
    for (int32_t z = 0; z < splits; ++z) {
      int32_t begin, end;
      attention_split_range(first, pos, splits, z, granule, begin, end);
      ASSERT_EQ(begin, next) << "pos " << pos << " split " << z << " of " << splits;
      ASSERT_LE(begin, end);
      ASSERT_LE(end, pos + 1);
      if (end < pos + 1) {
        ASSERT_EQ((end - begin) % granule, 0) << "a range ends on a tile boundary";
      }
      next = end;
    }
    ASSERT_EQ(next, pos + 1) << "pos " << pos << " first " << first << " splits " << splits;
  }
  int32_t begin, end;
  attention_split_range(0, 0, 8, 0, 128, begin, end);  // one key: the first range has it
  EXPECT_EQ(begin, 0);
  EXPECT_EQ(end, 1);
  attention_split_range(0, 0, 8, 7, 128, begin, end);
  EXPECT_EQ(begin, end);
}

// The radix selection's order bits sort floats as the floats sort: random values of
// every magnitude and sign, infinities, both zeros (-0 below +0) and denormals.
TEST(DeviceMathTest, SamplingOrderBitsSortAsTheFloatsDo) {
  std::mt19937 rng(7);
  std::vector<float> v = {-INFINITY, INFINITY, -0.0f, 0.0f, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f, 1.0f, -1.0f};
  std::uniform_int_distribution<uint32_t> bits;
  while (v.size() < 4000) {
    const float f = hd_bits_float(bits(rng));
    if (!std::isnan(f)) v.push_back(f);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    for (size_t j = i % 97; j < v.size(); j += 97) {
      const uint32_t a = dev::sampling_order_bits(v[i]), b = dev::sampling_order_bits(v[j]);
      if (v[i] < v[j]) {
        ASSERT_LT(a, b) << v[i] << " " << v[j];
      } else if (v[i] > v[j]) {
        ASSERT_GT(a, b) << v[i] << " " << v[j];
      }
    }
  }
  EXPECT_LT(dev::sampling_order_bits(-0.0f), dev::sampling_order_bits(0.0f));
  // Keys never hold -0: an underflowing product of a negative logit is +0, equal in
  // order to every other zero.
  EXPECT_FALSE(std::signbit(dev::sampling_scaled_key(-1e-30f, 1e-20f)));
  EXPECT_FALSE(std::signbit(dev::sampling_scaled_key(-0.0f, 2.0f)));
  EXPECT_EQ(dev::sampling_scaled_key(-3.0f, 0.5f), -1.5f);
  EXPECT_EQ(dev::sampling_order_bits(1.0f), dev::sampling_order_bits(1.0f));
}

}  // namespace
}  // namespace hearth::kernels
