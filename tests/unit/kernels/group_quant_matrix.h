// A random GPTQ-layout matrix for the tests of the group-quantized weights (host math
// and the CUDA product): packed from known integers, with random fp16 scales and, for
// act-order, a shuffled g_idx.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "common/half.h"
#include "kernels/device_math.h"

namespace hearth::testing {

namespace dev = kernels::dev;

// A random GPTQ-layout matrix, packed from known integers.
struct GroupQuantMatrix {
  std::vector<int32_t> q, z;  // [rows, cols], [n_groups, rows] unpacked
  std::vector<int32_t> qweight, qzeros, g_idx;
  std::vector<uint16_t> scales;
  dev::GroupQuantView view;
};

inline GroupQuantMatrix make_group_quant(int64_t rows, int64_t cols, int32_t bits, int32_t group_size, bool act_order,
                                  std::mt19937& rng) {
  GroupQuantMatrix m;
  const int32_t pack = 32 / bits;
  const int64_t groups = (cols + group_size - 1) / group_size;
  std::uniform_int_distribution<int32_t> value(0, (1 << bits) - 1);
  m.q.resize(static_cast<size_t>(rows * cols));
  m.z.resize(static_cast<size_t>(groups * rows));
  for (auto& v : m.q) v = value(rng);
  for (auto& v : m.z) v = value(rng);
  m.qweight.assign(static_cast<size_t>(cols / pack * rows), 0);
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      auto& w = m.qweight[static_cast<size_t>((c / pack) * rows + r)];
      w = static_cast<int32_t>(static_cast<uint32_t>(w) |
                               (static_cast<uint32_t>(m.q[static_cast<size_t>(r * cols + c)]) << ((c % pack) * bits)));
    }
  }
  m.qzeros.assign(static_cast<size_t>(groups * (rows / pack)), 0);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      auto& w = m.qzeros[static_cast<size_t>(g * (rows / pack) + r / pack)];
      w = static_cast<int32_t>(static_cast<uint32_t>(w) |
                               (static_cast<uint32_t>(m.z[static_cast<size_t>(g * rows + r)]) << ((r % pack) * bits)));
    }
  }
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  m.scales.resize(static_cast<size_t>(groups * rows));
  for (auto& s : m.scales) s = f32_to_fp16(scale(rng));
  if (act_order) {  // columns assigned to groups out of order, as act-order checkpoints do
    m.g_idx.resize(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) m.g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(c / group_size);
    std::shuffle(m.g_idx.begin(), m.g_idx.end(), rng);
  }
  m.view = {m.qweight.data(), m.qzeros.data(), m.scales.data(), act_order ? m.g_idx.data() : nullptr,
            rows,            cols,             bits,            group_size,
            1};
  return m;
}

}  // namespace hearth::testing
