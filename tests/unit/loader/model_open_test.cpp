#include "loader/model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/mapped_file.h"
#include "loader/gguf_writer.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;
using testing::TempDir;

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const std::filesystem::path& path) { return *read_small_file(path, 64u << 20); }

const std::filesystem::path kGguf = "models/stories260K/stories260K.gguf";
const std::filesystem::path kBin = "models/stories260K/stories260K.bin";
const std::filesystem::path kHf = "models/stories260K-hf";

TEST(ModelOpenTest, AllThreeContainersDescribeTheSameModel) {
  for (const auto& rel : {kGguf, kBin, kHf}) HEARTH_REQUIRE_SHARED(shared_path(rel));
  auto gguf = model_open(shared_path(kGguf));
  auto bin = model_open(shared_path(kBin));
  auto hf = model_open(shared_path(kHf));
  ASSERT_TRUE(gguf.is_ok()) << gguf.status().to_string();
  ASSERT_TRUE(bin.is_ok()) << bin.status().to_string();
  ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
  for (const LoadedModel* m : {&*gguf, &*bin, &*hf}) {
    const ModelConfig& c = m->config;
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.hidden_dim, 172);
    EXPECT_EQ(c.n_layers, 5);
    EXPECT_EQ(c.n_heads, 8);
    EXPECT_EQ(c.n_kv_heads, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
    EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  }
  EXPECT_EQ(gguf->config.max_context, 2048);  // what llama.cpp's conversion wrote into the GGUF
  EXPECT_EQ(bin->config.max_context, 512);
  EXPECT_EQ(hf->config.max_context, 512);
  EXPECT_EQ(gguf->config.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(bin->config.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(hf->config.rope_style, RopeStyle::kHalf);
  EXPECT_EQ(gguf->format, ModelFormat::kGguf);
  EXPECT_EQ(bin->format, ModelFormat::kLlama2c);
  EXPECT_EQ(hf->format, ModelFormat::kSafetensors);
  EXPECT_EQ(hf->tokenizer.eos_ids, std::vector<TokenId>{2});
  // The same embedding bytes in every container.
  const TensorView* e1 = gguf->find("token_embd.weight");
  const TensorView* e2 = bin->find("token_embd.weight");
  const TensorView* e3 = hf->find("token_embd.weight");
  ASSERT_TRUE(e1 && e2 && e3);
  EXPECT_EQ(std::memcmp(e1->data, e2->data, e1->bytes), 0);
  EXPECT_EQ(std::memcmp(e1->data, e3->data, e1->bytes), 0);
}

TEST(ModelOpenTest, HfQueryRowsAreTheGgufRowsInRotateHalfOrder) {
  for (const auto& rel : {kGguf, kHf}) HEARTH_REQUIRE_SHARED(shared_path(rel));
  auto gguf = model_open(shared_path(kGguf));
  auto hf = model_open(shared_path(kHf));
  ASSERT_TRUE(gguf.is_ok() && hf.is_ok());
  const auto* g = reinterpret_cast<const float*>(gguf->find("blk.2.attn_q.weight")->data);
  const auto* h = reinterpret_cast<const float*>(hf->find("blk.2.attn_q.weight")->data);
  const int hd = 8, dim = 64;
  for (int head = 0; head < 8; ++head) {
    for (int i = 0; i < hd / 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        const int grow = head * hd + 2 * i + j, hrow = head * hd + j * hd / 2 + i;
        ASSERT_EQ(std::memcmp(g + grow * dim, h + hrow * dim, dim * sizeof(float)), 0) << head << " " << i << " " << j;
      }
    }
  }
}

TEST(ModelOpenTest, MissingPathsAreNotFound) {
  TempDir dir;
  EXPECT_EQ(model_open(dir.path() / "nope.gguf").status().code(), ErrorCode::kNotFound);
  auto empty_dir = model_open(dir.path());
  EXPECT_EQ(empty_dir.status().code(), ErrorCode::kNotFound) << empty_dir.status().to_string();
  EXPECT_NE(empty_dir.status().message().find("config.json"), std::string::npos);
}

TEST(ModelOpenTest, UnknownFilesAreRefusedWithWhatWasExpected) {
  TempDir dir;
  write_file(dir.path() / "weights.pt", "PK\x03\x04 not a model");
  auto r = model_open(dir.path() / "weights.pt");
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("GGUF"), std::string::npos);
}

TEST(ModelOpenTest, UnsupportedArchitecturesAreNamed) {
  HEARTH_REQUIRE_SHARED(shared_path(kHf));
  TempDir dir;
  std::filesystem::copy(shared_path(kHf), dir.path() / "m");
  std::filesystem::permissions(dir.path() / "m", std::filesystem::perms::owner_all);
  std::filesystem::permissions(dir.path() / "m/config.json", std::filesystem::perms::owner_all);
  std::string config = read_file(dir.path() / "m/config.json");
  config.replace(config.find("LlamaForCausalLM"), 16, "GPT2LMHeadModel");
  write_file(dir.path() / "m/config.json", config);
  auto r = model_open(dir.path() / "m");
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("GPT2LMHeadModel"), std::string::npos) << r.status().to_string();

  GgufWriter w;
  w.add_string("general.architecture", "gpt2");
  ASSERT_TRUE(w.write(dir.path() / "gpt2.gguf").is_ok());
  r = model_open(dir.path() / "gpt2.gguf");
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("\"gpt2\""), std::string::npos) << r.status().to_string();
}

TEST(ModelOpenTest, UnsupportedTensorTypesAreNamed) {
  HEARTH_REQUIRE_SHARED(shared_path(kGguf));
  // Change blk.0.attn_q.weight's type code in a copy of the real file to Q5_K (13).
  std::string bytes = read_file(shared_path(kGguf));
  const std::string name = "blk.0.attn_q.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 2 * 8;  // n_dims, ne0, ne1
  const uint32_t q5k = 13;
  std::memcpy(bytes.data() + type_at, &q5k, 4);
  TempDir dir;
  write_file(dir.path() / "m.gguf", bytes);
  auto r = model_open(dir.path() / "m.gguf");
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("Q5_K"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find(name), std::string::npos);
}

TEST(ModelOpenTest, TruncatedFilesSaySo) {
  for (const auto& rel : {kGguf, kBin}) HEARTH_REQUIRE_SHARED(shared_path(rel));
  TempDir dir;
  const std::string gguf = read_file(shared_path(kGguf));
  write_file(dir.path() / "half.gguf", gguf.substr(0, gguf.size() / 2));
  auto r = model_open(dir.path() / "half.gguf");
  EXPECT_EQ(r.status().code(), ErrorCode::kFormat);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().to_string();

  const std::string bin = read_file(shared_path(kBin));
  write_file(dir.path() / "half.bin", bin.substr(0, bin.size() / 2));
  std::filesystem::copy(shared_path("models/stories260K/tok512.bin"), dir.path() / "tok512.bin");
  r = model_open(dir.path() / "half.bin");
  EXPECT_EQ(r.status().code(), ErrorCode::kFormat);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().to_string();
}

TEST(ModelOpenTest, Llama2cNeedsItsTokenizer) {
  HEARTH_REQUIRE_SHARED(shared_path(kBin));
  TempDir dir;
  std::filesystem::copy(shared_path(kBin), dir.path() / "model.bin");
  auto r = model_open(dir.path() / "model.bin");
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("--tokenizer"), std::string::npos) << r.status().to_string();
  r = model_open(dir.path() / "model.bin", {shared_path("models/stories260K/tok512.bin")});
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->tokenizer.kind, TokenizerSource::Kind::kLlama2c);
}

TEST(ModelOpenTest, TensorsTheModelWouldIgnoreAreRefused) {
  HEARTH_REQUIRE_SHARED(shared_path(kGguf));
  // A GGUF with every real tensor plus one extra.
  auto real = model_open(shared_path(kGguf));
  ASSERT_TRUE(real.is_ok());
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  const ModelConfig& c = real->config;
  w.add_u32("llama.embedding_length", c.dim);
  w.add_u32("llama.feed_forward_length", c.hidden_dim);
  w.add_u32("llama.block_count", c.n_layers);
  w.add_u32("llama.attention.head_count", c.n_heads);
  w.add_u32("llama.attention.head_count_kv", c.n_kv_heads);
  w.add_u32("llama.context_length", c.max_context);
  w.add_string("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens;
  for (int i = 0; i < c.vocab_size; ++i) tokens.push_back("t" + std::to_string(i));
  w.add_strings("tokenizer.ggml.tokens", tokens);
  for (const TensorView& t : real->tensors) {
    ASSERT_TRUE(w.add_tensor(t.name, t.dtype, std::span(t.shape.data(), static_cast<size_t>(t.n_dims)),
                             {t.data, t.bytes})
                    .is_ok());
  }
  const float extra[4] = {};
  const int64_t shape[] = {4};
  ASSERT_TRUE(w.add_tensor("blk.0.post_attention_norm.weight", DType::kF32, shape, std::as_bytes(std::span(extra))).is_ok());
  TempDir dir;
  ASSERT_TRUE(w.write(dir.path() / "extra.gguf").is_ok());
  auto r = model_open(dir.path() / "extra.gguf");
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("blk.0.post_attention_norm.weight"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace hearth
