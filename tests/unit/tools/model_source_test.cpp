// A model run from its files computes on the layout hearth-loader publishes: the tensors
// open_model_files returns for the CPU are, type and bytes, those of a cpu-r16 segment.
#include "tools/model_source.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cpu/repack.h"
#include "loader/resident.h"
#include "loader/synth.h"
#include "tests/test_util.h"

namespace hearth::cli {
namespace {

using testing::TempDir;

TEST(ModelSourceTest, FilesAreRepackedAsTheLoaderPublishesThem) {
  TempDir dir, shm;
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kF16}) {
    SynthOptions s;
    s.gguf = dir.path() / (std::string(dtype_name(type)) + ".gguf");
    s.gguf_type = type;
    ASSERT_TRUE(synth_write(s).is_ok());
    auto packed = open_model_files(s.gguf, {});
    auto plain = open_model_files(s.gguf, {}, kLayoutPlain);
    ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
    ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
    EXPECT_EQ(packed->layout, kLayoutCpuR16);
    EXPECT_EQ(plain->layout, kLayoutPlain);

    ResidentOptions o;
    o.model = s.gguf;
    o.shm_dir = shm.path();
    o.instance = "ms" + std::string(dtype_name(type));
    auto published = resident_publish(o);
    ASSERT_TRUE(published.is_ok()) << published.status().to_string();
    auto segment = weights_attach(published->segment.path());
    ASSERT_TRUE(segment.is_ok()) << segment.status().to_string();
    const std::vector<TensorView> resident = segment->tensors(0);

    ASSERT_EQ(packed->tensors.size(), resident.size());
    int interleaved = 0;
    for (size_t i = 0; i < resident.size(); ++i) {
      const TensorView& got = packed->tensors[i];
      const TensorView& want = resident[i];
      ASSERT_EQ(got.name, want.name);
      ASSERT_EQ(got.dtype, want.dtype) << got.name;
      ASSERT_EQ(got.bytes, want.bytes) << got.name;
      EXPECT_EQ(std::memcmp(got.data, want.data, got.bytes), 0) << got.name << " differs from the segment's";
      EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data) % 64, 0u) << got.name;
      EXPECT_EQ(plain->tensors[i].dtype, dtype_plain(got.dtype)) << got.name << " read as stored";
      interleaved += dtype_row_group(got.dtype) > 1 ? 1 : 0;
    }
    EXPECT_GE(interleaved, 5 * 7) << dtype_name(type) << ": every layer's seven matrices";
  }
}

}  // namespace
}  // namespace hearth::cli
