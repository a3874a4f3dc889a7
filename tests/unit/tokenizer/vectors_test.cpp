// Every tokenizer format against real vocabularies and their ground-truth vectors.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <sstream>

#include "common/json.h"
#include "common/mapped_file.h"
#include "tests/test_util.h"
#include "tests/unit/tokenizer/test_vectors.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

using testing::check_vectors;
using testing::load_from_path;
using testing::shared_path;

const auto kStories = "models/stories260K/";
const auto kLlama2 = "models/llama2-tokenizer/";

TEST(TokenizerVectors, StoriesSentencePieceModel) {
  const auto vectors = shared_path(std::string(kStories) + "tok512.vectors.jsonl");
  HEARTH_REQUIRE_SHARED(vectors);
  auto tokenizer = load_from_path(shared_path(std::string(kStories) + "tok512.model"));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_TRUE(tokenizer->add_bos());
  check_vectors(*tokenizer, testing::read_jsonl_vectors(vectors), "stories260K tok512.model");
  // The README's prompt: BOS + SentencePiece encoding.
  auto ids = tokenizer->encode("Once upon a time");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{1, 403, 407, 261, 378}));
}

TEST(TokenizerVectors, StoriesLlama2cBin) {
  const auto vectors = shared_path(std::string(kStories) + "tok512.vectors.jsonl");
  HEARTH_REQUIRE_SHARED(vectors);
  auto tokenizer = load_from_path(shared_path(std::string(kStories) + "tok512.bin"), 512);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_EQ(tokenizer->type(0), TokenType::kUnknown);
  EXPECT_EQ(tokenizer->type(1), TokenType::kControl);
  EXPECT_EQ(tokenizer->type(3), TokenType::kByte);
  check_vectors(*tokenizer, testing::read_jsonl_vectors(vectors), "stories260K tok512.bin");
}

TEST(TokenizerVectors, StoriesHfDirectory) {
  const auto dir = shared_path("models/stories260K-hf");
  const auto vectors = shared_path(std::string(kStories) + "tok512.vectors.jsonl");
  HEARTH_REQUIRE_SHARED(dir);
  HEARTH_REQUIRE_SHARED(vectors);
  auto source = tokenizer_source_from_path(dir);
  ASSERT_TRUE(source.is_ok()) << source.status().to_string();
  EXPECT_EQ(source->kind, TokenizerSource::Kind::kSentencePiece);
  EXPECT_FALSE(source->config_json.empty());
  auto tokenizer = tokenizer_load(*source);
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  EXPECT_TRUE((*tokenizer)->add_bos());
  EXPECT_FALSE((*tokenizer)->add_eos());
  check_vectors(**tokenizer, testing::read_jsonl_vectors(vectors), "stories260K-hf dir");
}

// A GGUF "llama" vocabulary made from tok512.model's pieces, scores and types (what
// llama.cpp's converter stores) must encode like SentencePiece itself.
TEST(TokenizerVectors, StoriesGgufVocabFromModel) {
  const auto model_path = shared_path(std::string(kStories) + "tok512.model");
  const auto vectors = shared_path(std::string(kStories) + "tok512.vectors.jsonl");
  HEARTH_REQUIRE_SHARED(model_path);
  HEARTH_REQUIRE_SHARED(vectors);
  auto bytes = read_small_file(model_path, size_t{16} << 20);
  ASSERT_TRUE(bytes.is_ok());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(*bytes).ok());

  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kGguf;
  GgufVocab& g = source.gguf;
  g.model = "llama";
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    g.tokens.push_back(sp.IdToPiece(id));
    g.scores.push_back(sp.GetScore(id));
    TokenType t = TokenType::kNormal;
    if (sp.IsControl(id)) t = TokenType::kControl;
    if (sp.IsUnknown(id)) t = TokenType::kUnknown;
    if (sp.IsUnused(id)) t = TokenType::kUnused;
    if (sp.IsByte(id)) t = TokenType::kByte;
    g.token_types.push_back(static_cast<int32_t>(t));
  }
  g.bos_id = sp.bos_id();
  g.eos_id = sp.eos_id();
  g.unk_id = sp.unk_id();
  auto tokenizer = tokenizer_load(source);
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  EXPECT_TRUE((*tokenizer)->strips_leading_space());
  check_vectors(**tokenizer, testing::read_jsonl_vectors(vectors), "stories260K GGUF llama vocab");
  // Loaded from an rvalue (a resident attach's decoded blob), which takes the vocabulary
  // out of the source instead of copying it: the same tokenizer.
  TokenizerSource taken = source;
  auto moved = tokenizer_load(std::move(taken));
  ASSERT_TRUE(moved.is_ok()) << moved.status().to_string();
  EXPECT_EQ((*moved)->vocab_size(), (*tokenizer)->vocab_size());
  check_vectors(**moved, testing::read_jsonl_vectors(vectors), "stories260K GGUF llama vocab, moved");
}

TEST(TokenizerVectors, Llama2SentencePieceModel) {
  const auto vectors = shared_path(std::string(kLlama2) + "tokenizer.vectors.jsonl");
  HEARTH_REQUIRE_SHARED(vectors);
  auto tokenizer = load_from_path(shared_path(std::string(kLlama2) + "tokenizer.model"));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 32000);
  check_vectors(*tokenizer, testing::read_jsonl_vectors(vectors), "llama2 tokenizer.model");
}

TEST(TokenizerVectors, Llama2Llama2cBin) {
  const auto vectors = shared_path(std::string(kLlama2) + "tokenizer.vectors.jsonl");
  HEARTH_REQUIRE_SHARED(vectors);
  auto tokenizer = load_from_path(shared_path(std::string(kLlama2) + "tokenizer.bin"), 32000);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 32000);
  check_vectors(*tokenizer, testing::read_jsonl_vectors(vectors), "llama2 tokenizer.bin");
}

TEST(TokenizerVectors, Gpt2EncoderFilesLlamaCppCases) {
  const auto inp = shared_path("tokenizers/gpt2/ggml-vocab-gpt-2.gguf.inp");
  HEARTH_REQUIRE_SHARED(inp);
  auto tokenizer = load_from_path(shared_path("tokenizers/gpt2/encoder.json"));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  EXPECT_EQ(tokenizer->eos_id(), 50256);
  EXPECT_FALSE(tokenizer->add_bos());
  check_vectors(*tokenizer,
                testing::read_inp_out_vectors(inp, shared_path("tokenizers/gpt2/ggml-vocab-gpt-2.gguf.out")),
                "gpt2 ggml-vocab-gpt-2.gguf.inp/out");
}

TEST(TokenizerVectors, Gpt2EncoderFilesGpt3EncoderCases) {
  const auto cases = shared_path("tokenizers/gpt2/vectors.GPT-3-Encoder-tests.json");
  HEARTH_REQUIRE_SHARED(cases);
  auto tokenizer = load_from_path(shared_path("tokenizers/gpt2/encoder.json"));
  ASSERT_NE(tokenizer, nullptr);
  check_vectors(*tokenizer, testing::read_gpt3_vectors(cases), "gpt2 vectors.GPT-3-Encoder-tests.json");
}

TEST(TokenizerVectors, Llama3TokenizerJson) {
  const auto inp = shared_path("tokenizers/llama3/ggml-vocab-llama-bpe.gguf.inp");
  HEARTH_REQUIRE_SHARED(inp);
  auto tokenizer = load_from_path(shared_path("tokenizers/llama3/meta-llama-3-8b.tokenizer.json"));
  ASSERT_NE(tokenizer, nullptr);
  check_vectors(*tokenizer,
                testing::read_inp_out_vectors(inp, shared_path("tokenizers/llama3/ggml-vocab-llama-bpe.gguf.out")),
                "llama3 ggml-vocab-llama-bpe.gguf.inp/out");
}

TEST(TokenizerVectors, Phi3SpmTokenizerJson) {
  const auto inp = shared_path("tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf.inp");
  HEARTH_REQUIRE_SHARED(inp);
  auto tokenizer = load_from_path(shared_path("tokenizers/llama2-spm/phi-3.tokenizer.json"));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_TRUE(tokenizer->strips_leading_space());
  check_vectors(*tokenizer,
                testing::read_inp_out_vectors(inp, shared_path("tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf.out")),
                "llama2-spm ggml-vocab-llama-spm.gguf.inp/out (phi-3 tokenizer.json)");
}

// GGUF "gpt2" vocabularies: built from the same files llama.cpp's converter reads.
GgufVocab gguf_from_bpe_files(const std::filesystem::path& vocab_json, const std::vector<std::string>& merges,
                              const boost::json::array* added_tokens) {
  GgufVocab g;
  g.model = "gpt2";
  auto text = read_small_file(vocab_json, size_t{64} << 20);
  EXPECT_TRUE(text.is_ok());
  auto root = json_parse(*text, vocab_json.string());
  EXPECT_TRUE(root.is_ok());
  const boost::json::object* vocab = &root->as_object();
  if (vocab->contains("model") && vocab->at("model").is_object())
    vocab = &vocab->at("model").as_object().at("vocab").as_object();
  size_t n = vocab->size();
  if (added_tokens != nullptr) {
    for (const auto& t : *added_tokens) n = std::max<size_t>(n, t.as_object().at("id").to_number<size_t>() + 1);
  }
  g.tokens.resize(n);
  g.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  for (const auto& entry : *vocab) g.tokens[entry.value().to_number<size_t>()] = std::string(entry.key());
  if (added_tokens != nullptr) {
    for (const auto& t : *added_tokens) {
      const auto id = t.as_object().at("id").to_number<size_t>();
      g.tokens[id] = std::string(t.as_object().at("content").as_string());
      g.token_types[id] =
          static_cast<int32_t>(t.as_object().at("special").as_bool() ? TokenType::kControl : TokenType::kUserDefined);
    }
  }
  g.merges = merges;
  return g;
}

TEST(TokenizerVectors, GgufGpt2VocabFromEncoderFiles) {
  const auto inp = shared_path("tokenizers/gpt2/ggml-vocab-gpt-2.gguf.inp");
  HEARTH_REQUIRE_SHARED(inp);
  auto bpe = read_small_file(shared_path("tokenizers/gpt2/vocab.bpe"), size_t{16} << 20);
  ASSERT_TRUE(bpe.is_ok());
  std::vector<std::string> merges;
  std::istringstream lines(*bpe);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] != '#') merges.push_back(line);
  }
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kGguf;
  source.gguf = gguf_from_bpe_files(shared_path("tokenizers/gpt2/encoder.json"), merges, nullptr);
  source.gguf.pre = "gpt-2";
  source.gguf.token_types[50256] = static_cast<int32_t>(TokenType::kControl);
  source.gguf.eos_id = 50256;
  auto tokenizer = tokenizer_load(source);
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  EXPECT_FALSE((*tokenizer)->add_bos());
  check_vectors(**tokenizer,
                testing::read_inp_out_vectors(inp, shared_path("tokenizers/gpt2/ggml-vocab-gpt-2.gguf.out")),
                "gpt2 ggml-vocab-gpt-2.gguf.inp/out (GGUF gpt2 vocab)");
}

TEST(TokenizerVectors, GgufLlamaBpeVocabFromTokenizerJson) {
  const auto json_path = shared_path("tokenizers/llama3/meta-llama-3-8b.tokenizer.json");
  const auto inp = shared_path("tokenizers/llama3/ggml-vocab-llama-bpe.gguf.inp");
  HEARTH_REQUIRE_SHARED(json_path);
  HEARTH_REQUIRE_SHARED(inp);
  auto text = read_small_file(json_path, size_t{64} << 20);
  ASSERT_TRUE(text.is_ok());
  auto root = json_parse(*text, "tokenizer.json");
  ASSERT_TRUE(root.is_ok());
  std::vector<std::string> merges;
  for (const auto& m : root->as_object().at("model").as_object().at("merges").as_array()) {
    merges.emplace_back(m.as_string());
  }
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kGguf;
  source.gguf = gguf_from_bpe_files(json_path, merges, &root->as_object().at("added_tokens").as_array());
  source.gguf.pre = "llama-bpe";
  source.gguf.bos_id = 128000;
  source.gguf.eos_id = 128001;
  auto tokenizer = tokenizer_load(source);
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  EXPECT_TRUE((*tokenizer)->add_bos());
  check_vectors(**tokenizer,
                testing::read_inp_out_vectors(inp, shared_path("tokenizers/llama3/ggml-vocab-llama-bpe.gguf.out")),
                "llama3 ggml-vocab-llama-bpe.gguf.inp/out (GGUF llama-bpe vocab)");
  auto ids = (*tokenizer)->encode("<|begin_of_text|>Hi");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids->size(), 3u);  // BOS, the parsed special, "Hi"
  EXPECT_EQ((*ids)[1], 128000);
}

TEST(TokenizerVectors, GgufUnknownPreTokenizerIsRefused) {
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kGguf;
  source.gguf.model = "gpt2";
  source.gguf.pre = "no-such-pre";
  source.gguf.tokens = {"a", "b", "ab"};
  source.gguf.merges = {"a b"};
  auto tokenizer = tokenizer_load(source);
  ASSERT_FALSE(tokenizer.is_ok());
  EXPECT_EQ(tokenizer.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(tokenizer.status().message().find("no-such-pre"), std::string::npos);
  source.gguf.pre = "qwen2";
  auto qwen = tokenizer_load(source);
  ASSERT_TRUE(qwen.is_ok()) << qwen.status().to_string();
  auto ids = (*qwen)->encode("abab");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{2, 2}));
  source.gguf.model = "t5";
  auto t5 = tokenizer_load(source);
  ASSERT_FALSE(t5.is_ok());
  EXPECT_EQ(t5.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(t5.status().message().find("t5"), std::string::npos);
}

}  // namespace
}  // namespace hearth
