// `hearth generate` as a user runs it: a real process, real model files.
#include <gtest/gtest.h>

#include <fstream>

#include <boost/json.hpp>

#include "tests/integration/hearth_bin.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

// ../shared/models/README.md: greedy continuation of "Once upon a time".
const std::string kGroundTruth =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I want "
    "to play with your ball, but I can't find it.\"\n";

ProcessResult generate(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {hearth_bin("hearth"), "generate"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_process(argv);
}

class GroundTruthTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GroundTruthTest, GreedyTextIsExactlyTheReference) {
  const auto model = shared_path(GetParam());
  HEARTH_REQUIRE_SHARED(model);
  // The reference is the first 127 generated tokens (it ends where the model starts a
  // new line); the CLI prints the prompt, the text and one newline.
  const auto r = generate({"--model", model.string(), "--prompt", "Once upon a time", "--temperature", "0",
                           "--max-tokens", "127"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kGroundTruth) << "stderr: " << r.err;
  const auto longer = generate({"--model", model.string(), "--prompt", "Once upon a time", "--max-tokens", "200"});
  ASSERT_EQ(longer.exit_code, 0) << longer.err;
  EXPECT_EQ(longer.out.substr(0, kGroundTruth.size() - 1), kGroundTruth.substr(0, kGroundTruth.size() - 1));
}

INSTANTIATE_TEST_SUITE_P(AllContainers, GroundTruthTest,
                         ::testing::Values("models/stories260K/stories260K.gguf",
                                           "models/stories260K/stories260K.bin", "models/stories260K-hf"));

TEST(CliGenerateTest, JsonReportsIdsTextAndSpeeds) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const auto r = generate({"--model", model.string(), "--prompt", "Once upon a time", "--max-tokens", "16", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto v = boost::json::parse(r.out).as_object();
  const std::vector<int64_t> first = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337};
  const auto& ids = v.at("ids").as_array();
  ASSERT_EQ(ids.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(ids[i].as_int64(), first[i]);
  const auto& prompt = v.at("prompt_ids").as_array();
  EXPECT_EQ(prompt.size(), 5u);
  EXPECT_EQ(prompt[0].as_int64(), 1);
  EXPECT_EQ(v.at("finish_reason").as_string(), "length");
  EXPECT_EQ(std::string(v.at("text").as_string()), ", there was a little girl named Lily. She loved to play");
  EXPECT_GT(v.at("decode_tokens_per_second").as_double(), 0.0);
  EXPECT_GT(v.at("prefill_tokens_per_second").as_double(), 0.0);
}

TEST(CliGenerateTest, IgnoreEosRunsToMaxTokens) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const auto r = generate({"--model", model.string(), "--prompt", "Once upon a time", "--max-tokens", "300",
                           "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto v = boost::json::parse(r.out).as_object();
  EXPECT_EQ(v.at("ids").as_array().size(), 300u);
  EXPECT_EQ(v.at("finish_reason").as_string(), "length");
}

TEST(CliGenerateTest, SamplingFlagsAreSeededAndReproducible) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const std::vector<std::string> flags = {"--model", model.string(), "--prompt", "Once upon a time", "--temperature",
                                          "0.8", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.02",
                                          "--repetition-penalty", "1.1", "--presence-penalty", "0.2",
                                          "--frequency-penalty", "0.1", "--seed", "42", "--max-tokens", "40"};
  const auto a = generate(flags), b = generate(flags);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  auto other = flags;
  other[other.size() - 3] = "43";
  EXPECT_NE(generate(other).out, a.out);
}

TEST(CliGenerateTest, ClearErrorsForBadFilesAndFlags) {
  const auto real = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(real);
  TempDir dir;
  auto r = generate({"--model", (dir.path() / "missing.gguf").string(), "--prompt", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ERR_NOT_FOUND"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;

  {
    std::ifstream in(real, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir.path() / "cut.gguf", std::ios::binary).write(bytes.data(), 200000);
  }
  r = generate({"--model", (dir.path() / "cut.gguf").string(), "--prompt", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ERR_FORMAT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
  std::ofstream(dir.path() / "notes.txt") << "hello";
  r = generate({"--model", (dir.path() / "notes.txt").string(), "--prompt", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ERR_UNSUPPORTED"), std::string::npos) << r.err;

  r = generate({"--prompt", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model is required"), std::string::npos) << r.err;
  r = generate({"--model", real.string(), "--prompt", "x", "--temperature", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("temperature"), std::string::npos) << r.err;
  r = generate({"--model", real.string(), "--prompt", "x", "--max-tokens", "lots"});
  EXPECT_EQ(r.exit_code, 2);
  r = generate({"--model", real.string(), "--prompt", "x", "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--frobnicate"), std::string::npos) << r.err;
  r = generate({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--max-tokens"), std::string::npos);
}

TEST(CliGenerateTest, InvalidUtf8PromptIsRefused) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const auto r = generate({"--model", model.string(), "--prompt", "bad \xff bytes"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UTF-8"), std::string::npos) << r.err;
}

TEST(CliGenerateTest, PromptLongerThanTheContextIsRefused) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "the cat sat. ";
  const auto r = generate({"--model", model.string(), "--prompt", long_prompt});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ERR_OUT_OF_RANGE"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hearth::testing
