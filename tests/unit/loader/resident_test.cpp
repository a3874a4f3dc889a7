// resident_publish in-process: the segment holds exactly the model (sliced for tensor
// parallelism, or quantized), adoption keeps it, fingerprints follow the files.
#include "loader/resident.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "ipc/weights_segment.h"
#include "kernels/cpu/repack.h"
#include "kernels/reference/reference.h"
#include "loader/model.h"
#include "loader/synth.h"
#include "tests/test_util.h"
#include "tokenizer/source_codec.h"

namespace hearth {
namespace {

using testing::shared_path;
using testing::TempDir;

const std::filesystem::path kGguf = "models/stories260K/stories260K.gguf";

std::vector<float> values(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.elements()));
  kernels::ref::dequantize_row(t.dtype, t.data, v.data(), t.elements());
  return v;
}

TEST(ResidentTest, SegmentHoldsTheModelAndItsTokenizer) {
  HEARTH_REQUIRE_SHARED(shared_path(kGguf));
  TempDir shm;
  ResidentOptions o;
  o.model = shared_path(kGguf);
  o.shm_dir = shm.path();
  o.instance = "unit";
  auto published = resident_publish(o);
  ASSERT_TRUE(published.is_ok()) << published.status().to_string();
  EXPECT_FALSE(published->adopted);
  auto w = weights_attach(published->segment.path());
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  auto source = model_open(shared_path(kGguf));
  ASSERT_TRUE(source.is_ok());
  EXPECT_EQ(model_config_to_json(w->config), model_config_to_json(source->config));
  EXPECT_EQ(w->model_format, "gguf");
  const auto tensors = w->tensors(0);
  ASSERT_EQ(tensors.size(), source->tensors.size());
  for (const TensorView& t : tensors) {
    const TensorView* s = source->find(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    ASSERT_EQ(t.bytes, s->bytes);
    EXPECT_EQ(std::memcmp(t.data, s->data, t.bytes), 0) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name << " is not 64-byte aligned";
  }
  auto tok = tokenizer_source_decode(w->tokenizer_blob);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tokenizer_source_encode(*tok), tokenizer_source_encode(source->tokenizer));
  EXPECT_EQ(w->header->tp_size, 1u);
  EXPECT_EQ(w->header->creator_pid, ::getpid());

  // Publishing again adopts: nothing is rewritten.
  const auto created = w->header->created_unix_ms;
  auto again = resident_publish(o);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(again->adopted);
  EXPECT_EQ(reinterpret_cast<const WeightsHeader*>(again->segment.data())->created_unix_ms, created);
}

TEST(ResidentTest, TensorParallelShardsAreSlicesOfTheSource) {
  HEARTH_REQUIRE_SHARED(shared_path(kGguf));
  TempDir shm;
  ResidentOptions o;
  o.model = shared_path(kGguf);
  o.shm_dir = shm.path();
  o.instance = "tp";
  o.tp = 2;
  auto published = resident_publish(o);
  ASSERT_TRUE(published.is_ok()) << published.status().to_string();
  auto w = weights_attach(published->segment.path());
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  auto source = model_open(shared_path(kGguf));
  ASSERT_TRUE(source.is_ok());
  EXPECT_LE(w->header->rank_offset[0] + w->header->rank_bytes[0], w->header->rank_offset[1])
      << "each rank's tensors form one region";
  for (int rank = 0; rank < 2; ++rank) {
    for (const TensorView& t : w->tensors(rank)) {
      const TensorView& s = *source->find(t.name);
      const auto full = values(s), shard = values(t);
      const bool rows = t.name.find("attn_q.") != std::string::npos || t.name.find("attn_k.") != std::string::npos ||
                        t.name.find("attn_v.") != std::string::npos || t.name.find("ffn_gate.") != std::string::npos ||
                        t.name.find("ffn_up.") != std::string::npos;
      const bool cols = t.name.find("attn_output.") != std::string::npos || t.name.find("ffn_down.") != std::string::npos;
      if (rows) {
        ASSERT_EQ(t.shape[0] * 2, s.shape[0]) << t.name;
        const size_t offset = static_cast<size_t>(rank * t.shape[0] * t.shape[1]);
        EXPECT_TRUE(std::equal(shard.begin(), shard.end(), full.begin() + static_cast<long>(offset))) << t.name;
      } else if (cols) {
        ASSERT_EQ(t.shape[1] * 2, s.shape[1]) << t.name;
        for (int64_t r = 0; r < t.shape[0]; ++r) {
          for (int64_t c = 0; c < t.shape[1]; ++c) {
            ASSERT_EQ(shard[r * t.shape[1] + c], full[r * s.shape[1] + rank * t.shape[1] + c]) << t.name;
          }
        }
      } else {
        EXPECT_EQ(shard, full) << t.name << " is replicated";
      }
    }
  }
}

TEST(ResidentTest, QuantizationShrinksMatricesAndKeepsVectors) {
  HEARTH_REQUIRE_SHARED(shared_path(kGguf));
  TempDir shm;
  ResidentOptions o;
  o.model = shared_path(kGguf);
  o.shm_dir = shm.path();
  o.quant = DType::kQ4_0;
  auto published = resident_publish(o);
  ASSERT_TRUE(published.is_ok()) << published.status().to_string();
  auto w = weights_attach(published->segment.path());
  ASSERT_TRUE(w.is_ok());
  for (const TensorView& t : w->tensors(0)) {
    if (t.n_dims == 2 && t.cols() % 32 == 0) {
      EXPECT_EQ(dtype_plain(t.dtype), DType::kQ4_0) << t.name;
      // Row-interleaved where the rows come in whole groups, except the embedding table.
      const bool interleave = t.rows() % 16 == 0 && t.name != "token_embd.weight";
      EXPECT_EQ(t.dtype, interleave ? DType::kQ4_0R16 : DType::kQ4_0) << t.name;
    } else if (t.n_dims == 2) {  // stories260K's ffn_down rows hold 172 values: not whole groups
      EXPECT_EQ(t.dtype, DType::kF32) << t.name;
    } else {
      EXPECT_EQ(t.dtype, DType::kF32) << t.name;
    }
  }
  EXPECT_EQ(std::string(w->header->quant), "int4");
  EXPECT_EQ(quant_from_name("int8").value(), DType::kQ8_0);
  EXPECT_FALSE(quant_from_name("fp8").is_ok());
}

// F16 and BF16 matrices are served row-interleaved as they are, never converted: every
// row of the cpu-r16 segment unpacks to the plain segment's row, byte for byte.
TEST(ResidentTest, SixteenBitMatricesAreInterleavedAsStored) {
  TempDir dir, shm;
  SynthOptions s;
  s.gguf = dir.path() / "f16.gguf";
  s.gguf_type = DType::kF16;
  s.hf = dir.path() / "hf-bf16";
  s.hf_type = DType::kBF16;
  ASSERT_TRUE(synth_write(s).is_ok());
  for (const auto& [model, type] : {std::pair{s.gguf, DType::kF16}, std::pair{s.hf, DType::kBF16}}) {
    std::vector<std::vector<TensorView>> views;
    std::vector<AttachedWeights> keep;
    for (const char* layout : {"plain", "cpu-r16"}) {
      ResidentOptions o;
      o.model = model;
      o.shm_dir = shm.path();
      o.instance = std::string("l") + layout[0] + (type == DType::kF16 ? "h" : "b");
      o.layout = layout;
      auto published = resident_publish(o);
      ASSERT_TRUE(published.is_ok()) << published.status().to_string();
      auto w = weights_attach(published->segment.path());
      ASSERT_TRUE(w.is_ok()) << w.status().to_string();
      views.push_back(w->tensors(0));
      keep.push_back(std::move(*w));
    }
    ASSERT_EQ(views[0].size(), views[1].size());
    int interleaved = 0;
    for (size_t i = 0; i < views[0].size(); ++i) {
      const TensorView& plain = views[0][i];
      const TensorView& packed = views[1][i];
      ASSERT_EQ(plain.name, packed.name);
      if (plain.n_dims != 2) continue;
      EXPECT_EQ(plain.dtype, type) << plain.name << " kept as stored";
      if (plain.name == "token_embd.weight" || plain.rows() % 16 != 0) {
        EXPECT_EQ(packed.dtype, type) << packed.name;
        continue;
      }
      ASSERT_EQ(packed.dtype, kernels::cpu::r16_of(type)) << packed.name;
      ++interleaved;
      const uint64_t row_bytes = *dtype_bytes(type, plain.cols());
      std::vector<std::byte> row(row_bytes);
      for (int64_t r = 0; r < plain.rows(); ++r) {
        kernels::cpu::unpack_row_r16(packed.dtype, packed.data, plain.cols(), r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), plain.data + r * row_bytes, row_bytes), 0) << plain.name << " row " << r;
      }
    }
    EXPECT_GE(interleaved, 5 * 7) << "every layer's seven matrices";
  }
}

TEST(ResidentTest, FingerprintFollowsFilesAndOptions) {
  HEARTH_REQUIRE_SHARED(shared_path(kGguf));
  TempDir dir;
  const auto copy = dir.path() / "m.gguf";
  std::filesystem::copy_file(shared_path(kGguf), copy);
  ResidentOptions o;
  o.model = copy;
  const auto a = resident_fingerprint(o);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(resident_fingerprint(o).value(), *a);
  auto q = o;
  q.quant = DType::kQ8_0;
  EXPECT_FALSE(resident_fingerprint(q).value() == *a);
  auto t = o;
  t.tp = 2;
  EXPECT_FALSE(resident_fingerprint(t).value() == *a);
  std::filesystem::last_write_time(copy, std::filesystem::last_write_time(copy) + std::chrono::seconds(5));
  EXPECT_FALSE(resident_fingerprint(o).value() == *a) << "a rewritten model is another model";
}

TEST(ResidentTest, ReplacesASegmentOfAnotherModelWhenItsLoaderIsGone) {
  HEARTH_REQUIRE_SHARED(shared_path(kGguf));
  TempDir shm;
  ResidentOptions o;
  o.model = shared_path(kGguf);
  o.shm_dir = shm.path();
  auto first = resident_publish(o);
  ASSERT_TRUE(first.is_ok());
  const Fingerprint old = first->fingerprint;
  first = Status(ErrorCode::kInternal, "dropped");  // unmap; the file stays
  o.quant = DType::kQ8_0;
  auto second = resident_publish(o);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_FALSE(second->adopted);
  EXPECT_FALSE(second->fingerprint == old);
  auto w = weights_attach(second->segment.path());
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(std::string(w->header->quant), "int8");
}

}  // namespace
}  // namespace hearth
