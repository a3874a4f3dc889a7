#include "common/status.h"

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/model_config.h"

namespace hearth {
namespace {

Result<int> half_of(int x) {
  if (x % 2 != 0) return make_error(ErrorCode::kInvalidArgument, "{} is odd", x);
  return x / 2;
}

Result<int> quarter_of(int x) {
  HEARTH_ASSIGN_OR_RETURN(int h, half_of(x));
  HEARTH_ASSIGN_OR_RETURN(int q, half_of(h));
  return q;
}

TEST(StatusTest, ErrorsCarryCodeAndMessage) {
  const Status s = make_error(ErrorCode::kFormat, "bad {}", 7);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.to_string(), "ERR_FORMAT: bad 7");
  EXPECT_EQ(s.with_context("file.gguf").to_string(), "ERR_FORMAT: file.gguf: bad 7");
  EXPECT_EQ(Status::ok().to_string(), "OK");
}

TEST(StatusTest, AssignOrReturnPropagates) {
  EXPECT_EQ(*quarter_of(8), 2);
  EXPECT_EQ(quarter_of(6).status().message(), "3 is odd");
  EXPECT_TRUE(quarter_of(8).status().is_ok());
}

TEST(DtypeTest, SizesAreCheckedForBlocksAndOverflow) {
  EXPECT_EQ(*dtype_bytes(DType::kQ4_0, 64), 36u);
  EXPECT_EQ(*dtype_bytes(DType::kQ8_0, 32), 34u);
  EXPECT_EQ(*dtype_bytes(DType::kBF16, 3), 6u);
  EXPECT_FALSE(dtype_bytes(DType::kQ4_0, 33).has_value());
  EXPECT_FALSE(dtype_bytes(DType::kF32, -1).has_value());
  EXPECT_FALSE(dtype_bytes(DType::kF32, INT64_MAX).has_value());
  EXPECT_EQ(dtype_from_name("q8_0"), DType::kQ8_0);
  EXPECT_FALSE(dtype_from_name("q5_k").has_value());
}

TEST(ModelConfigTest, ValidationRefusesImpossibleShapes) {
  ModelConfig c{.architecture = "llama", .vocab_size = 512, .dim = 64, .hidden_dim = 172, .n_layers = 5,
                .n_heads = 8, .n_kv_heads = 4, .head_dim = 8, .max_context = 512};
  EXPECT_TRUE(model_config_validate(c).is_ok());
  auto broken = c;
  broken.n_kv_heads = 3;
  EXPECT_FALSE(model_config_validate(broken).is_ok());
  broken = c;
  broken.head_dim = 7;
  EXPECT_FALSE(model_config_validate(broken).is_ok());
  broken = c;
  broken.n_layers = 1 << 20;
  EXPECT_FALSE(model_config_validate(broken).is_ok());
  broken = c;
  broken.norm_eps = 0.0f;
  EXPECT_FALSE(model_config_validate(broken).is_ok());
}

}  // namespace
}  // namespace hearth
