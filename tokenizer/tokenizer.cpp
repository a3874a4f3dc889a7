#include "tokenizer/tokenizer.h"

#include <utility>

#include "common/utf8.h"
#include "tokenizer/loaders.h"
#include "tokenizer/vocab.h"

namespace hearth {

Tokenizer::Tokenizer(std::shared_ptr<const detail::TokenizerVocab> vocab) : vocab_(std::move(vocab)) {}

int32_t Tokenizer::vocab_size() const { return vocab_->size(); }

std::string_view Tokenizer::piece(TokenId id) const {
  return vocab_->valid(id) ? std::string_view(vocab_->pieces[static_cast<size_t>(id)]) : std::string_view();
}

std::optional<TokenId> Tokenizer::find_piece(std::string_view p) const { return vocab_->find(p); }

TokenType Tokenizer::type(TokenId id) const {
  return vocab_->valid(id) ? vocab_->types[static_cast<size_t>(id)] : TokenType::kUnused;
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  return vocab_->valid(id) ? std::string_view(vocab_->bytes[static_cast<size_t>(id)]) : std::string_view();
}

bool Tokenizer::strips_leading_space() const { return vocab_->strips_leading_space; }
TokenId Tokenizer::bos_id() const { return vocab_->bos_id; }
TokenId Tokenizer::eos_id() const { return vocab_->eos_id; }
const std::vector<TokenId>& Tokenizer::stop_ids() const { return vocab_->stop_ids; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
bool Tokenizer::add_eos() const { return vocab_->add_eos; }
const std::string& Tokenizer::chat_template() const { return vocab_->chat_template; }

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  std::string raw;
  bool at_start = options.at_start;
  for (const TokenId id : ids) {
    if (!vocab_->valid(id)) continue;
    std::string_view text = (vocab_->types[static_cast<size_t>(id)] == TokenType::kControl)
                                ? (options.skip_special ? std::string_view() : piece(id))
                                : token_bytes(id);
    if (text.empty()) continue;
    if (at_start && vocab_->strips_leading_space && text.front() == ' ') text.remove_prefix(1);
    at_start = false;
    raw.append(text);
  }
  return utf8_sanitize(raw);
}

Result<std::unique_ptr<Tokenizer>> tokenizer_load(const TokenizerSource& source) {
  switch (source.kind) {
    case TokenizerSource::Kind::kSentencePiece: return load_sentencepiece(source);
    case TokenizerSource::Kind::kHfJson: return load_hf_json(source);
    case TokenizerSource::Kind::kGpt2Files: return load_gpt2_files(source);
    case TokenizerSource::Kind::kGguf: return load_gguf_vocab(source);
    case TokenizerSource::Kind::kLlama2c: return load_llama2c(source);
  }
  return make_error(ErrorCode::kUnsupported, "unknown tokenizer source kind {}", static_cast<int>(source.kind));
}

Result<std::unique_ptr<Tokenizer>> tokenizer_load(TokenizerSource&& source) {
  if (source.kind == TokenizerSource::Kind::kGguf) return load_gguf_vocab(std::move(source));
  return tokenizer_load(static_cast<const TokenizerSource&>(source));
}

}  // namespace hearth
