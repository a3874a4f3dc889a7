// tokenizer.json: real Qwen3 / SmolLM / Llama 3 / Phi-3 files and small synthetic
// pipelines for the parts the real files do not cover.
#include <gtest/gtest.h>

#include <set>

#include "common/utf8.h"
#include "tests/test_util.h"
#include "tests/unit/tokenizer/test_vectors.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

using testing::load_from_path;
using testing::shared_path;

EncodeOptions plain() {
  EncodeOptions o;
  o.add_special = false;
  o.parse_special = false;
  return o;
}

// Every distinct .inp string of the shared folders.
std::vector<std::string> all_inp_texts() {
  std::set<std::string> seen;
  std::vector<std::string> texts;
  for (const char* inp :
       {"tokenizers/gpt2/ggml-vocab-gpt-2.gguf.inp", "tokenizers/llama3/ggml-vocab-llama-bpe.gguf.inp",
        "tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf.inp"}) {
    if (!std::filesystem::exists(shared_path(inp))) continue;
    for (auto& t : testing::read_inp_texts(shared_path(inp))) {
      if (seen.insert(t).second) texts.push_back(std::move(t));
    }
  }
  return texts;
}

void expect_round_trip(const Tokenizer& tokenizer, const std::string& label) {
  const auto texts = all_inp_texts();
  ASSERT_FALSE(texts.empty());
  size_t pass = 0;
  for (const std::string& text : texts) {
    auto ids = tokenizer.encode(text, plain());
    ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
    const std::string back = tokenizer.decode(*ids);
    if (back == text) {
      ++pass;
    } else {
      ADD_FAILURE() << label << ": round trip of \"" << text << "\" gave \"" << back << "\"";
    }
  }
  std::printf("[round-trip] %s: %zu/%zu\n", label.c_str(), pass, texts.size());
  EXPECT_EQ(pass, texts.size());
}

class Qwen3 : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = shared_path("tokenizers/qwen3/qwen3-4b.tokenizer.json");
    if (!std::filesystem::exists(path_)) GTEST_SKIP() << path_ << " is absent";
    if (!tokenizer_) tokenizer_ = load_from_path(path_);
    ASSERT_NE(tokenizer_, nullptr);
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  std::filesystem::path path_;
  static std::unique_ptr<Tokenizer> tokenizer_;
};
std::unique_ptr<Tokenizer> Qwen3::tokenizer_;

TEST_F(Qwen3, HelloWorld) {
  auto ids = tokenizer_->encode("Hello world", plain());
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{9707, 1879}));
  EXPECT_EQ(tokenizer_->decode(*ids), "Hello world");
}

TEST_F(Qwen3, RoundTrip) { expect_round_trip(*tokenizer_, "qwen3"); }

TEST_F(Qwen3, AppliesNfc) {
  auto decomposed = tokenizer_->encode(
      "caf"
      "e\xcc\x81",
      plain());                                                // e + COMBINING ACUTE ACCENT
  auto composed = tokenizer_->encode("caf\xc3\xa9", plain());  // U+00E9
  ASSERT_TRUE(decomposed.is_ok());
  ASSERT_TRUE(composed.is_ok());
  EXPECT_EQ(*decomposed, *composed);
  EXPECT_EQ(tokenizer_->decode(*decomposed), "caf\xc3\xa9");
}

TEST_F(Qwen3, ConfigAndSpecialTokens) {
  EXPECT_EQ(tokenizer_->vocab_size(), 151669);
  EXPECT_EQ(tokenizer_->bos_id(), -1);  // bos_token: null
  EXPECT_FALSE(tokenizer_->add_bos());
  EXPECT_FALSE(tokenizer_->add_eos());
  EXPECT_EQ(tokenizer_->eos_id(), 151645);  // <|im_end|>
  EXPECT_EQ(tokenizer_->stop_ids(), (std::vector<TokenId>{151645}));
  EXPECT_NE(tokenizer_->chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(tokenizer_->type(151644), TokenType::kControl);
  // <think> is an added token that is not special: matched even without parse_special,
  // and part of the decoded text.
  EXPECT_EQ(tokenizer_->type(151667), TokenType::kUserDefined);
  auto ids = tokenizer_->encode("<think>hi</think>", plain());
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids->front(), 151667);
  EXPECT_EQ(ids->back(), 151668);
  EXPECT_EQ(tokenizer_->decode(*ids), "<think>hi</think>");
  auto chat = tokenizer_->encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_TRUE(chat.is_ok());
  EXPECT_EQ(chat->front(), 151644);
  EXPECT_EQ(chat->back(), 151645);
  EXPECT_EQ(tokenizer_->decode(*chat), "user\nhi");
  DecodeOptions keep;
  keep.skip_special = false;
  EXPECT_EQ(tokenizer_->decode(*chat, keep), "<|im_start|>user\nhi<|im_end|>");
}

TEST(SmolLM, DigitsRoundTripAndConfig) {
  const auto path = shared_path("tokenizers/smollm/SmolLM-135M-ft.tokenizer.json");
  HEARTH_REQUIRE_SHARED(path);
  auto tokenizer = load_from_path(path);
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->encode("12345", plain());
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids->size(), 5u);
  EXPECT_EQ(*ids, (std::vector<TokenId>{33, 34, 35, 36, 37}));
  auto mixed = tokenizer->encode("year 2024!", plain());
  ASSERT_TRUE(mixed.is_ok());
  EXPECT_EQ(tokenizer->decode(*mixed), "year 2024!");
  EXPECT_EQ(tokenizer->bos_id(), 0);  // <|endoftext|>
  EXPECT_EQ(tokenizer->eos_id(), 0);
  EXPECT_FALSE(tokenizer->add_bos());  // no add_bos_token, no post_processor
  EXPECT_EQ(tokenizer->stop_ids(), (std::vector<TokenId>{0}));
  EXPECT_TRUE(tokenizer->chat_template().empty());  // this config ships none
  EXPECT_EQ(tokenizer->vocab_size(), 49153);        // with the fine-tune's [PAD]
  EXPECT_EQ(tokenizer->find_piece("[PAD]"), 49152);
  expect_round_trip(*tokenizer, "smollm");
}

TEST(Llama3, SpecialTokenParsingAndConfig) {
  const auto path = shared_path("tokenizers/llama3/meta-llama-3-8b.tokenizer.json");
  HEARTH_REQUIRE_SHARED(path);
  auto tokenizer = load_from_path(path);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 128256);
  EXPECT_EQ(tokenizer->bos_id(), 128000);
  EXPECT_EQ(tokenizer->eos_id(), 128001);
  EXPECT_NE(tokenizer->chat_template().find("<|start_header_id|>"), std::string::npos);
  // No add_bos_token in the config and a ByteLevel post_processor: nothing is added.
  EXPECT_FALSE(tokenizer->add_bos());

  EncodeOptions parse;
  parse.add_special = false;
  auto on = tokenizer->encode("<|begin_of_text|>Hello", parse);
  ASSERT_TRUE(on.is_ok());
  EXPECT_EQ(*on, (std::vector<TokenId>{128000, 9906}));
  auto off = tokenizer->encode("<|begin_of_text|>Hello", plain());
  ASSERT_TRUE(off.is_ok());
  EXPECT_GT(off->size(), 2u);
  for (const TokenId id : *off) EXPECT_LT(id, 128000);
  EXPECT_EQ(tokenizer->decode(*off), "<|begin_of_text|>Hello");
  EXPECT_EQ(tokenizer->decode(*on), "Hello");
  expect_round_trip(*tokenizer, "llama3");
}

TEST(Phi3, ConfigDecidesBos) {
  const auto path = shared_path("tokenizers/llama2-spm/phi-3.tokenizer.json");
  HEARTH_REQUIRE_SHARED(path);
  auto tokenizer = load_from_path(path);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_TRUE(tokenizer->add_bos());
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 32000);  // <|endoftext|>
  auto ids = tokenizer->encode("Hello world");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{1, 15043, 3186}));
  EXPECT_EQ(tokenizer->decode(*ids), "Hello world");
  auto user = tokenizer->encode("<|user|>", plain());
  ASSERT_TRUE(user.is_ok());
  EXPECT_GT(user->size(), 1u);
  auto user_special = tokenizer->encode("<|user|>");
  ASSERT_TRUE(user_special.is_ok());
  EXPECT_EQ(*user_special, (std::vector<TokenId>{1, 32010}));
}

// --- Synthetic tokenizer.json files ---------------------------------------------------

std::unique_ptr<Tokenizer> load_json(const std::string& json, const std::string& config = "") {
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kHfJson;
  source.data = json;
  source.config_json = config;
  auto tokenizer = tokenizer_load(source);
  EXPECT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  return tokenizer.is_ok() ? std::move(tokenizer).value() : nullptr;
}

// A tiny word-level vocabulary: letters, a few merges, spaces as their own token.
std::string tiny_json(const std::string& pre_tokenizer, const std::string& extra = "") {
  return R"({"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "c": 5, " ": 6, "ab": 7, "abc": 8, "-": 9, "1": 10, "2": 11, "--": 15},
    "merges": ["a b", ["ab", "c"], "- -"]},
    "pre_tokenizer": )" +
         pre_tokenizer + extra + "}";
}

std::vector<TokenId> enc(const Tokenizer& t, std::string_view text, EncodeOptions o = plain()) {
  auto ids = t.encode(text, o);
  EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
  return ids.is_ok() ? *ids : std::vector<TokenId>{};
}

TEST(HfJsonSynthetic, MergesPairsUnknownsAndFuseUnk) {
  auto t = load_json(tiny_json("null"));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(enc(*t, "abc"), (std::vector<TokenId>{8}));
  EXPECT_EQ(enc(*t, "ab ab"), (std::vector<TokenId>{7, 6, 7}));
  EXPECT_EQ(enc(*t, "axyzb"), (std::vector<TokenId>{3, 0, 4}));  // x, y, z fused into one <unk>
  EXPECT_EQ(enc(*t, "cab"), (std::vector<TokenId>{5, 7}));
}

TEST(HfJsonSynthetic, SplitBehaviours) {
  const auto split = [](const std::string& behavior, bool invert) {
    return R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")" + behavior + R"(", "invert": )" +
           (invert ? "true" : "false") + "}";
  };
  auto isolated = load_json(tiny_json(split("Isolated", false)));
  ASSERT_NE(isolated, nullptr);
  EXPECT_EQ(enc(*isolated, "ab-c"), (std::vector<TokenId>{7, 9, 5}));
  auto removed = load_json(tiny_json(split("Removed", false)));
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(enc(*removed, "ab-c"), (std::vector<TokenId>{7, 5}));
  // Merged into the neighbour, "-" blocks the a-b merge only where it sits between them.
  auto with_previous = load_json(tiny_json(split("MergedWithPrevious", false)));
  ASSERT_NE(with_previous, nullptr);
  EXPECT_EQ(enc(*with_previous, "a-bc"), (std::vector<TokenId>{3, 9, 4, 5}));
  auto with_next = load_json(tiny_json(split("MergedWithNext", false)));
  ASSERT_NE(with_next, nullptr);
  EXPECT_EQ(enc(*with_next, "ab-abc"), (std::vector<TokenId>{7, 9, 8}));
  auto contiguous = load_json(tiny_json(split("Contiguous", false)));
  ASSERT_NE(contiguous, nullptr);
  EXPECT_EQ(enc(*contiguous, "a--b"), (std::vector<TokenId>{3, 15, 4}));  // "--" stays one piece
  EXPECT_EQ(enc(*isolated, "a--b"), (std::vector<TokenId>{3, 9, 9, 4}));  // each "-" alone
  // Inverted: the matches are the words, everything else is removed.
  auto inverted = load_json(
      tiny_json(R"({"type": "Split", "pattern": {"Regex": "[a-c]+"}, "behavior": "Removed", "invert": true})"));
  ASSERT_NE(inverted, nullptr);
  EXPECT_EQ(enc(*inverted, "ab--c"), (std::vector<TokenId>{7, 5}));
}

TEST(HfJsonSynthetic, WhitespaceDigitsAndSequence) {
  auto t = load_json(tiny_json(
      R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": false}]})"));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(enc(*t, "  ab   c12 "), (std::vector<TokenId>{7, 5, 10, 11}));
}

TEST(HfJsonSynthetic, WhitespaceAndPunctuationPreTokenizers) {
  auto whitespace = load_json(tiny_json(R"({"type": "Whitespace"})"));
  ASSERT_NE(whitespace, nullptr);
  EXPECT_EQ(enc(*whitespace, "a --b"), (std::vector<TokenId>{3, 15, 4}));
  auto punctuation = load_json(tiny_json(R"({"type": "Punctuation"})"));
  ASSERT_NE(punctuation, nullptr);
  EXPECT_EQ(enc(*punctuation, "a--b"), (std::vector<TokenId>{3, 9, 9, 4}));
  auto contiguous = load_json(tiny_json(R"({"type": "Punctuation", "behavior": "Contiguous"})"));
  ASSERT_NE(contiguous, nullptr);
  EXPECT_EQ(enc(*contiguous, "a--b"), (std::vector<TokenId>{3, 15, 4}));
}

TEST(HfJsonSynthetic, SubwordPrefixAndSuffix) {
  const std::string json = R"({"model": {"type": "BPE", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
      "vocab": {"a": 0, "##b</w>": 1, "ab</w>": 2, "a</w>": 3},
      "merges": ["a ##b</w>"]},
    "pre_tokenizer": {"type": "WhitespaceSplit"}})";
  auto t = load_json(json);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(enc(*t, "ab a ab"), (std::vector<TokenId>{2, 3, 2}));
}

TEST(HfJsonSynthetic, TemplateProcessingAddsBosAndEos) {
  const std::string post = R"(, "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                         "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}})";
  auto t = load_json(tiny_json("null", post));
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->add_bos());
  EXPECT_TRUE(t->add_eos());
  EXPECT_EQ(enc(*t, "ab", EncodeOptions{}), (std::vector<TokenId>{1, 7, 2}));
  // tokenizer_config.json wins over the template.
  auto configured = load_json(tiny_json("null", post), R"({"add_bos_token": true, "add_eos_token": false,
      "bos_token": {"content": "<s>"}, "eos_token": "</s>",
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  ASSERT_NE(configured, nullptr);
  EXPECT_EQ(enc(*configured, "ab", EncodeOptions{}), (std::vector<TokenId>{1, 7}));
  EXPECT_EQ(configured->chat_template(), "D");
  // A sequence post_processor holding the template works the same.
  auto sequence = load_json(tiny_json("null", R"(, "post_processor": {"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": false},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
       {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}]})"));
  ASSERT_NE(sequence, nullptr);
  EXPECT_TRUE(sequence->add_bos());
  EXPECT_FALSE(sequence->add_eos());
}

TEST(HfJsonSynthetic, AddedTokenFlags) {
  const std::string added = R"(, "added_tokens": [
      {"id": 12, "content": "<x>", "special": true, "lstrip": true, "rstrip": true, "normalized": false},
      {"id": 13, "content": "ab", "special": false, "single_word": true, "normalized": false},
      {"id": 14, "content": "<x>a", "special": true, "normalized": false}])";
  auto t = load_json(tiny_json("null", added));
  ASSERT_NE(t, nullptr);
  EncodeOptions parse = plain();
  parse.parse_special = true;
  EXPECT_EQ(enc(*t, "a <x> b", parse), (std::vector<TokenId>{3, 12, 4}));  // spaces swallowed
  EXPECT_EQ(enc(*t, "b<x>ab", parse), (std::vector<TokenId>{4, 14, 4}));   // longest match
  EXPECT_EQ(enc(*t, "ab c", parse), (std::vector<TokenId>{13, 6, 5}));     // a whole word
  EXPECT_EQ(enc(*t, "abc", parse), (std::vector<TokenId>{8}));             // inside a word: no
  // parse_special off: special added tokens are plain text (< and x are unknown here).
  EXPECT_EQ(enc(*t, "<x>", plain()), (std::vector<TokenId>{0}));
}

TEST(HfJsonSynthetic, MetaspaceAndByteFallback) {
  const std::string json = R"({"model": {"type": "BPE", "byte_fallback": true,
      "vocab": {"<unk>": 0, "<0xC3>": 1, "<0xA9>": 2, "\u2581": 3, "a": 4, "\u2581a": 5},
      "merges": ["\u2581 a"]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
      {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true}]}})";
  auto t = load_json(json);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(enc(*t, "a a"), (std::vector<TokenId>{5, 5}));
  EXPECT_EQ(enc(*t, "a\xc3\xa9"), (std::vector<TokenId>{5, 1, 2}));
  EXPECT_EQ(t->type(1), TokenType::kByte);
  EXPECT_TRUE(t->strips_leading_space());
  EXPECT_EQ(t->decode(std::vector<TokenId>{5, 5, 1, 2}), "a a\xc3\xa9");
  DecodeOptions mid;
  mid.at_start = false;
  EXPECT_EQ(t->decode(std::vector<TokenId>{5}, mid), " a");
}

TEST(HfJsonSynthetic, NormalizersLowercaseStripReplace) {
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "_": 2}, "merges": []},
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Strip", "strip_left": true, "strip_right": true},
       {"type": "Lowercase"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": "_"}]}})";
  auto t = load_json(json);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(enc(*t, "  A \t B  "), (std::vector<TokenId>{0, 2, 1}));
}

}  // namespace
}  // namespace hearth
