// llama2.c tokenizer.bin: int32 max_token_length, then per token float32 score, int32
// length and the piece's bytes (plain spaces, "<0xAB>" byte pieces; ids 0/1/2 are
// <unk>, BOS and EOS).
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/loaders.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/vocab.h"

namespace hearth {
namespace {

constexpr int32_t kMaxTokenLength = 4096;

template <typename T>
T read_le(const std::string& data, size_t pos) {
  T value;
  std::memcpy(&value, data.data() + pos, sizeof(T));  // llama2.c writes native (x86: little) endian
  return value;
}

bool vocabulary_has_double_space(const std::vector<std::string>& pieces) {
  for (const std::string& p : pieces) {
    if (p.find("  ") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_llama2c(const TokenizerSource& source) {
  const std::string& data = source.data;
  if (source.vocab_size && (*source.vocab_size <= 0 || *source.vocab_size > kMaxVocabSize)) {
    return make_error(ErrorCode::kInvalidArgument, "llama2.c vocab_size {} is outside [1, {}]", *source.vocab_size,
                      kMaxVocabSize);
  }
  if (data.size() < 4) return make_error(ErrorCode::kFormat, "tokenizer.bin is too short ({} bytes)", data.size());
  const auto max_token_length = read_le<int32_t>(data, 0);
  if (max_token_length <= 0 || max_token_length > kMaxTokenLength) {
    return make_error(ErrorCode::kFormat, "tokenizer.bin max_token_length {} is outside [1, {}]", max_token_length,
                      kMaxTokenLength);
  }
  const int64_t limit = source.vocab_size.value_or(static_cast<int32_t>(kMaxVocabSize));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  size_t pos = 4;
  while (pos < data.size() && static_cast<int64_t>(pieces.size()) < limit) {
    const size_t id = pieces.size();
    if (data.size() - pos < 8) return make_error(ErrorCode::kFormat, "tokenizer.bin is truncated in token {}", id);
    const auto score = read_le<float>(data, pos);
    const auto length = read_le<int32_t>(data, pos + 4);
    pos += 8;
    if (std::isnan(score)) return make_error(ErrorCode::kFormat, "tokenizer.bin: token {} has a NaN score", id);
    if (length < 0 || length > max_token_length || static_cast<size_t>(length) > data.size() - pos) {
      return make_error(ErrorCode::kFormat, "tokenizer.bin: token {} has length {} (max {}, {} bytes left)", id, length,
                        max_token_length, data.size() - pos);
    }
    pieces.emplace_back(data, pos, static_cast<size_t>(length));
    scores.push_back(score);
    pos += static_cast<size_t>(length);
  }
  if (pieces.size() < 3) return make_error(ErrorCode::kFormat, "tokenizer.bin holds {} tokens", pieces.size());
  if (source.vocab_size && static_cast<int64_t>(pieces.size()) < *source.vocab_size) {
    return make_error(ErrorCode::kFormat, "tokenizer.bin holds {} tokens, the model needs {}", pieces.size(),
                      *source.vocab_size);
  }

  auto vocab = std::make_shared<TokenizerVocab>();
  vocab->pieces = std::move(pieces);
  const size_t n = vocab->pieces.size();
  vocab->types.assign(n, TokenType::kNormal);
  vocab->bytes.assign(n, std::string());
  vocab->types[0] = TokenType::kUnknown;
  vocab->types[1] = TokenType::kControl;
  vocab->types[2] = TokenType::kControl;
  for (size_t i = 3; i < n; ++i) {
    const std::string& p = vocab->pieces[i];
    if (const auto b = parse_byte_piece(p)) {
      vocab->types[i] = TokenType::kByte;
      vocab->bytes[i].assign(1, static_cast<char>(*b));
    } else if (p.empty()) {
      vocab->types[i] = TokenType::kUnused;
    } else {
      vocab->bytes[i] = p;
    }
  }
  vocab->bytes[0] = kSpmUnknownSurface;
  vocab_index(*vocab);
  vocab->unk_id = 0;
  vocab->bos_id = 1;
  vocab->eos_id = 2;
  vocab->add_bos = true;
  vocab->add_eos = false;
  vocab->strips_leading_space = true;

  // llama2.c prepends one space and merges by score. Vocabularies trained with
  // SentencePiece's whitespace cleanup (no piece holds two spaces) get that cleanup too,
  // so text encodes as it did for training.
  Pipeline pipeline;
  if (!vocabulary_has_double_space(vocab->pieces)) pipeline.normalizer.add_collapse_spaces();
  pipeline.normalizer.add_prepend(" ");
  HEARTH_ASSIGN_OR_RETURN(SpmModel spm, SpmModel::build(vocab, std::move(scores)));
  pipeline.model = std::move(spm);
  HEARTH_RETURN_IF_ERROR(vocab_finalize(*vocab, source));
  return make_pipeline_tokenizer(std::move(vocab), std::move(pipeline));
}

}  // namespace hearth
