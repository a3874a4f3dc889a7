// Inputs a user or a file controls: every one is refused with a Status, none crashes.
#include <gtest/gtest.h>

#include <cstring>

#include "common/mapped_file.h"
#include "tests/test_util.h"
#include "tests/unit/tokenizer/test_vectors.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

using testing::load_from_path;
using testing::shared_path;

Status load_json_status(const std::string& json) {
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kHfJson;
  source.data = json;
  return tokenizer_load(source).status();
}

const std::string kTinyModel = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

TEST(HostileInput, InvalidUtf8TextIsRefused) {
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  for (const char* p :
       {"models/llama2-tokenizer/tokenizer.model", "models/stories260K/tok512.bin", "tokenizers/gpt2/encoder.json"}) {
    if (std::filesystem::exists(shared_path(p))) tokenizers.push_back(load_from_path(shared_path(p)));
  }
  TokenizerSource json;
  json.kind = TokenizerSource::Kind::kHfJson;
  json.data = "{" + kTinyModel + "}";
  auto tiny = tokenizer_load(json);
  ASSERT_TRUE(tiny.is_ok()) << tiny.status().to_string();
  tokenizers.push_back(std::move(tiny).value());
  for (const auto& t : tokenizers) {
    ASSERT_NE(t, nullptr);
    for (const std::string& bad : {std::string("ab\xff"), std::string("\xc3"), std::string("a\xed\xa0\x80"),
                                   std::string("\xc0\xaf"), std::string("ok\xf4\x90\x80\x80")}) {
      auto ids = t->encode(bad);
      ASSERT_FALSE(ids.is_ok());
      EXPECT_EQ(ids.status().code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(ids.status().message().find("offset"), std::string::npos) << ids.status().message();
    }
    auto nul = t->encode(std::string("a\0b", 3));  // NUL is valid UTF-8
    EXPECT_TRUE(nul.is_ok());
  }
}

TEST(HostileInput, IdsOutOfRange) {
  TokenizerSource json;
  json.kind = TokenizerSource::Kind::kHfJson;
  json.data = "{" + kTinyModel + "}";
  auto t = tokenizer_load(json);
  ASSERT_TRUE(t.is_ok());
  const std::vector<TokenId> ids = {-5, 0, 3, 1, 1 << 30, 2};
  EXPECT_EQ((*t)->decode(ids), "abab");
  EXPECT_EQ((*t)->piece(-1), "");
  EXPECT_EQ((*t)->piece(99), "");
  EXPECT_EQ((*t)->token_bytes(1 << 30), "");
  EXPECT_EQ((*t)->type(-3), TokenType::kUnused);
  IncrementalDetokenizer detok(**t, true);
  EXPECT_EQ(detok.push(-1), "");
  EXPECT_EQ(detok.push(100), "");
  EXPECT_EQ(detok.push(2), "ab");
}

TEST(HostileInput, MalformedTokenizerJson) {
  struct Case {
    std::string json;
    ErrorCode code;
  };
  const std::vector<Case> cases = {
      {"", ErrorCode::kFormat},
      {"{", ErrorCode::kFormat},
      {"[]", ErrorCode::kFormat},
      {R"({"model": 5})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": [], "merges": []}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 2000000000}, "merges": []}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 100000}, "merges": []}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": {}}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b c"]}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a"]]}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [[1, 2]]}})", ErrorCode::kFormat},
      {R"({"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0}, "merges": []}})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "added_tokens": [{"id": 3}]})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "added_tokens": [{"id": 3, "content": ""}]})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "added_tokens": {"id": 3}})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "added_tokens": [{"id": 3, "content": "x", "special": "yes"}]})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}}})",
       ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "pre_tokenizer": {"type": "Split", "pattern": "x"}})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": 3}})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "pre_tokenizer": 7})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "normalizer": {"type": "Prepend"}})", ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "decoder": {"type": "Strip", "content": " ", "start": -1, "stop": 0}})",
       ErrorCode::kFormat},
      {"{" + kTinyModel + R"(, "post_processor": {"type": "TemplateProcessing", "single": 1}})", ErrorCode::kFormat},
      {std::string(200, '[') + std::string(200, ']'), ErrorCode::kFormat},  // nesting past the bound
  };
  for (const Case& c : cases) {
    const Status s = load_json_status(c.json);
    EXPECT_FALSE(s.is_ok()) << c.json;
    EXPECT_EQ(s.code(), c.code) << c.json << " -> " << s.to_string();
  }
}

TEST(HostileInput, UnsupportedTypesAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model": {"type": "Unigram", "vocab": []}})", "Unigram"},
      {R"({"model": {"type": "WordPiece", "vocab": {}}})", "WordPiece"},
      {"{" + kTinyModel + R"(, "normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}})", "Precompiled"},
      {"{" + kTinyModel + R"(, "pre_tokenizer": {"type": "BertPreTokenizer"}})", "BertPreTokenizer"},
      {"{" + kTinyModel + R"(, "decoder": {"type": "WordPiece", "prefix": "##"}})", "WordPiece"},
      {"{" + kTinyModel + R"(, "decoder": {"type": "Sequence", "decoders": [{"type": "CTC"}]}})", "CTC"},
      {"{" + kTinyModel + R"(, "post_processor": {"type": "NoSuchProcessor"}})", "NoSuchProcessor"},
      {"{" + kTinyModel +
           R"(, "pre_tokenizer": {"type": "Split", "pattern": {"String": "-"}, "behavior": "Sideways"}})",
       "Sideways"},
      {"{" + kTinyModel + R"(, "decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"},
         {"type": "Strip", "content": " ", "start": 0, "stop": 1}]}})",
       "Strip"},
  };
  for (const auto& [json, name] : cases) {
    const Status s = load_json_status(json);
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << json << " -> " << s.to_string();
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  }
}

TEST(HostileInput, HugeArraysAreBounded) {
  // A merges list far longer than any real one, all naming pieces the vocabulary lacks.
  std::string merges = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [)";
  for (int i = 0; i < 200000; ++i) merges += (i ? ",\"x y\"" : "\"x y\"");
  merges += "]}}";
  EXPECT_EQ(load_json_status(merges).code(), ErrorCode::kFormat);
  // Many added tokens with ids far past the vocabulary.
  std::string added = "{" + kTinyModel + R"(, "added_tokens": [)";
  for (int i = 0; i < 1000; ++i) {
    added += (i ? "," : "") + std::string(R"({"id": )") + std::to_string(4000000 + i) + R"(, "content": "t)" +
             std::to_string(i) + "\"}";
  }
  added += "]}";
  EXPECT_EQ(load_json_status(added).code(), ErrorCode::kFormat);
  // An added token longer than any piece.
  EXPECT_EQ(load_json_status("{" + kTinyModel + R"(, "added_tokens": [{"id": 3, "content": ")" +
                             std::string(5000, 'x') + "\"}]}")
                .code(),
            ErrorCode::kFormat);
}

TEST(HostileInput, TruncatedAndMutatedRealJson) {
  const auto path = shared_path("tokenizers/llama2-spm/phi-3.tokenizer.json");
  HEARTH_REQUIRE_SHARED(path);
  auto text = read_small_file(path, size_t{64} << 20);
  ASSERT_TRUE(text.is_ok());
  for (const size_t len : {size_t{1}, size_t{100}, text->size() / 2, text->size() - 2}) {
    EXPECT_EQ(load_json_status(text->substr(0, len)).code(), ErrorCode::kFormat) << len;
  }
  // A merge pointing at a piece that is not in the vocabulary.
  std::string broken = *text;
  const size_t merges = broken.find("\"merges\": [");
  ASSERT_NE(merges, std::string::npos);
  broken.insert(merges + 11, "\"nosuchpiece zzz\",");
  const Status s = load_json_status(broken);
  EXPECT_EQ(s.code(), ErrorCode::kFormat) << s.to_string();
  EXPECT_NE(s.message().find("nosuchpiece"), std::string::npos);
}

TEST(HostileInput, MalformedLlama2cBin) {
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kLlama2c;
  const auto put_i32 = [](std::string& s, int32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); };
  const auto put_f32 = [](std::string& s, float v) { s.append(reinterpret_cast<const char*>(&v), 4); };
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kFormat);  // empty
  source.data = "ab";
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kFormat);
  std::string data;
  put_i32(data, -1);
  source.data = data;
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kFormat);  // bad max length
  data.clear();
  put_i32(data, 8);
  put_f32(data, 0.0f);
  put_i32(data, 0x7fffffff);  // a length past the end of the file
  source.data = data;
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kFormat);
  data.clear();
  put_i32(data, 8);
  for (int i = 0; i < 3; ++i) {
    put_f32(data, 0.0f);
    put_i32(data, 1);
    data += "x";
  }
  put_f32(data, 0.0f);  // truncated record
  source.data = data;
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kFormat);
  data.resize(data.size() - 4);
  source.data = data;
  EXPECT_TRUE(tokenizer_load(source).is_ok());
  source.vocab_size = 5;  // the model wants more tokens than the file has
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kFormat);
  source.vocab_size = -4;
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kInvalidArgument);
  source.vocab_size.reset();
  std::string nan_score;
  put_i32(nan_score, 8);
  put_f32(nan_score, std::numeric_limits<float>::quiet_NaN());
  put_i32(nan_score, 1);
  nan_score += "x";
  source.data = nan_score;
  EXPECT_EQ(tokenizer_load(source).status().code(), ErrorCode::kFormat);
}

TEST(HostileInput, MalformedSentencePieceAndGguf) {
  TokenizerSource sp;
  sp.kind = TokenizerSource::Kind::kSentencePiece;
  sp.data = "not a protobuf at all \xff\xff\xff";
  EXPECT_EQ(tokenizer_load(sp).status().code(), ErrorCode::kFormat);
  sp.data.clear();
  EXPECT_EQ(tokenizer_load(sp).status().code(), ErrorCode::kFormat);
  const auto model = shared_path("models/stories260K/tok512.model");
  if (std::filesystem::exists(model)) {
    auto bytes = read_small_file(model, size_t{16} << 20);
    ASSERT_TRUE(bytes.is_ok());
    for (const size_t len : {size_t{3}, bytes->size() / 2, bytes->size() - 1}) {
      sp.data = bytes->substr(0, len);
      EXPECT_FALSE(tokenizer_load(sp).is_ok()) << len;
    }
  }

  TokenizerSource gguf;
  gguf.kind = TokenizerSource::Kind::kGguf;
  gguf.gguf.model = "llama";
  EXPECT_EQ(tokenizer_load(gguf).status().code(), ErrorCode::kFormat);  // no tokens
  gguf.gguf.tokens = {"<unk>", "<s>", "</s>",
                      "\xe2\x96\x81"
                      "a"};
  gguf.gguf.scores = {0.0f};
  EXPECT_EQ(tokenizer_load(gguf).status().code(), ErrorCode::kFormat);  // scores vs tokens
  gguf.gguf.scores = {0.0f, 0.0f, 0.0f, 0.0f};
  gguf.gguf.token_types = {2, 3, 3, 9};
  EXPECT_EQ(tokenizer_load(gguf).status().code(), ErrorCode::kFormat);  // unknown type
  gguf.gguf.token_types = {2, 3, 3, 1};
  gguf.gguf.bos_id = 77;
  EXPECT_EQ(tokenizer_load(gguf).status().code(), ErrorCode::kFormat);  // BOS outside
  gguf.gguf.bos_id = 1;
  gguf.gguf.scores[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(tokenizer_load(gguf).status().code(), ErrorCode::kFormat);
  gguf.gguf.scores[3] = 0.0f;
  auto ok = tokenizer_load(gguf);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  auto ids = (*ok)->encode("a");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{1, 3}));
  gguf.bos_id = 9;  // the model config's BOS must be in the vocabulary too
  EXPECT_EQ(tokenizer_load(gguf).status().code(), ErrorCode::kOutOfRange);
  gguf.bos_id.reset();
  gguf.gguf.model = "gpt2";
  gguf.gguf.merges = {"nomerge"};
  EXPECT_EQ(tokenizer_load(gguf).status().code(), ErrorCode::kFormat);
}

TEST(HostileInput, PathsThatAreNotTokenizers) {
  testing::TempDir dir;
  EXPECT_EQ(tokenizer_source_from_path(dir.path() / "missing.json").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(tokenizer_source_from_path(dir.path()).status().code(), ErrorCode::kNotFound);
  {
    std::FILE* f = std::fopen((dir.path() / "weights.safetensors").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  EXPECT_EQ(tokenizer_source_from_path(dir.path() / "weights.safetensors").status().code(), ErrorCode::kUnsupported);
  {
    std::FILE* f = std::fopen((dir.path() / "encoder.json").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{}", f);
    std::fclose(f);
  }
  // encoder.json without its merges beside it.
  EXPECT_EQ(tokenizer_source_from_path(dir.path()).status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace hearth
