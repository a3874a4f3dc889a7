#include "common/json.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

TEST(JsonTest, ParsesAndReadsTypedFields) {
  auto v = json_parse(R"({"a": 3, "b": 2.5, "c": true, "d": "x", "e": null, "f": 4096.0})", "test");
  ASSERT_TRUE(v.is_ok());
  const auto& o = v->as_object();
  EXPECT_EQ(**json_opt_int(o, "a"), 3);
  EXPECT_EQ(**json_opt_int(o, "f"), 4096);
  EXPECT_DOUBLE_EQ(**json_opt_number(o, "b"), 2.5);
  EXPECT_TRUE(**json_opt_bool(o, "c"));
  EXPECT_EQ(**json_opt_string(o, "d"), "x");
  EXPECT_FALSE(json_opt_int(o, "e")->has_value());
  EXPECT_FALSE(json_opt_int(o, "missing")->has_value());
  EXPECT_FALSE(json_opt_int(o, "b").is_ok());
  EXPECT_NE(json_opt_string(o, "a").status().message().find("\"a\""), std::string::npos);
  EXPECT_FALSE(json_int(o, "missing").is_ok());
}

TEST(JsonTest, RefusesMalformedAndDeepDocuments) {
  EXPECT_EQ(json_parse("{\"a\": ", "doc").status().code(), ErrorCode::kFormat);
  EXPECT_NE(json_parse("[1,", "config.json").status().message().find("config.json"), std::string::npos);
  std::string deep(1000, '[');
  deep += std::string(1000, ']');
  EXPECT_FALSE(json_parse(deep, "deep", 64).is_ok());
}

}  // namespace
}  // namespace hearth
