// The reasoning splitter: <think>...</think> apart from the answer, whatever the token
// boundaries, with a prompt that opens the reasoning or not; and the parser names.
#include "frontend/reasoning.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hearth {
namespace {

struct Joined {
  std::string reasoning, content;
};

// `text` pushed in pieces cut at `cuts`, then finished.
Joined split(std::string_view text, bool inside, const std::vector<size_t>& cuts) {
  ReasoningSplitter s(inside);
  Joined out;
  size_t at = 0;
  for (size_t cut : cuts) {
    auto piece = s.push(text.substr(at, cut - at));
    out.reasoning += piece.reasoning;
    out.content += piece.content;
    at = cut;
  }
  auto piece = s.push(text.substr(at));
  out.reasoning += piece.reasoning;
  out.content += piece.content;
  auto rest = s.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

TEST(ReasoningSplitter, WholeTexts) {
  auto a = split("<think>let me see</think>\n\nThe answer.", false, {});
  EXPECT_EQ(a.reasoning, "let me see");
  EXPECT_EQ(a.content, "The answer.");
  auto b = split("\n<think>x</think>y", false, {});
  EXPECT_EQ(b.reasoning, "x");
  EXPECT_EQ(b.content, "y");
  auto plain = split("no tags <think> here", false, {});  // a tag not at the start is text
  EXPECT_EQ(plain.reasoning, "");
  EXPECT_EQ(plain.content, "no tags <think> here");
  auto opened = split("already thinking</think>done", true, {});  // DeepSeek-R1's template opened it
  EXPECT_EQ(opened.reasoning, "already thinking");
  EXPECT_EQ(opened.content, "done");
  auto unclosed = split("<think>ran out", false, {});
  EXPECT_EQ(unclosed.reasoning, "ran out");
  EXPECT_EQ(unclosed.content, "");
  auto lookalike = split("<thin", false, {});  // held, then given back as text at the end
  EXPECT_EQ(lookalike.content, "<thin");
  auto almost = split("<think>a</thin b</think>c", false, {});
  EXPECT_EQ(almost.reasoning, "a</thin b");
  EXPECT_EQ(almost.content, "c");
}

TEST(ReasoningSplitter, EveryCutGivesTheSameSplit) {
  const std::vector<std::pair<std::string, bool>> texts = {
      {"<think>step one\nstep two</think>\n\nAnswer: 42 </think> stays", false},
      {"  <think></think>empty thought", false},
      {"inside already</think>out", true},
      {"<th>not a tag", false},
  };
  std::mt19937 rng(7);
  for (const auto& [text, inside] : texts) {
    const Joined whole = split(text, inside, {});
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) {
        if (rng() % 3 == 0) cuts.push_back(i);
      }
      const Joined pieces = split(text, inside, cuts);
      EXPECT_EQ(pieces.reasoning, whole.reasoning) << text;
      EXPECT_EQ(pieces.content, whole.content) << text;
    }
  }
}

TEST(ReasoningSplitter, InReasoningFollowsTheTags) {
  ReasoningSplitter s(false);
  EXPECT_FALSE(s.in_reasoning());
  s.push("<think>");
  EXPECT_TRUE(s.in_reasoning());
  s.push("a</th");
  EXPECT_TRUE(s.in_reasoning());
  s.push("ink>");
  EXPECT_FALSE(s.in_reasoning());
}

TEST(ReasoningFormat, NamesAndPrompts) {
  EXPECT_EQ(*reasoning_format_from_name("qwen3"), ReasoningFormat::kThinkTags);
  EXPECT_EQ(*reasoning_format_from_name("deepseek_r1"), ReasoningFormat::kThinkTags);
  EXPECT_EQ(*reasoning_format_from_name("none"), ReasoningFormat::kNone);
  EXPECT_FALSE(reasoning_format_from_name("o1").is_ok());
  EXPECT_TRUE(prompt_opens_reasoning("<|Assistant|><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>x</think>\n"));
}

}  // namespace
}  // namespace hearth
