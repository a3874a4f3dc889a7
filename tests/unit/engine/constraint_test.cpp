// What a request constrains in the driver: a grammar (structured output), logit bias and
// min_tokens, on the real stories260K model.
#include <gtest/gtest.h>

#include "engine/core/driver.h"
#include "engine/core/generate.h"
#include "engine/cpu/cpu_backend.h"
#include "grammar/json_schema.h"
#include "loader/model.h"
#include "tests/json_schema_check.h"
#include "tests/test_util.h"
#include "tests/unit/engine/stories_model.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

namespace json = boost::json;
using testing::shared_path;

#define REQUIRE_STORIES() HEARTH_REQUIRE_SHARED(shared_path("models/stories260K/stories260K.gguf"))

struct Fixture : testing::StoriesModel {
  Fixture() : StoriesModel(64, 256) {}

  DriverConfig config(int32_t context = 256) {
    DriverConfig c{.scheduler = {.max_batch_size = 16, .max_batched_tokens = 64}, .max_sequence_tokens = context};
    c.vocabulary = [v = vocab]() -> Result<std::shared_ptr<const grammar::Vocabulary>> { return v; };
    return c;
  }

  std::vector<TokenId> prompt(std::string_view text) { return std::move(tokenizer->encode(text)).value(); }

  struct Output {
    std::vector<TokenId> tokens;
    FinishReason finish = FinishReason::kNone;
    Status error;
  };
  // Runs every request to its end; the outputs by id.
  std::map<uint64_t, Output> run(Driver& driver) {
    std::map<uint64_t, Output> out;
    const Status st = driver.run_until_idle([&](const StepEvent& e) {
      Output& o = out[e.id];
      if (e.finish == FinishReason::kError) {
        o.error = e.error;
      } else {
        o.tokens.push_back(e.token.id);
      }
      if (e.finish != FinishReason::kNone) o.finish = e.finish;
      return true;
    });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
  }
  // Driver::add with the whole of `r.tokens` as the prompt when n_prompt is 0.
  Result<FinishReason> add(Driver& driver, uint64_t id, SequenceRequest r) {
    if (r.n_prompt == 0) r.n_prompt = static_cast<int32_t>(r.tokens.size());
    return driver.add(id, std::move(r));
  }
  std::string text(const std::vector<TokenId>& ids) {
    std::string s;
    for (TokenId id : ids) s += vocab->bytes(id);
    return s;
  }
};

std::string gbnf_of(const char* schema) { return std::move(grammar::json_schema_to_gbnf(json::parse(schema))).value(); }

// Sampled outputs under a schema are JSON valid against it and end as "stop", with the
// model's own tokens (byte pieces and words), within max_tokens.
TEST(ConstraintTest, SchemaOutputsAreValidAndEndAsStop) {
  REQUIRE_STORIES();
  Fixture f;
  const char* schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 120}, "kind": {"enum": ["cat", "dog"]}},
      "required": ["name", "age", "kind"], "additionalProperties": false})";
  Driver driver(*f.runner, f.config());
  for (uint64_t id = 0; id < 12; ++id) {
    ASSERT_EQ(*f.add(driver, id, {.tokens = f.prompt("Once upon a time"), .n_prompt = 0, .spec = {.sampling = {.temperature = id == 0 ? 0.0f : 1.0f, .seed = id}, .max_tokens = 80, .stop_ids = {2}, .grammar = gbnf_of(schema)}}),
              FinishReason::kNone)
        << id;
  }
  for (const auto& [id, o] : f.run(driver)) {
    ASSERT_TRUE(o.error.is_ok()) << o.error.message();
    EXPECT_EQ(o.finish, FinishReason::kStop) << id;
    EXPECT_LE(o.tokens.size(), 80u);
    const std::string text = f.text(o.tokens);
    boost::system::error_code ec;
    const json::value doc = json::parse(text, ec);
    ASSERT_FALSE(ec) << text;
    EXPECT_EQ(testing::why_invalid(doc, json::parse(schema), json::parse(schema)), "") << text;
  }
}

// The traps: any JSON ({} or true) and a small max_tokens still end with valid JSON.
TEST(ConstraintTest, OpenSchemasEndValidWithinSmallBudgets) {
  REQUIRE_STORIES();
  Fixture f;
  for (const char* schema : {"{}", "true", R"({"type": "object"})", R"({"type": "array", "items": {"type": "number"}})"}) {
    for (int32_t max_tokens : {4, 9, 24}) {
      Driver driver(*f.runner, f.config());
      for (uint64_t seed = 0; seed < 6; ++seed) {
        ASSERT_TRUE(f.add(driver, seed, {.tokens = f.prompt("The cat"), .n_prompt = 0, .spec = {.sampling = {.temperature = 1.2f, .seed = seed}, .max_tokens = max_tokens, .stop_ids = {2}, .grammar = gbnf_of(schema)}})
                        .is_ok());
      }
      for (const auto& [id, o] : f.run(driver)) {
        ASSERT_TRUE(o.error.is_ok()) << o.error.message();
        EXPECT_EQ(o.finish, FinishReason::kStop) << schema << " max_tokens " << max_tokens;
        EXPECT_LE(static_cast<int32_t>(o.tokens.size()), max_tokens);
        std::vector<TokenId> text_ids = o.tokens;
        if (!text_ids.empty() && text_ids.back() == 2) text_ids.pop_back();
        EXPECT_NO_THROW(json::parse(f.text(text_ids))) << schema << ": " << f.text(text_ids);
      }
    }
  }
}

TEST(ConstraintTest, LogitBiasForcesOrBansTokens) {
  REQUIRE_STORIES();
  Fixture f;
  Driver driver(*f.runner, f.config());
  const auto prompt = f.prompt("Once upon a time");
  ASSERT_TRUE(f.add(driver, 1, {.tokens = prompt, .n_prompt = 0, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 4}}).is_ok());
  const auto plain = f.run(driver).at(1).tokens;
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_TRUE(f.add(driver, 2, {.tokens = prompt, .n_prompt = 0, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 4, .logit_bias = {{.id = 300, .bias = 100.0f}}}})
                  .is_ok());
  ASSERT_TRUE(f.add(driver, 3, {.tokens = prompt, .n_prompt = 0, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 4, .logit_bias = {{.id = plain[0], .bias = -100.0f}}}})
                  .is_ok());
  auto out = f.run(driver);
  EXPECT_EQ(out.at(2).tokens, std::vector<TokenId>(4, 300));
  EXPECT_NE(out.at(3).tokens[0], plain[0]);
  EXPECT_EQ(f.add(driver, 4, {.tokens = prompt, .n_prompt = 0, .spec = {.max_tokens = 4, .logit_bias = {{.id = 512, .bias = 1}}}})
                .status()
                .code(),
            ErrorCode::kOutOfRange);
  EXPECT_EQ(f.add(driver, 5, {.tokens = prompt, .n_prompt = 0, .spec = {.max_tokens = 4, .logit_bias = {{.id = 5, .bias = 101}}}})
                .status()
                .code(),
            ErrorCode::kOutOfRange);
}

TEST(ConstraintTest, MinTokensDefersTheStopIds) {
  REQUIRE_STORIES();
  Fixture f;
  Driver driver(*f.runner, f.config());
  const auto prompt = f.prompt("Once upon a time");
  ASSERT_TRUE(f.add(driver, 1, {.tokens = prompt, .n_prompt = 0, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 12}}).is_ok());
  const auto plain = f.run(driver).at(1).tokens;
  const TokenId third = plain[2];
  ASSERT_TRUE(f.add(driver, 2, {.tokens = prompt, .n_prompt = 0, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 12, .stop_ids = {third}}})
                  .is_ok());
  ASSERT_TRUE(f.add(driver, 3, {.tokens = prompt, .n_prompt = 0, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 12, .min_tokens = 6, .stop_ids = {third}}})
                  .is_ok());
  auto out = f.run(driver);
  EXPECT_EQ(out.at(2).tokens.size(), 3u);
  EXPECT_EQ(out.at(2).finish, FinishReason::kStop);
  EXPECT_GE(out.at(3).tokens.size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NE(out.at(3).tokens[i], third) << i;
}

// A constrained sequence resumed with the tokens it produced (an engine restart) goes on
// exactly as the uninterrupted run, its grammar state rebuilt from them.
TEST(ConstraintTest, AResumedConstrainedSequenceContinuesExactly) {
  REQUIRE_STORIES();
  Fixture f;
  const std::string g = gbnf_of(R"({"type": "array", "items": {"type": "string"}, "maxItems": 4})");
  const auto prompt = f.prompt("Lily had");
  const SamplingParams sampling{.temperature = 0.9f, .seed = 5};
  Driver driver(*f.runner, f.config());
  ASSERT_TRUE(f.add(driver, 1, {.tokens = prompt, .n_prompt = 0, .spec = {.sampling = sampling, .max_tokens = 40, .stop_ids = {2}, .grammar = g}})
                  .is_ok());
  const auto whole = f.run(driver).at(1).tokens;
  ASSERT_GT(whole.size(), 6u);
  std::vector<TokenId> resumed = prompt;
  resumed.insert(resumed.end(), whole.begin(), whole.begin() + 5);
  ASSERT_EQ(*driver.add(2, {.tokens = resumed, .n_prompt = static_cast<int32_t>(prompt.size()), .spec = {.sampling = sampling, .max_tokens = 40, .stop_ids = {2}, .grammar = g}}),
            FinishReason::kNone);
  const auto rest = f.run(driver).at(2).tokens;
  EXPECT_EQ(rest, std::vector<TokenId>(whole.begin() + 5, whole.end()));
  // Tokens the grammar could not have produced are refused.
  std::vector<TokenId> wrong = prompt;
  wrong.push_back(f.prompt("x").back());
  EXPECT_EQ(driver.add(3, {.tokens = wrong, .n_prompt = static_cast<int32_t>(prompt.size()), .spec = {.max_tokens = 9, .grammar = g}})
                .status()
                .code(),
            ErrorCode::kInvalidArgument);
}

TEST(ConstraintTest, BadOrUnwritableGrammarsAreRefused) {
  REQUIRE_STORIES();
  Fixture f;
  Driver driver(*f.runner, f.config());
  const auto prompt = f.prompt("Hi");
  auto bad = f.add(driver, 1, {.tokens = prompt, .n_prompt = 0, .spec = {.max_tokens = 4, .grammar = "root ::= x"}});
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  Driver blind(*f.runner, {.max_sequence_tokens = 64});
  EXPECT_EQ(f.add(blind, 3, {.tokens = prompt, .n_prompt = 0, .spec = {.max_tokens = 4, .grammar = "root ::= \"a\""}}).status().code(),
            ErrorCode::kUnsupported);
  // A byte no token writes alone (stories260K has every byte piece, so this part runs on a
  // vocabulary without them).
  auto narrow = std::make_shared<const grammar::Vocabulary>(std::move(grammar::Vocabulary::build({"a", "b", ""})).value());
  GrammarCache cache([narrow]() -> Result<std::shared_ptr<const grammar::Vocabulary>> { return narrow; });
  auto unwritable = cache.get("root ::= \"a\" \"c\"");
  EXPECT_EQ(unwritable.status().code(), ErrorCode::kInvalidArgument) << unwritable.status().message();
  EXPECT_TRUE(cache.get("root ::= \"ab\"").is_ok());
  EXPECT_TRUE(driver.idle());
}

}  // namespace
}  // namespace hearth
