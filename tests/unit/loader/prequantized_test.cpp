// Pre-quantized Hugging Face checkpoints (GPTQ, AWQ). The test tensors are packed here
// the way each format's reference code packs them (AutoGPTQ's QuantLinear.pack, with
// its zero - 1; GPTQModel's v2 without; AutoAWQ's GEMM pack with the 0 2 4 6 1 3 5 7
// order), from known integers, so the bit order is checked without a download: every
// repacked block must give back scale * (q - zero) exactly.
#include "loader/prequantized.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <random>

#include "common/half.h"
#include "common/mapped_file.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/reference/reference.h"
#include "loader/model.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
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
  int64_t groups() const { return cols / group_size; }
  float value(int64_t r, int64_t c) const {
    const auto g = static_cast<size_t>((c / group_size) * rows + r);
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

void expect_exact(const Layer& l, const RepackedMatrix& m, DType type) {
  ASSERT_EQ(m.type, type);
  ASSERT_EQ(m.rows, l.rows);
  ASSERT_EQ(m.cols, l.cols);
  std::vector<float> values(static_cast<size_t>(l.rows * l.cols));
  kernels::ref::dequantize_row(m.type, m.bytes.data(), values.data(), l.rows * l.cols);
  for (int64_t r = 0; r < l.rows; ++r) {
    for (int64_t c = 0; c < l.cols; ++c) {
      ASSERT_EQ(values[static_cast<size_t>(r * l.cols + c)], l.value(r, c)) << "row " << r << " column " << c;
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
  // A g_idx in column order is accepted; one out of order (act-order) is refused by name.
  const Layer l = random_layer(8, 128, 32, 4, true, rng);
  std::vector<int32_t> g_idx(128);
  for (int c = 0; c < 128; ++c) g_idx[static_cast<size_t>(c)] = c / 32;
  const PrequantConfig cfg{PrequantConfig::Method::kGptq, 4, 32, 1};
  auto in_order = roundtrip(l, cfg, &g_idx);
  ASSERT_TRUE(in_order.is_ok());
  expect_exact(l, *in_order, DType::kQ4_0);
  std::swap(g_idx[3], g_idx[100]);
  auto act_order = roundtrip(l, cfg, &g_idx);
  ASSERT_FALSE(act_order.is_ok());
  EXPECT_EQ(act_order.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(act_order.status().message().find("act-order"), std::string::npos);
  g_idx[3] = 9;  // not a group at all
  EXPECT_EQ(roundtrip(l, cfg, &g_idx).status().code(), ErrorCode::kFormat);
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
std::map<std::string, std::vector<float>> write_quantized_hf(const std::filesystem::path& dir, const char* method,
                                                              int bits, bool sym) {
  const auto src = shared_path("models/stories260K-hf");
  std::filesystem::create_directories(dir);
  for (const char* f : {"tokenizer.model", "tokenizer_config.json", "generation_config.json"}) {
    std::filesystem::copy_file(src / f, dir / f);
  }
  auto text = read_small_file(src / "config.json", 1 << 20);
  boost::json::object config = boost::json::parse(*text).as_object();
  config["quantization_config"] = {{"quant_method", method}, {"bits", bits}, {"group_size", 32},
                                   {"desc_act", false},      {"sym", sym},   {"version", "gemm"}};
  std::ofstream(dir / "config.json") << boost::json::serialize(config);

  auto file = MappedFile::open(src / "model.safetensors");
  auto st = safetensors_parse(file->bytes(), "model.safetensors");
  SafetensorsWriter w;
  std::map<std::string, std::vector<float>> expected;
  const int32_t maxq = (1 << bits) - 1;
  const bool awq = std::string(method) == "awq";
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
    l.q.resize(static_cast<size_t>(rows * cols));
    for (int64_t g = 0; g < cols / 32; ++g) {
      for (int64_t r = 0; r < rows; ++r) {
        float lo = 0.0f, hi = 0.0f;
        for (int64_t c = g * 32; c < (g + 1) * 32; ++c) {
          lo = std::min(lo, v[r * cols + c]);
          hi = std::max(hi, v[r * cols + c]);
        }
        if (sym) hi = std::max(hi, -lo), lo = -hi;
        const float scale = fp16_to_f32(f32_to_fp16(std::max(hi - lo, 1e-6f) / static_cast<float>(maxq)));
        const int32_t zero = sym ? (maxq + 1) / 2 : std::clamp(static_cast<int32_t>(std::nearbyint(-lo / scale)), 1, maxq);
        l.scales.push_back(f32_to_fp16(scale));
        l.zeros.push_back(zero);
        for (int64_t c = g * 32; c < (g + 1) * 32; ++c) {
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
      for (int64_t c = 0; c < cols; ++c) g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(c / 32);
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

// Every quantized matrix loads as exact blocks of the expected values.
void expect_loaded_exactly(const LoadedModel& m, const std::map<std::string, std::vector<float>>& expected,
                           DType type) {
  const std::pair<const char*, const char*> names[] = {
      {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}};
  size_t checked = 0;
  for (const auto& [module, values] : expected) {
    const std::string layer = module.substr(std::string("model.layers.").size(), 1);
    std::string canonical;
    for (const auto& [hf, ours] : names) {
      if (module.ends_with(hf)) canonical = "blk." + layer + "." + ours + ".weight";
    }
    const TensorView* t = m.find(canonical);
    ASSERT_NE(t, nullptr) << canonical;
    EXPECT_EQ(t->dtype, type) << canonical;
    std::vector<float> got(values.size());
    kernels::ref::dequantize_row(t->dtype, t->data, got.data(), static_cast<int64_t>(got.size()));
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
    auto llama = LlamaModel::create(m->config, m->tensors, *backend, 64);
    ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
    auto cache = KvCache::create(*backend, {m->config.n_layers, m->config.kv_dim(), 16, 8, KvDType::kF32});
    ASSERT_TRUE(cache.is_ok());
    GenerateOptions o;
    o.max_tokens = 8;
    const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
    auto r = generate(**llama, *cache, prompt, o);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->tokens, (std::vector<TokenId>{432, 383, 286, 261, 376, 298, 315, 421}));
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
  // An act-order checkpoint: refused naming it.
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
