// GGUF tokenizer.ggml.* vocabularies: "llama" (SentencePiece-style, score-based) and
// "gpt2" (byte-level BPE), following llama.cpp's reading of them.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/loaders.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/vocab.h"

namespace hearth {
namespace {

Status check_arrays(const GgufVocab& g) {
  const size_t n = g.tokens.size();
  if (n == 0 || static_cast<int64_t>(n) > kMaxVocabSize) {
    return make_error(ErrorCode::kFormat, "GGUF vocabulary has {} tokens (1 to {} accepted)", n, kMaxVocabSize);
  }
  if (!g.scores.empty() && g.scores.size() != n) {
    return make_error(ErrorCode::kFormat, "GGUF vocabulary has {} tokens but {} scores", n, g.scores.size());
  }
  if (!g.token_types.empty() && g.token_types.size() != n) {
    return make_error(ErrorCode::kFormat, "GGUF vocabulary has {} tokens but {} token types", n, g.token_types.size());
  }
  for (size_t i = 0; i < n; ++i) {
    if (g.tokens[i].size() > kMaxPieceBytes) {
      return make_error(ErrorCode::kFormat, "GGUF token {} is {} bytes long (at most {})", i, g.tokens[i].size(),
                        kMaxPieceBytes);
    }
  }
  const auto check_id = [n](const std::optional<int32_t>& id, std::string_view what) -> Status {
    if (id && (*id < -1 || *id >= static_cast<int64_t>(n))) {
      return make_error(ErrorCode::kFormat, "GGUF {} id {} is outside the vocabulary of {} tokens", what, *id, n);
    }
    return Status::ok();
  };
  HEARTH_RETURN_IF_ERROR(check_id(g.bos_id, "BOS"));
  HEARTH_RETURN_IF_ERROR(check_id(g.eos_id, "EOS"));
  HEARTH_RETURN_IF_ERROR(check_id(g.unk_id, "unknown-token"));
  HEARTH_RETURN_IF_ERROR(check_id(g.pad_id, "padding"));
  HEARTH_RETURN_IF_ERROR(check_id(g.eot_id, "end-of-turn"));
  HEARTH_RETURN_IF_ERROR(check_id(g.eom_id, "end-of-message"));
  return Status::ok();
}

// Token types as given, or inferred the way llama.cpp does when the array is absent.
Result<std::vector<TokenType>> token_types(const GgufVocab& g, bool spm) {
  std::vector<TokenType> types(g.tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    if (!g.token_types.empty()) {
      const int32_t t = g.token_types[i];
      if (t < 0 || t > 6) return make_error(ErrorCode::kFormat, "GGUF token {} has unknown type {}", i, t);
      types[i] = (t == 0) ? TokenType::kNormal : static_cast<TokenType>(t);  // 0: undefined
    } else if (spm && parse_byte_piece(g.tokens[i])) {
      types[i] = TokenType::kByte;
    }
    if (g.tokens[i].empty() && types[i] == TokenType::kNormal) types[i] = TokenType::kUnused;
  }
  return types;
}

// SentencePiece models trained with remove_extra_whitespaces never see two spaces in a
// row, so their vocabularies have no piece holding two; vocabularies that keep spaces
// ("▁▁", "▁▁▁▁" in Llama 2) were trained on unchanged whitespace.
bool vocabulary_collapses_spaces(const std::vector<std::string>& pieces, std::string_view space) {
  const std::string twice = std::string(space) + std::string(space);
  for (const std::string& p : pieces) {
    if (p.find(twice) != std::string::npos) return false;
  }
  return true;
}

Status add_specials(const TokenizerVocab& vocab, SpecialTokenMatcher& matcher) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType t = vocab.types[static_cast<size_t>(id)];
    if (t != TokenType::kControl && t != TokenType::kUnknown && t != TokenType::kUserDefined) continue;
    // User-defined tokens are always matched; control and unknown only when parsing specials.
    HEARTH_RETURN_IF_ERROR(matcher.add({id, vocab.pieces[static_cast<size_t>(id)], t != TokenType::kUserDefined}));
  }
  return Status::ok();
}

Result<std::unique_ptr<Tokenizer>> finish(std::shared_ptr<TokenizerVocab> vocab, Pipeline pipeline, const GgufVocab& g,
                                          const TokenizerSource& source) {
  if (g.eot_id && *g.eot_id >= 0) vocab->extra_stop_ids.push_back(*g.eot_id);
  if (g.eom_id && *g.eom_id >= 0) vocab->extra_stop_ids.push_back(*g.eom_id);
  vocab->chat_template = g.chat_template;
  HEARTH_RETURN_IF_ERROR(vocab_finalize(*vocab, source));
  return make_pipeline_tokenizer(std::move(vocab), std::move(pipeline));
}

Result<std::unique_ptr<Tokenizer>> load_llama(GgufVocab& g, const TokenizerSource& source) {
  const auto n = static_cast<int32_t>(g.tokens.size());
  auto vocab = std::make_shared<TokenizerVocab>();
  HEARTH_ASSIGN_OR_RETURN(vocab->types, token_types(g, /*spm=*/true));
  vocab->pieces = std::move(g.tokens);  // g.tokens is not read again
  vocab_index(*vocab);
  const auto default_id = [n](TokenId id) { return id < n ? id : -1; };
  vocab->unk_id = g.unk_id.value_or(default_id(0));
  vocab->bos_id = g.bos_id.value_or(default_id(1));
  vocab->eos_id = g.eos_id.value_or(default_id(2));
  if (g.token_types.empty()) {
    if (vocab->unk_id >= 0) vocab->types[static_cast<size_t>(vocab->unk_id)] = TokenType::kUnknown;
    if (vocab->bos_id >= 0) vocab->types[static_cast<size_t>(vocab->bos_id)] = TokenType::kControl;
    if (vocab->eos_id >= 0) vocab->types[static_cast<size_t>(vocab->eos_id)] = TokenType::kControl;
  }
  vocab->bytes.reserve(vocab->pieces.size());
  for (size_t i = 0; i < vocab->pieces.size(); ++i) {
    vocab->bytes.push_back(spm_piece_bytes(vocab->pieces[i], vocab->types[i]));
  }

  Pipeline pipeline;
  HEARTH_RETURN_IF_ERROR(add_specials(*vocab, pipeline.raw_specials));
  const bool add_space_prefix = g.add_space_prefix.value_or(true);
  const bool collapse = g.remove_extra_whitespaces.value_or(vocabulary_collapses_spaces(vocab->pieces, kSpmSpace));
  if (collapse) pipeline.normalizer.add_collapse_spaces();
  if (add_space_prefix) pipeline.normalizer.add_prepend(std::string(kSpmSpace));
  HEARTH_ASSIGN_OR_RETURN(Regex space, Regex::compile(" ", /*literal=*/true));
  pipeline.normalizer.add_replace(std::move(space), std::string(kSpmSpace));
  std::vector<float> scores = std::move(g.scores);
  scores.resize(vocab->pieces.size(), 0.0f);
  HEARTH_ASSIGN_OR_RETURN(SpmModel spm, SpmModel::build(vocab, std::move(scores)));
  pipeline.model = std::move(spm);

  vocab->strips_leading_space = add_space_prefix;
  vocab->add_bos = g.add_bos.value_or(true);
  vocab->add_eos = g.add_eos.value_or(false);
  return finish(std::move(vocab), std::move(pipeline), g, source);
}

bool is_llama3_pre(std::string_view pre) { return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe"; }

Result<std::unique_ptr<Tokenizer>> load_gpt2(const GgufVocab& g, const TokenizerSource& source) {
  auto vocab = std::make_shared<TokenizerVocab>();
  vocab->pieces = g.tokens;
  HEARTH_ASSIGN_OR_RETURN(vocab->types, token_types(g, /*spm=*/false));
  vocab->bytes.assign(g.tokens.size(), std::string());
  vocab_index(*vocab);
  vocab->unk_id = g.unk_id.value_or(-1);
  vocab->bos_id = g.bos_id.value_or(-1);
  vocab->eos_id = g.eos_id.value_or(-1);
  for (size_t i = 0; i < vocab->pieces.size(); ++i) {
    const std::string& piece = vocab->pieces[i];
    switch (vocab->types[i]) {
      case TokenType::kNormal:
      case TokenType::kByte:
      case TokenType::kUnknown:
        if (!byte_level_decode(piece, vocab->bytes[i])) vocab->bytes[i] = piece;
        break;
      case TokenType::kUserDefined: vocab->bytes[i] = piece; break;
      case TokenType::kControl:
      case TokenType::kUnused: break;
    }
  }

  Pipeline pipeline;
  HEARTH_RETURN_IF_ERROR(add_specials(*vocab, pipeline.raw_specials));
  HEARTH_RETURN_IF_ERROR(pre_tokenizer_for_gguf(g.pre, pipeline.pre_tokenizer));
  if (static_cast<int64_t>(g.merges.size()) > kMaxMerges) {
    return make_error(ErrorCode::kFormat, "GGUF vocabulary has {} merges (at most {})", g.merges.size(), kMaxMerges);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(g.merges.size());
  for (size_t i = 0; i < g.merges.size(); ++i) {
    const std::string& m = g.merges[i];
    const size_t space = m.find(' ', 1);  // a piece may itself be a space
    if (space == std::string::npos || space + 1 >= m.size()) {
      return make_error(ErrorCode::kFormat, "GGUF merge {} (\"{}\") is not two pieces split by a space", i,
                        std::string_view(m).substr(0, 64));
    }
    merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  PieceMap model_ids;
  model_ids.reserve(vocab->pieces.size());
  for (size_t i = 0; i < vocab->pieces.size(); ++i) {
    if (!vocab->pieces[i].empty()) model_ids.emplace(vocab->pieces[i], static_cast<TokenId>(i));
  }
  BpeOptions options;
  options.ignore_merges = is_llama3_pre(g.pre);
  options.unk_id = vocab->unk_id;
  HEARTH_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::build(std::move(model_ids), merges, std::move(options)));
  pipeline.model = std::move(bpe);

  vocab->strips_leading_space = false;
  vocab->add_bos = g.add_bos.value_or(is_llama3_pre(g.pre));
  vocab->add_eos = g.add_eos.value_or(false);
  return finish(std::move(vocab), std::move(pipeline), g, source);
}

Status check_model(const GgufVocab& g) {
  HEARTH_RETURN_IF_ERROR(check_arrays(g));
  if (g.model == "llama" || g.model == "gpt2") return Status::ok();
  return make_error(ErrorCode::kUnsupported, "GGUF tokenizer model \"{}\" is not supported (llama and gpt2 are)",
                    g.model);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_gguf_vocab(const TokenizerSource& source) {
  HEARTH_RETURN_IF_ERROR(check_model(source.gguf));
  if (source.gguf.model == "gpt2") return load_gpt2(source.gguf, source);
  GgufVocab g = source.gguf;  // load_llama takes its tokens and scores
  return load_llama(g, source);
}

Result<std::unique_ptr<Tokenizer>> load_gguf_vocab(TokenizerSource&& source) {
  HEARTH_RETURN_IF_ERROR(check_model(source.gguf));
  if (source.gguf.model == "gpt2") return load_gpt2(source.gguf, source);
  GgufVocab g = std::move(source.gguf);
  return load_llama(g, source);
}

}  // namespace hearth
