// POST /v1/embeddings: the request's every shape of input, its refusals, and the body.
#include "frontend/embeddings.h"

#include <cmath>
#include <cstring>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace hearth {
namespace {

namespace json = boost::json;

TEST(EmbeddingsTest, InputIsTextOrTokenIdsInEveryShapeOpenAiTakes) {
  auto one = embeddings_parse_request(R"({"model": "m", "input": "hello"})");
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ(one->model, "m");
  EXPECT_EQ(one->texts, (std::vector<std::string>{"hello"}));
  EXPECT_FALSE(one->base64);
  EXPECT_FALSE(one->dimensions);

  auto texts = embeddings_parse_request(R"({"input": ["a", "b c"], "encoding_format": "base64", "dimensions": 8, "user": "u"})");
  ASSERT_TRUE(texts.is_ok()) << texts.status().to_string();
  EXPECT_EQ(texts->texts, (std::vector<std::string>{"a", "b c"}));
  EXPECT_TRUE(texts->base64);
  EXPECT_EQ(texts->dimensions, 8);
  EXPECT_EQ(texts->user, "u");

  auto ids = embeddings_parse_request(R"({"input": [1, 2, 3]})");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids->token_inputs, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  auto lists = embeddings_parse_request(R"({"input": [[1, 2], [3]], "encoding_format": "float"})");
  ASSERT_TRUE(lists.is_ok());
  EXPECT_EQ(lists->token_inputs, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  EXPECT_TRUE(lists->texts.empty());
}

TEST(EmbeddingsTest, BadRequestsAreRefusedNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model": "m"})", "input is required"},
      {R"({"input": ""})", "input is empty"},
      {R"({"input": []})", "input is an empty array"},
      {R"({"input": ["a", 1]})", "input[1]"},
      {R"({"input": [[1], "a"]})", "input[1]"},
      {R"({"input": [[1], []]})", "input[1] is empty"},
      {R"({"input": [1, -2]})", "input[1]"},
      {R"({"input": [[1, 2.5]]})", "input[0][1]"},
      {R"({"input": {"text": "a"}})", "input must be a string or an array"},
      {R"({"input": "a", "encoding_format": "int8"})", "encoding_format"},
      {R"({"input": "a", "dimensions": 0})", "dimensions"},
      {R"({"input": "a", "dimensions": "8"})", "dimensions"},
      {R"({"input": "a", "truncate_prompt_tokens": 8})", "unknown field truncate_prompt_tokens"},
      {R"({"input": "a", "model": 3})", "model"},
      {R"([1, 2])", "JSON object"},
      {R"({"input": "a")", "request body"},
  };
  for (const auto& [body, want] : cases) {
    auto r = embeddings_parse_request(body);
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << body << ": " << r.status().message();
  }
  std::string many = R"({"input": [)";
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many += i == 0 ? "\"x\"" : ", \"x\"";
  many += "]}";
  EXPECT_NE(embeddings_parse_request(many).status().message().find("at most 2048"), std::string::npos);
  // --lenient-fields: an unknown field is noted, not refused.
  auto lenient = embeddings_parse_request(R"({"input": "a", "extra": 1})", {.lenient_fields = true});
  ASSERT_TRUE(lenient.is_ok());
  EXPECT_EQ(lenient->ignored_fields, (std::vector<std::string>{"extra"}));
}

TEST(EmbeddingsTest, VectorsAreCutThenNormalisedAndEncodedAsAsked) {
  const std::vector<float> pooled = {3.0f, 4.0f, 12.0f};
  EXPECT_EQ(embedding_finish(pooled, 3), (std::vector<float>{3.0f / 13, 4.0f / 13, 12.0f / 13}));
  EXPECT_EQ(embedding_finish(pooled, 2), (std::vector<float>{0.6f, 0.8f}));
  EXPECT_EQ(embedding_finish(std::vector<float>{0.0f, 0.0f}, 2), (std::vector<float>{0.0f, 0.0f}));

  const std::vector<std::vector<float>> vectors = {{0.6f, 0.8f}, {1.0f, -0.0f}};
  const json::value as_floats = json::parse(embeddings_response_body(vectors, false, "m", 7));
  EXPECT_EQ(as_floats.at("object"), "list");
  EXPECT_EQ(as_floats.at("model"), "m");
  EXPECT_EQ(as_floats.at("usage").at("prompt_tokens"), 7);
  EXPECT_EQ(as_floats.at("usage").at("total_tokens"), 7);
  const auto& data = as_floats.at("data").as_array();
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[1].at("index"), 1);
  EXPECT_EQ(data[1].at("object"), "embedding");
  EXPECT_FLOAT_EQ(static_cast<float>(data[0].at("embedding").at(1).to_number<double>()), 0.8f);

  // base64: the float32 bytes, little-endian, as OpenAI's clients decode them.
  const json::value as_base64 = json::parse(embeddings_response_body({{1.0f, -2.5f}}, true, "m", 1));
  // 1.0f = 00 00 80 3f, -2.5f = 00 00 20 c0.
  EXPECT_EQ(as_base64.at("data").at(0).at("embedding"), "AACAPwAAIMA=");
  const json::value three = json::parse(embeddings_response_body({{1.0f, -2.5f, 0.0f}}, true, "m", 1));
  EXPECT_EQ(three.at("data").at(0).at("embedding"), "AACAPwAAIMAAAAAA");
}

}  // namespace
}  // namespace hearth
