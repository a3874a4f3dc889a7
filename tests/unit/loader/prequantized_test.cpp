// Pre-quantized Hugging Face checkpoints (GPTQ, AWQ). The test tensors are packed here
// the way each format's reference code packs them (AutoGPTQ's QuantLinear.pack, with
// its zero - 1; GPTQModel's v2 without; AutoAWQ's GEMM pack with the 0 2 4 6 1 3 5 7
// order), from known integers, so the bit order is checked without a download: every
// repacked block must give back scale * (q - zero) exactly.
#include "loader/prequantized.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "common/half.h"
#include "common/mapped_file.h"
#include "engine/backends.h"
#include "engine/core/backend.h"
#include "engine/core/generate.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "ipc/weights_segment.h"
#include "kernels/reference/reference.h"
#include "loader/model.h"
#include "loader/resident.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/synth.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;
using testing::TempDir;

// A layer's integers and scales, unpacked: q [rows, cols], zeros and scales [groups, rows].
struct Layer {
  int64_t rows = 0, cols = 0, group_size = 0;
  int bits = 4;
  std::vector<int32_t> q, zeros;
  std::vector<uint16_t> scales;
  std::vector<int32_t> g_idx;  // act-order: column c's group (empty: c / group_size)
  int64_t groups() const { return cols / group_size; }
  int64_t group(int64_t c) const { return g_idx.empty() ? c / group_size : g_idx[static_cast<size_t>(c)]; }
  float value(int64_t r, int64_t c) const {
    const auto g = static_cast<size_t>(group(c) * rows + r);
    return fp16_to_f32(scales[g]) * static_cast<float>(q[static_cast<size_t>(r * cols + c)] - zeros[g]);
  }
};

Layer random_layer(int64_t rows, int64_t cols, int64_t group_size, int bits, bool sym, std::mt19937& rng) {
  Layer l{rows, cols, group_size, bits};
  const int32_t maxq = (1 << bits) - 1;
  std::uniform_int_distribution<int32_t> code(0, maxq), zero(1, maxq);  // v1 cannot store a zero of 0
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  l.q.resize(static_cast<size_t>(rows * cols));
  for (auto& v : l.q) v = code(rng);
  l.zeros.resize(static_cast<size_t>(l.groups() * rows));
  for (auto& v : l.zeros) v = sym ? (maxq + 1) / 2 : zero(rng);
  l.scales.resize(l.zeros.size());
  for (auto& v : l.scales) v = f32_to_fp16(scale(rng));
  return l;
}

// An act-order g_idx as AutoGPTQ makes one: columns quantized in the order `perm` (by
// decreasing Hessian diagonal there, a shuffle here), so column perm[i] is in group
// i / group_size.
std::vector<int32_t> act_order_g_idx(int64_t cols, int64_t group_size, std::mt19937& rng) {
  std::vector<int32_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> g_idx(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) g_idx[static_cast<size_t>(perm[i])] = static_cast<int32_t>(i / group_size);
  return g_idx;
}

// The stored order the loader gives an act-order layer: columns sorted by group, stably.
std::vector<int32_t> sorted_by_group(const std::vector<int32_t>& g_idx) {
  std::vector<int32_t> order(g_idx.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return g_idx[static_cast<size_t>(a)] < g_idx[static_cast<size_t>(b)];
  });
  return order;
}

// AutoGPTQ / GPTQModel packing: qweight [cols / pack, rows], qzeros [groups, rows / pack].
void pack_gptq(const Layer& l, bool v1, std::vector<int32_t>& qweight, std::vector<int32_t>& qzeros) {
  const int pack = 32 / l.bits;
  qweight.assign(static_cast<size_t>(l.cols / pack * l.rows), 0);
  for (int64_t i = 0; i < l.cols / pack; ++i) {
    for (int64_t j = 0; j < l.rows; ++j) {
      uint32_t w = 0;
      for (int k = 0; k < pack; ++k) w |= static_cast<uint32_t>(l.q[static_cast<size_t>(j * l.cols + i * pack + k)]) << (l.bits * k);
      qweight[static_cast<size_t>(i * l.rows + j)] = static_cast<int32_t>(w);
    }
  }
  qzeros.assign(static_cast<size_t>(l.groups() * (l.rows / pack)), 0);
  for (int64_t g = 0; g < l.groups(); ++g) {
    for (int64_t j = 0; j < l.rows / pack; ++j) {
      uint32_t w = 0;
      for (int k = 0; k < pack; ++k) {
        const int32_t z = l.zeros[static_cast<size_t>(g * l.rows + j * pack + k)] - (v1 ? 1 : 0);
        w |= static_cast<uint32_t>(z) << (l.bits * k);
      }
      qzeros[static_cast<size_t>(g * (l.rows / pack) + j)] = static_cast<int32_t>(w);
    }
  }
}

// AutoAWQ's GEMM packing: qweight [cols, rows / 8], qzeros [groups, rows / 8], value i of
// a word holding output column 8j + order[i].
void pack_awq(const Layer& l, std::vector<int32_t>& qweight, std::vector<int32_t>& qzeros) {
  constexpr int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  qweight.assign(static_cast<size_t>(l.cols * (l.rows / 8)), 0);
  for (int64_t c = 0; c < l.cols; ++c) {
    for (int64_t j = 0; j < l.rows / 8; ++j) {
      uint32_t w = 0;
      for (int i = 0; i < 8; ++i) w |= static_cast<uint32_t>(l.q[static_cast<size_t>((j * 8 + order[i]) * l.cols + c)]) << (4 * i);
      qweight[static_cast<size_t>(c * (l.rows / 8) + j)] = static_cast<int32_t>(w);
    }
  }
  qzeros.assign(static_cast<size_t>(l.groups() * (l.rows / 8)), 0);
  for (int64_t g = 0; g < l.groups(); ++g) {
    for (int64_t j = 0; j < l.rows / 8; ++j) {
      uint32_t w = 0;
      for (int i = 0; i < 8; ++i) w |= static_cast<uint32_t>(l.zeros[static_cast<size_t>(g * l.rows + j * 8 + order[i])]) << (4 * i);
      qzeros[static_cast<size_t>(g * (l.rows / 8) + j)] = static_cast<int32_t>(w);
    }
  }
}

TensorView view_of(const std::string& name, DType type, std::vector<int64_t> shape, const void* data, uint64_t bytes) {
  TensorView t;
  t.name = name;
  t.dtype = type;
  t.n_dims = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  t.data = static_cast<const std::byte*>(data);
  t.bytes = bytes;
  return t;
}

// Packs `l` in `method`'s layout and repacks it.
Result<RepackedMatrix> roundtrip(const Layer& l, const PrequantConfig& cfg, const std::vector<int32_t>* g_idx = nullptr) {
  std::vector<int32_t> qweight, qzeros;
  std::vector<int64_t> qshape, zshape;
  if (cfg.method == PrequantConfig::Method::kAwq) {
    pack_awq(l, qweight, qzeros);
    qshape = {l.cols, l.rows / 8};
    zshape = {l.groups(), l.rows / 8};
  } else {
    pack_gptq(l, cfg.zero_offset == 1, qweight, qzeros);
    qshape = {l.cols / (32 / l.bits), l.rows};
    zshape = {l.groups(), l.rows / (32 / l.bits)};
  }
  const TensorView qw = view_of("x.qweight", DType::kF32, qshape, qweight.data(), qweight.size() * 4);
  const TensorView qz = view_of("x.qzeros", DType::kF32, zshape, qzeros.data(), qzeros.size() * 4);
  const TensorView sc = view_of("x.scales", DType::kF16, {l.groups(), l.rows}, l.scales.data(), l.scales.size() * 2);
  std::optional<TensorView> gi;
  if (g_idx != nullptr) gi = view_of("x.g_idx", DType::kF32, {l.cols}, g_idx->data(), g_idx->size() * 4);
  return prequant_repack(cfg, {&qw, &qz, &sc, gi ? &*gi : nullptr}, "x");
}

// Stored column j of `m` is column m.perm[j] of `l` (j itself without a perm).
void expect_exact(const Layer& l, const RepackedMatrix& m, DType type) {
  ASSERT_EQ(m.type, type);
  ASSERT_EQ(m.rows, l.rows);
  ASSERT_EQ(m.cols, l.cols);
  ASSERT_TRUE(m.perm.empty() || static_cast<int64_t>(m.perm.size()) == l.cols);
  std::vector<float> values(static_cast<size_t>(l.rows * l.cols));
  kernels::ref::dequantize_row(m.type, m.bytes.data(), values.data(), l.rows * l.cols);
  for (int64_t r = 0; r < l.rows; ++r) {
    for (int64_t j = 0; j < l.cols; ++j) {
      const int64_t c = m.perm.empty() ? j : m.perm[static_cast<size_t>(j)];
      ASSERT_EQ(values[static_cast<size_t>(r * l.cols + j)], l.value(r, c)) << "row " << r << " column " << c;
    }
  }
}

TEST(PrequantizedTest, GptqRepacksExactly) {
  std::mt19937 rng(11);
  for (int gs : {32, 64, 128}) {
    for (bool v1 : {true, false}) {
      const PrequantConfig cfg4{PrequantConfig::Method::kGptq, 4, gs, v1 ? 1 : 0};
      const Layer sym = random_layer(24, 256, gs, 4, true, rng);
      auto m = roundtrip(sym, cfg4);
      ASSERT_TRUE(m.is_ok()) << m.status().to_string();
      expect_exact(sym, *m, DType::kQ4_0);
      const Layer asym = random_layer(24, 256, gs, 4, false, rng);
      auto a = roundtrip(asym, cfg4);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      expect_exact(asym, *a, DType::kQ8_0);  // q - zero in int8: exact, twice the bytes
      const PrequantConfig cfg8{PrequantConfig::Method::kGptq, 8, gs, v1 ? 1 : 0};
      const Layer sym8 = random_layer(16, 256, gs, 8, true, rng);
      auto m8 = roundtrip(sym8, cfg8);
      ASSERT_TRUE(m8.is_ok()) << m8.status().to_string();
      expect_exact(sym8, *m8, DType::kQ8_0);
      auto a8 = roundtrip(random_layer(16, 256, gs, 8, false, rng), cfg8);
      ASSERT_FALSE(a8.is_ok());
      EXPECT_EQ(a8.status().code(), ErrorCode::kUnsupported);
      EXPECT_NE(a8.status().message().find("asymmetric"), std::string::npos);
    }
  }
  // A g_idx in column order keeps the columns where they are.
  Layer l = random_layer(8, 128, 32, 4, true, rng);
  std::vector<int32_t> g_idx(128);
  for (int c = 0; c < 128; ++c) g_idx[static_cast<size_t>(c)] = c / 32;
  const PrequantConfig cfg{PrequantConfig::Method::kGptq, 4, 32, 1};
  auto in_order = roundtrip(l, cfg, &g_idx);
  ASSERT_TRUE(in_order.is_ok());
  EXPECT_TRUE(in_order->perm.empty());
  expect_exact(l, *in_order, DType::kQ4_0);
  g_idx[3] = 9;  // not a group at all
  EXPECT_EQ(roundtrip(l, cfg, &g_idx).status().code(), ErrorCode::kFormat);
}

TEST(PrequantizedTest, ActOrderLayersAreStoredSortedByGroupWithTheirColumnOrder) {
  std::mt19937 rng(14);
  for (int bits : {4, 8}) {
    for (bool sym : {true, false}) {
      if (bits == 8 && !sym) continue;  // refused whatever the order
      for (int gs : {32, 64, 128}) {
        SCOPED_TRACE(fmt::format("{} bits {} g{}", bits, sym ? "sym" : "asym", gs));
        Layer l = random_layer(16, 256, gs, bits, sym, rng);
        l.g_idx = act_order_g_idx(l.cols, gs, rng);
        auto m = roundtrip(l, {PrequantConfig::Method::kGptq, bits, gs, 1}, &l.g_idx);
        ASSERT_TRUE(m.is_ok()) << m.status().to_string();
        EXPECT_EQ(m->perm, sorted_by_group(l.g_idx));
        expect_exact(l, *m, bits == 4 && sym ? DType::kQ4_0 : DType::kQ8_0);
      }
    }
  }
  // A group whose column count is not a multiple of 32 cannot fill whole blocks.
  Layer l = random_layer(8, 128, 32, 4, true, rng);
  l.g_idx.resize(128);
  for (int c = 0; c < 128; ++c) l.g_idx[static_cast<size_t>(c)] = c < 48 ? 0 : c < 64 ? 1 : c / 32;
  std::swap(l.g_idx[0], l.g_idx[127]);
  auto uneven = roundtrip(l, {PrequantConfig::Method::kGptq, 4, 32, 1}, &l.g_idx);
  ASSERT_FALSE(uneven.is_ok());
  EXPECT_EQ(uneven.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(uneven.status().message().find("multiple of 32"), std::string::npos) << uneven.status().message();
}

TEST(PrequantizedTest, TheDownProjectionsColumnOrderMovesIntoTheGateAndUpRows) {
  std::mt19937 rng(15);
  const int64_t dim = 32, hidden = 128;
  Layer down = random_layer(dim, hidden, 32, 4, true, rng);
  down.g_idx = act_order_g_idx(hidden, 32, rng);
  std::vector<int32_t> qweight, qzeros;
  pack_gptq(down, true, qweight, qzeros);
  std::uniform_real_distribution<float> weight(-1.0f, 1.0f);
  std::vector<float> gate(static_cast<size_t>(hidden * dim)), up(gate.size());
  for (float& v : gate) v = weight(rng);
  for (float& v : up) v = weight(rng);
  LoadedModel m;
  m.tensors.push_back(view_of("blk.0.ffn_gate.weight", DType::kF32, {hidden, dim}, gate.data(), gate.size() * 4));
  m.tensors.push_back(view_of("blk.0.ffn_up.weight", DType::kF32, {hidden, dim}, up.data(), up.size() * 4));
  m.tensors.push_back(view_of("model.layers.0.mlp.down_proj.scales", DType::kF16, {down.groups(), dim},
                              down.scales.data(), down.scales.size() * 2));
  const std::vector<TensorView> ints = {
      view_of("model.layers.0.mlp.down_proj.qweight", DType::kF32, {hidden / 8, dim}, qweight.data(), qweight.size() * 4),
      view_of("model.layers.0.mlp.down_proj.qzeros", DType::kF32, {down.groups(), dim / 8}, qzeros.data(),
              qzeros.size() * 4),
      view_of("model.layers.0.mlp.down_proj.g_idx", DType::kF32, {hidden}, down.g_idx.data(), down.g_idx.size() * 4)};
  auto canonical = [](const std::string& s) {
    return s == "model.layers.0.mlp.down_proj.weight" ? std::string("blk.0.ffn_down.weight") : s;
  };
  PrequantConfig cfg{PrequantConfig::Method::kGptq, 4, 32, 1};
  cfg.desc_act = true;
  const Status st = prequant_apply(cfg, ints, canonical, m);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const std::vector<int32_t> perm = sorted_by_group(down.g_idx);
  for (const TensorView& t : m.tensors) EXPECT_FALSE(t.name.ends_with(".perm")) << t.name;
  const TensorView* d = m.find("blk.0.ffn_down.weight");
  ASSERT_NE(d, nullptr);
  std::vector<float> dv(static_cast<size_t>(dim * hidden));
  kernels::ref::dequantize_row(d->dtype, d->data, dv.data(), dim * hidden);
  for (int64_t r = 0; r < dim; ++r) {
    for (int64_t j = 0; j < hidden; ++j) {
      ASSERT_EQ(dv[static_cast<size_t>(r * hidden + j)], down.value(r, perm[static_cast<size_t>(j)]));
    }
  }
  // Row j of gate and up is their row perm[j]: down's column j reads silu(gate_j) * up_j.
  for (const auto& [name, source] : {std::pair{"blk.0.ffn_gate.weight", &gate}, std::pair{"blk.0.ffn_up.weight", &up}}) {
    const TensorView* t = m.find(name);
    ASSERT_NE(t, nullptr);
    const auto* rows = reinterpret_cast<const float*>(t->data);
    for (int64_t j = 0; j < hidden; ++j) {
      for (int64_t c = 0; c < dim; ++c) {
        ASSERT_EQ(rows[j * dim + c], (*source)[static_cast<size_t>(perm[static_cast<size_t>(j)] * dim + c)]) << name;
      }
    }
  }
}

TEST(PrequantizedTest, AwqRepacksExactly) {
  std::mt19937 rng(12);
  const PrequantConfig cfg{PrequantConfig::Method::kAwq, 4, 64, 0};
  const Layer l = random_layer(32, 192, 64, 4, false, rng);
  auto m = roundtrip(l, cfg);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  expect_exact(l, *m, DType::kQ8_0);
  const Layer sym = random_layer(32, 192, 64, 4, true, rng);
  auto s = roundtrip(sym, cfg);
  ASSERT_TRUE(s.is_ok());
  expect_exact(sym, *s, DType::kQ4_0);
}

TEST(PrequantizedTest, MismatchedShapesAndUnsupportedLayoutsAreRefused) {
  std::mt19937 rng(13);
  const Layer l = random_layer(16, 128, 32, 4, true, rng);
  std::vector<int32_t> qweight, qzeros;
  pack_gptq(l, true, qweight, qzeros);
  const TensorView qw = view_of("x.qweight", DType::kF32, {16, 16}, qweight.data(), qweight.size() * 4);
  const TensorView qz = view_of("x.qzeros", DType::kF32, {4, 2}, qzeros.data(), qzeros.size() * 4);
  const TensorView sc = view_of("x.scales", DType::kF16, {4, 16}, l.scales.data(), l.scales.size() * 2);
  const PrequantConfig cfg{PrequantConfig::Method::kGptq, 4, 32, 1};
  ASSERT_TRUE(prequant_repack(cfg, {&qw, &qz, &sc, nullptr}, "x").is_ok());
  const TensorView bad_scales = view_of("x.scales", DType::kF16, {2, 32}, l.scales.data(), l.scales.size() * 2);
  EXPECT_EQ(prequant_repack(cfg, {&qw, &qz, &bad_scales, nullptr}, "x").status().code(), ErrorCode::kFormat);
  const TensorView bad_zeros = view_of("x.qzeros", DType::kF32, {2, 4}, qzeros.data(), qzeros.size() * 4);
  EXPECT_EQ(prequant_repack(cfg, {&qw, &bad_zeros, &sc, nullptr}, "x").status().code(), ErrorCode::kFormat);
  const TensorView f32_scales = view_of("x.scales", DType::kF32, {4, 8}, l.scales.data(), l.scales.size() * 2);
  EXPECT_EQ(prequant_repack(cfg, {&qw, &qz, &f32_scales, nullptr}, "x").status().code(), ErrorCode::kFormat);
  EXPECT_EQ(prequant_repack(cfg, {&qw, &qz, nullptr, nullptr}, "x").status().code(), ErrorCode::kFormat);
  // Groups of 16 are not whole 32-value blocks.
  const Layer small = random_layer(16, 128, 16, 4, true, rng);
  auto r = roundtrip(small, {PrequantConfig::Method::kGptq, 4, 16, 1});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
}

TEST(PrequantizedTest, ConfigIsReadOrRefusedByName) {
  auto parse = [](const char* json) { return prequant_config(boost::json::parse(json).as_object()); };
  auto none = parse(R"({"hidden_size": 64})");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
  auto gptq = parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 64,
                        "desc_act": false, "sym": true, "checkpoint_format": "gptq_v2"}})");
  ASSERT_TRUE(gptq.is_ok()) << gptq.status().to_string();
  EXPECT_EQ((*gptq)->bits, 8);
  EXPECT_EQ((*gptq)->group_size, 64);
  EXPECT_EQ((*gptq)->zero_offset, 0);
  EXPECT_FALSE((*gptq)->desc_act);
  auto v1 = parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1}})");
  ASSERT_TRUE(v1.is_ok());
  EXPECT_EQ((*v1)->zero_offset, 1);
  EXPECT_EQ((*v1)->group_size, -1);
  auto awq = parse(R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                       "zero_point": true, "version": "gemm"}})");
  ASSERT_TRUE(awq.is_ok());
  EXPECT_EQ((*awq)->method, PrequantConfig::Method::kAwq);
  struct Refused {
    const char* json;
    const char* words;
  };
  for (const Refused& r : {Refused{R"({"quantization_config": {"quant_method": "bitsandbytes"}})", "bitsandbytes"},
                           Refused{R"({"quantization_config": {"quant_method": "gptq", "bits": 3}})", "3 bits"},
                           Refused{R"({"quantization_config": {"quant_method": "gptq", "checkpoint_format": "marlin"}})",
                                   "marlin"},
                           Refused{R"({"quantization_config": {"quant_method": "awq", "version": "gemv"}})", "gemv"},
                           Refused{R"({"quantization_config": {"quant_method": "awq", "bits": 8}})", "8 bits"}}) {
    auto st = parse(r.json);
    ASSERT_FALSE(st.is_ok()) << r.json;
    EXPECT_EQ(st.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(st.status().message().find(r.words), std::string::npos) << st.status().message();
  }
}

// stories260K's HF checkpoint with its attention projections quantized
// (symmetric round-to-nearest, groups of 32) and packed as GPTQ (or AWQ) would write
// them; the FFN (172 wide) stays F32 as a partly quantized checkpoint keeps it. Returns the expected value of every quantized matrix.
// With act-order, each layer's q, k and v share one g_idx (as they share their inputs and
// so their Hessian), except v in odd layers, which gets its own; o gets its own, or
// (kQkv) keeps its columns in order.
enum class ActOrder { kNone, kAttention, kQkv };

std::map<std::string, std::vector<float>> write_quantized_hf(const std::filesystem::path& dir, const char* method,
                                                              int bits, bool sym, ActOrder act_order = ActOrder::kNone) {
  const auto src = shared_path("models/stories260K-hf");
  std::filesystem::create_directories(dir);
  for (const char* f : {"tokenizer.model", "tokenizer_config.json", "generation_config.json"}) {
    std::filesystem::copy_file(src / f, dir / f);
  }
  auto text = read_small_file(src / "config.json", 1 << 20);
  boost::json::object config = boost::json::parse(*text).as_object();
  config["quantization_config"] = {{"quant_method", method}, {"bits", bits}, {"group_size", 32},
                                   {"desc_act", act_order != ActOrder::kNone}, {"sym", sym}, {"version", "gemm"}};
  std::ofstream(dir / "config.json") << boost::json::serialize(config);

  auto file = MappedFile::open(src / "model.safetensors");
  auto st = safetensors_parse(file->bytes(), "model.safetensors");
  SafetensorsWriter w;
  std::map<std::string, std::vector<float>> expected;
  const int32_t maxq = (1 << bits) - 1;
  const bool awq = std::string(method) == "awq";
  std::mt19937 rng(16);
  std::map<std::string, std::vector<int32_t>> shared_g_idx;  // per layer, for q, k and v
  for (const TensorView& t : st->tensors) {
    const std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.n_dims);
    // Attention projections only: the FFN's 172 outputs or inputs are not whole packed
    // words or groups, so GPTQ tools leave those layers unquantized.
    const bool linear = t.name.ends_with("_proj.weight") && t.cols() % 32 == 0 && t.rows() % 8 == 0;
    if (!linear) {
      EXPECT_TRUE(w.add(t.name, t.dtype, shape, {t.data, t.bytes}).is_ok());
      continue;
    }
    const int64_t rows = t.rows(), cols = t.cols();
    const auto* v = reinterpret_cast<const float*>(t.data);
    Layer l{rows, cols, 32, bits};
    const std::string layer = t.name.substr(0, t.name.find("self_attn"));
    const bool odd = (t.name[std::string("model.layers.").size()] - '0') % 2 == 1;
    if (act_order != ActOrder::kNone && !t.name.ends_with("o_proj.weight")) {
      if (t.name.ends_with("v_proj.weight") && odd) {
        l.g_idx = act_order_g_idx(cols, 32, rng);
      } else {
        if (!shared_g_idx.contains(layer)) shared_g_idx[layer] = act_order_g_idx(cols, 32, rng);
        l.g_idx = shared_g_idx[layer];
      }
    } else if (act_order == ActOrder::kAttention) {
      l.g_idx = act_order_g_idx(cols, 32, rng);
    }
    std::vector<std::vector<int64_t>> members(static_cast<size_t>(cols / 32));  // each group's columns
    for (int64_t c = 0; c < cols; ++c) members[static_cast<size_t>(l.group(c))].push_back(c);
    l.q.resize(static_cast<size_t>(rows * cols));
    for (const std::vector<int64_t>& group : members) {
      for (int64_t r = 0; r < rows; ++r) {
        float lo = 0.0f, hi = 0.0f;
        for (int64_t c : group) {
          lo = std::min(lo, v[r * cols + c]);
          hi = std::max(hi, v[r * cols + c]);
        }
        if (sym) hi = std::max(hi, -lo), lo = -hi;
        const float scale = fp16_to_f32(f32_to_fp16(std::max(hi - lo, 1e-6f) / static_cast<float>(maxq)));
        const int32_t zero = sym ? (maxq + 1) / 2 : std::clamp(static_cast<int32_t>(std::nearbyint(-lo / scale)), 1, maxq);
        l.scales.push_back(f32_to_fp16(scale));
        l.zeros.push_back(zero);
        for (int64_t c : group) {
          l.q[static_cast<size_t>(r * cols + c)] =
              std::clamp(static_cast<int32_t>(std::nearbyint(v[r * cols + c] / scale)) + zero, 0, maxq);
        }
      }
    }
    // scales/zeros were pushed group-major per row inside the group loop: [groups, rows].
    std::vector<int32_t> qweight, qzeros;
    const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
    if (awq) {
      pack_awq(l, qweight, qzeros);
      EXPECT_TRUE(w.add_int32(module + ".qweight", std::vector<int64_t>{cols, rows / 8}, qweight).is_ok());
      EXPECT_TRUE(w.add_int32(module + ".qzeros", std::vector<int64_t>{cols / 32, rows / 8}, qzeros).is_ok());
    } else {
      pack_gptq(l, true, qweight, qzeros);
      const int64_t pack = 32 / bits;
      EXPECT_TRUE(w.add_int32(module + ".qweight", std::vector<int64_t>{cols / pack, rows}, qweight).is_ok());
      EXPECT_TRUE(w.add_int32(module + ".qzeros", std::vector<int64_t>{cols / 32, rows / pack}, qzeros).is_ok());
      std::vector<int32_t> g_idx(static_cast<size_t>(cols));
      for (int64_t c = 0; c < cols; ++c) g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(l.group(c));
      EXPECT_TRUE(w.add_int32(module + ".g_idx", std::vector<int64_t>{cols}, g_idx).is_ok());
    }
    EXPECT_TRUE(w.add(module + ".scales", DType::kF16, std::vector<int64_t>{cols / 32, rows},
                      std::as_bytes(std::span(l.scales)))
                    .is_ok());
    std::vector<float>& e = expected[module];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) e.push_back(l.value(r, c));
    }
  }
  EXPECT_TRUE(w.write(dir / "model.safetensors").is_ok());
  return expected;
}

// "model.layers.3.self_attn.q_proj" -> "blk.3.attn_q" (stories260K's attention projections).
std::string canonical_base(const std::string& module) {
  const std::pair<const char*, const char*> names[] = {
      {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}};
  const std::string layer = module.substr(std::string("model.layers.").size(), 1);
  for (const auto& [hf, ours] : names) {
    if (module.ends_with(hf)) return "blk." + layer + "." + ours;
  }
  return module;
}

// Every quantized matrix loads as exact blocks of the expected values (stored column j
// being column perm[j] where the matrix has a .perm).
void expect_loaded_exactly(const LoadedModel& m, const std::map<std::string, std::vector<float>>& expected,
                           DType type) {
  size_t checked = 0;
  for (const auto& [module, values] : expected) {
    const std::string canonical = canonical_base(module) + ".weight";
    const TensorView* t = m.find(canonical);
    ASSERT_NE(t, nullptr) << canonical;
    EXPECT_EQ(t->dtype, type) << canonical;
    std::vector<float> got(values.size());
    kernels::ref::dequantize_row(t->dtype, t->data, got.data(), static_cast<int64_t>(got.size()));
    if (const TensorView* perm = m.find(canonical_base(module) + ".perm")) {
      ASSERT_EQ(perm->dtype, DType::kF32);
      ASSERT_EQ(perm->elements(), t->cols());
      const auto* order = reinterpret_cast<const float*>(perm->data);
      std::vector<float> in_order(got.size());
      for (int64_t r = 0; r < t->rows(); ++r) {
        for (int64_t j = 0; j < t->cols(); ++j) {
          in_order[static_cast<size_t>(r * t->cols() + static_cast<int64_t>(order[j]))] = got[static_cast<size_t>(r * t->cols() + j)];
        }
      }
      got = std::move(in_order);
    }
    ASSERT_EQ(got, values) << canonical;
    ++checked;
  }
  EXPECT_EQ(checked, 20u);
  EXPECT_EQ(m.find("blk.0.ffn_down.weight")->dtype, DType::kF32);
  EXPECT_EQ(m.find("blk.0.ffn_gate.weight")->dtype, DType::kF32);
}

TEST(PrequantizedTest, GptqAndAwqCheckpointsOfStories260KLoadExactlyAndRun) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K-hf"));
  TempDir dir;
  struct Case {
    const char* method;
    int bits;
    bool sym;
    DType type;
  };
  for (const Case& c : {Case{"gptq", 4, true, DType::kQ4_0}, Case{"gptq", 4, false, DType::kQ8_0},
                        Case{"awq", 4, false, DType::kQ8_0}, Case{"gptq", 8, true, DType::kQ8_0}}) {
    SCOPED_TRACE(std::string(c.method) + " " + std::to_string(c.bits) + (c.sym ? " sym" : " asym"));
    const auto path = dir.path() / fmt::format("{}-{}-{}", c.method, c.bits, c.sym);
    const auto expected = write_quantized_hf(path, c.method, c.bits, c.sym);
    auto m = model_open(path);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    expect_loaded_exactly(*m, expected, c.type);
    if (c.bits != 8) continue;
    // 8-bit: the model still tells the story (ground truth's first ids, models/README.md).
    auto backend = make_cpu_backend();
    auto llama = Model::create(m->config, m->tensors, *backend, 64);
    ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
    auto cache = KvCache::create(*backend, {m->config.n_layers, m->config.kv_dim(), 16, 8, KvDType::kF32});
    ASSERT_TRUE(cache.is_ok());
    GenerateOptions o;
    o.spec.max_tokens = 8;
    const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
    auto r = generate(**llama, *cache, prompt, o);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->tokens, (std::vector<TokenId>{432, 383, 286, 261, 376, 298, 315, 421}));
  }
}

// Greedy decoding of stories260K's story prompt: every step's logits, and the tokens.
struct Decoded {
  std::vector<std::vector<float>> logits;
  std::vector<TokenId> tokens;
};

Decoded decode(const ModelConfig& config, const std::vector<TensorView>& tensors, Backend& backend, int steps) {
  Decoded out;
  auto model = Model::create(config, tensors, backend, 64);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  if (!model.is_ok()) return out;
  auto cache = KvCache::create(backend, {config.n_layers, config.kv_dim(), 16, 8, KvDType::kF32});
  std::vector<TokenId> tokens = {1, 403, 407, 261, 378};
  const int32_t blocks[] = {0, 1, 2, 3};
  ModelInput in;
  int32_t done = 0;
  for (int step = 0; step < steps; ++step) {
    in.clear(16);
    EXPECT_TRUE(in.add_sequence(std::span(tokens).subspan(static_cast<size_t>(done)), done, blocks, true).is_ok());
    std::vector<float>& row = out.logits.emplace_back(static_cast<size_t>(config.vocab_size));
    EXPECT_TRUE((*model)->forward(in, *cache, row.data()).is_ok());
    done = static_cast<int32_t>(tokens.size());
    tokens.push_back(static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin()));
    out.tokens.push_back(tokens.back());
  }
  return out;
}

// The largest difference of a logit between a and b, relative to the row's largest.
double worst_difference(const Decoded& a, const Decoded& b) {
  double worst = 0;
  for (size_t s = 0; s < std::min(a.logits.size(), b.logits.size()); ++s) {
    float scale = 0;
    for (float v : a.logits[s]) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a.logits[s].size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(a.logits[s][i] - b.logits[s][i]) / scale));
    }
  }
  return worst;
}

// A mixture of experts with every expert's gate, up and down packed as AutoAWQ (4-bit
// asymmetric) or GPTQ (4-bit symmetric) write them, the router and attention as stored:
// each expert matrix loads under its canonical per-expert name as exact blocks of its
// values, and the model routes and decodes on them.
TEST(PrequantizedTest, ExpertMatricesOfAMixtureLoadExactlyFromAwqAndGptq) {
  TempDir dir;
  for (const std::string method : {"awq", "gptq"}) {
    SCOPED_TRACE(method);
    const bool awq = method == "awq";
    SynthOptions s;
    s.arch = "qwen3moe";
    s.shape = synth_preset("tiny").value();
    s.shape.layers = 2;
    s.hf = dir.path() / method / "src";
    ASSERT_TRUE(synth_write(s).is_ok());
    const auto out = dir.path() / method / "quantized";
    std::filesystem::create_directories(out);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) std::filesystem::copy_file(s.hf / f, out / f);
    auto text = read_small_file(s.hf / "config.json", 1 << 20);
    ASSERT_TRUE(text.is_ok());
    boost::json::object config = boost::json::parse(*text).as_object();
    config["quantization_config"] = {{"quant_method", method}, {"bits", 4}, {"group_size", 32},
                                     {"desc_act", false},      {"sym", !awq}, {"version", "gemm"}};
    std::ofstream(out / "config.json") << boost::json::serialize(config);

    auto file = MappedFile::open(s.hf / "model.safetensors");
    ASSERT_TRUE(file.is_ok());
    auto st = safetensors_parse(file->bytes(), "model.safetensors");
    ASSERT_TRUE(st.is_ok());
    SafetensorsWriter w;
    std::map<std::string, Layer> experts;  // canonical name -> its values
    std::mt19937 rng(47);
    for (const TensorView& t : st->tensors) {
      const std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.n_dims);
      int layer = -1, expert = -1;
      char proj[16] = {};
      if (std::sscanf(t.name.c_str(), "model.layers.%d.mlp.experts.%d.%15[a-z]_proj.weight", &layer, &expert, proj) != 3) {
        ASSERT_TRUE(w.add(t.name, t.dtype, shape, {t.data, t.bytes}).is_ok());
        continue;
      }
      const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
      Layer l = random_layer(t.rows(), t.cols(), 32, 4, !awq, rng);
      std::vector<int32_t> qweight, qzeros;
      if (awq) {
        pack_awq(l, qweight, qzeros);
        ASSERT_TRUE(w.add_int32(module + ".qweight", std::vector<int64_t>{l.cols, l.rows / 8}, qweight).is_ok());
      } else {
        pack_gptq(l, true, qweight, qzeros);
        ASSERT_TRUE(w.add_int32(module + ".qweight", std::vector<int64_t>{l.cols / 8, l.rows}, qweight).is_ok());
        std::vector<int32_t> g_idx(static_cast<size_t>(l.cols));
        for (int64_t c = 0; c < l.cols; ++c) g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(c / 32);
        ASSERT_TRUE(w.add_int32(module + ".g_idx", std::vector<int64_t>{l.cols}, g_idx).is_ok());
      }
      ASSERT_TRUE(w.add_int32(module + ".qzeros", std::vector<int64_t>{l.groups(), l.rows / 8}, qzeros).is_ok());
      ASSERT_TRUE(w.add(module + ".scales", DType::kF16, std::vector<int64_t>{l.groups(), l.rows},
                        std::as_bytes(std::span(l.scales)))
                      .is_ok());
      experts.emplace(fmt::format("blk.{}.ffn_{}.{}.weight", layer, proj, expert), std::move(l));
    }
    ASSERT_TRUE(w.write(out / "model.safetensors").is_ok());
    ASSERT_EQ(experts.size(), 2u * 8 * 3);

    auto m = model_open(out);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    for (const auto& [name, l] : experts) {
      const TensorView* t = m->find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->dtype, awq ? DType::kQ8_0 : DType::kQ4_0) << name;
      std::vector<float> got(static_cast<size_t>(l.rows * l.cols));
      kernels::ref::dequantize_row(t->dtype, t->data, got.data(), static_cast<int64_t>(got.size()));
      for (int64_t r = 0; r < l.rows; ++r) {
        for (int64_t c = 0; c < l.cols; ++c) {
          ASSERT_EQ(got[static_cast<size_t>(r * l.cols + c)], l.value(r, c)) << name << " row " << r << " column " << c;
        }
      }
    }
    EXPECT_EQ(m->find("blk.0.ffn_gate_inp.weight")->dtype, DType::kF16);  // the router as stored
    auto backend = make_cpu_backend();
    auto model = Model::create(m->config, m->tensors, *backend, 64);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    auto cache = KvCache::create(*backend, {m->config.n_layers, m->config.kv_dim(), 16, 8, KvDType::kF32});
    ASSERT_TRUE(cache.is_ok());
    GenerateOptions o;
    o.spec.max_tokens = 6;
    o.spec.ignore_stop = true;
    const std::vector<TokenId> prompt = {1, 40, 77, 300};
    auto r = generate(**model, *cache, prompt, o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->tokens.size(), 6u);
  }
}

TEST(PrequantizedTest, AnActOrderCheckpointRunsAsItsWeightsInColumnOrderDo) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K-hf"));
  TempDir dir;
  const auto expected = write_quantized_hf(dir.path(), "gptq", 4, true, ActOrder::kAttention);
  auto m = model_open(dir.path());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  expect_loaded_exactly(*m, expected, DType::kQ4_0);
  const auto perms = std::count_if(m->tensors.begin(), m->tensors.end(),
                                   [](const TensorView& t) { return t.name.ends_with(".perm"); });
  EXPECT_EQ(perms, 20);
  // The same values unquantized, in column order: the plain checkpoint with its
  // attention matrices replaced by them.
  auto plain = model_open(shared_path("models/stories260K-hf"));
  ASSERT_TRUE(plain.is_ok());
  for (const auto& [module, values] : expected) {
    auto it = std::find_if(plain->tensors.begin(), plain->tensors.end(),
                           [&](const TensorView& t) { return t.name == canonical_base(module) + ".weight"; });
    ASSERT_NE(it, plain->tensors.end());
    ASSERT_EQ(it->dtype, DType::kF32);
    it->data = reinterpret_cast<const std::byte*>(values.data());
  }
  // The loaded model with its Q4_0 matrices widened to F32, columns still sorted by
  // group and read through their .perm orders.
  std::vector<TensorView> widened = m->tensors;
  std::vector<std::vector<float>> widened_values;
  for (TensorView& t : widened) {
    if (t.dtype != DType::kQ4_0) continue;
    std::vector<float>& v = widened_values.emplace_back(static_cast<size_t>(t.elements()));
    kernels::ref::dequantize_row(t.dtype, t.data, v.data(), t.elements());
    t.dtype = DType::kF32;
    t.data = reinterpret_cast<const std::byte*>(v.data());
    t.bytes = v.size() * sizeof(float);
  }
  // What a loader that ignored g_idx would run: the sorted columns read in order.
  std::vector<TensorView> unpermuted;
  std::copy_if(widened.begin(), widened.end(), std::back_inserter(unpermuted),
               [](const TensorView& t) { return !t.name.ends_with(".perm"); });

  auto reference = make_backend("cpu-reference");
  ASSERT_TRUE(reference.is_ok());
  const Decoded want = decode(plain->config, plain->tensors, **reference, 16);
  const Decoded permuted = decode(m->config, widened, **reference, 16);
  EXPECT_EQ(permuted.tokens, want.tokens);
  EXPECT_LT(worst_difference(permuted, want), 1e-5) << "the same weights, summed in another order";
  const Decoded ignored = decode(m->config, unpermuted, **reference, 16);
  EXPECT_GT(worst_difference(ignored, want), 0.1) << "the column order must matter for this test to mean anything";
  // As Q4_0 (activations quantized in 32-value blocks of the permuted input), on the
  // reference and the fast kernels: as close as any Q4_0 product is to its F32 weights.
  const Decoded got = decode(m->config, m->tensors, **reference, 16);
  auto cpu = make_cpu_backend();
  const Decoded fast = decode(m->config, m->tensors, *cpu, 16);
  EXPECT_LT(worst_difference(got, permuted), 0.02);
  EXPECT_LT(worst_difference(fast, permuted), 0.02);
  std::printf("act-order logits vs column order: F32 %.2g, Q4_0 reference %.2g, Q4_0 fast %.2g, order ignored %.2g\n",
              worst_difference(permuted, want), worst_difference(got, permuted), worst_difference(fast, permuted),
              worst_difference(ignored, want));
}

TEST(PrequantizedTest, ActOrderReplicatesColumnOrdersOverRanksAndRefusesToSplitTheOutputProjections) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K-hf"));
  TempDir dir;
  for (ActOrder a : {ActOrder::kQkv, ActOrder::kAttention}) {
    const auto path = dir.path() / (a == ActOrder::kQkv ? "qkv" : "attention");
    write_quantized_hf(path, "gptq", 4, true, a);
    ResidentOptions r;
    r.model = path;
    r.shm_dir = dir.path();
    r.instance = a == ActOrder::kQkv ? "qkv" : "attention";
    r.tp = 2;
    auto published = resident_publish(r);
    if (a == ActOrder::kAttention) {
      ASSERT_FALSE(published.is_ok());
      EXPECT_EQ(published.status().code(), ErrorCode::kUnsupported);
      EXPECT_NE(published.status().message().find("--tp 1"), std::string::npos) << published.status().message();
      continue;
    }
    ASSERT_TRUE(published.is_ok()) << published.status().to_string();
    auto w = weights_attach(segment_path(dir.path(), r.instance, "weights"));
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    for (int rank = 0; rank < 2; ++rank) {
      const auto tensors = w->tensors(rank);
      auto perm = std::find_if(tensors.begin(), tensors.end(),
                               [](const TensorView& t) { return t.name == "blk.0.attn_q.perm"; });
      ASSERT_NE(perm, tensors.end());
      EXPECT_EQ(perm->shape[0], w->config.dim) << "every rank reads all of its input";
      auto q = std::find_if(tensors.begin(), tensors.end(),
                            [](const TensorView& t) { return t.name == "blk.0.attn_q.weight"; });
      ASSERT_NE(q, tensors.end());
      EXPECT_EQ(q->shape[0], w->config.q_dim() / 2);
    }
  }
}

TEST(PrequantizedTest, BrokenCheckpointsAreRefused) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K-hf"));
  TempDir dir;
  write_quantized_hf(dir.path(), "gptq", 4, true);
  // Without quantization_config, I32 tensors are refused by the safetensors reader.
  auto text = read_small_file(dir.path() / "config.json", 1 << 20);
  boost::json::object config = boost::json::parse(*text).as_object();
  config.erase("quantization_config");
  std::ofstream(dir.path() / "config.json") << boost::json::serialize(config);
  auto plain = model_open(dir.path());
  ASSERT_FALSE(plain.is_ok());
  EXPECT_NE(plain.status().message().find("I32"), std::string::npos) << plain.status().message();
  // desc_act with a g_idx in column order.
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"desc_act", true}};
  std::ofstream(dir.path() / "config.json") << boost::json::serialize(config);
  ASSERT_TRUE(model_open(dir.path()).is_ok());  // its g_idx is in column order: fine
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 32}};
  std::ofstream(dir.path() / "config.json") << boost::json::serialize(config);
  auto wrong_bits = model_open(dir.path());  // 4-bit words read as 8-bit: shapes disagree
  ASSERT_FALSE(wrong_bits.is_ok());
  EXPECT_EQ(wrong_bits.status().code(), ErrorCode::kFormat) << wrong_bits.status().to_string();
}

TEST(PrequantizedTest, ALayerMissingAPartIsRefused) {
  std::vector<TensorView> ints;
  std::vector<int32_t> words(64, 0);
  ints.push_back(view_of("model.layers.0.self_attn.q_proj.qweight", DType::kF32, {8, 8}, words.data(), 256));
  LoadedModel m;
  auto canonical = [](const std::string& s) { return s == "model.layers.0.self_attn.q_proj.weight" ? std::string("blk.0.attn_q.weight") : s; };
  const Status st = prequant_apply({PrequantConfig::Method::kGptq, 4, 32, 1}, ints, canonical, m);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("lacks its qzeros"), std::string::npos) << st.message();
  // An act-order checkpoint must say each column's group.
  std::vector<int32_t> zeros(8, 0), qw(64, 0);
  std::vector<uint16_t> scales(2 * 8, f32_to_fp16(0.01f));
  std::vector<TensorView> parts = {view_of("model.layers.0.self_attn.q_proj.qweight", DType::kF32, {8, 8}, qw.data(), 256),
                                   view_of("model.layers.0.self_attn.q_proj.qzeros", DType::kF32, {2, 1}, zeros.data(), 8)};
  LoadedModel with_scales;
  with_scales.tensors.push_back(
      view_of("model.layers.0.self_attn.q_proj.scales", DType::kF16, {2, 8}, scales.data(), scales.size() * 2));
  PrequantConfig act_order{PrequantConfig::Method::kGptq, 4, 32, 1};
  act_order.desc_act = true;
  const Status no_g_idx = prequant_apply(act_order, parts, canonical, with_scales);
  ASSERT_FALSE(no_g_idx.is_ok());
  EXPECT_NE(no_g_idx.message().find("no g_idx"), std::string::npos) << no_g_idx.message();
  std::vector<TensorView> stray = {view_of("model.layers.0.mlp.extra", DType::kF32, {2}, words.data(), 8)};
  EXPECT_EQ(prequant_apply({PrequantConfig::Method::kGptq, 4, 32, 1}, stray, canonical, m).code(), ErrorCode::kFormat);
}

}  // namespace
}  // namespace hearth
