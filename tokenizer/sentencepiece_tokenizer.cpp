// SentencePiece .model files, encoded by the SentencePiece library itself.
#include <sentencepiece_processor.h>

#include <memory>
#include <utility>

#include "common/log.h"
#include "tokenizer/loaders.h"
#include "tokenizer/sp_model_proto.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/vocab.h"

namespace hearth {
namespace {

constexpr size_t kMaxModelBytes = size_t{256} << 20;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::shared_ptr<const TokenizerVocab> vocab,
                         std::unique_ptr<sentencepiece::SentencePieceProcessor> processor, SpecialTokenMatcher specials)
      : Tokenizer(std::move(vocab)), processor_(std::move(processor)), specials_(std::move(specials)) {}

  Result<std::vector<TokenId>> encode(std::string_view text, const EncodeOptions& options) const override {
    HEARTH_RETURN_IF_ERROR(check_encode_input(text));
    std::vector<TokenId> ids;
    if (options.add_special && vocab_->add_bos) ids.push_back(vocab_->bos_id);
    std::vector<SpecialTokenMatcher::Piece> segments;
    specials_.split(text, options.parse_special, segments);
    std::vector<int> piece_ids;
    for (const auto& segment : segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
        continue;
      }
      piece_ids.clear();
      const auto status = processor_->Encode(text.substr(segment.begin, segment.end - segment.begin), &piece_ids);
      if (!status.ok()) {
        return make_error(ErrorCode::kInvalidArgument, "SentencePiece could not encode the text: {}",
                          status.ToString());
      }
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
    if (options.add_special && vocab_->add_eos) ids.push_back(vocab_->eos_id);
    return ids;
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  SpecialTokenMatcher specials_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const TokenizerSource& source) {
  if (source.data.empty()) return make_error(ErrorCode::kFormat, "the SentencePiece model is empty");
  if (source.data.size() > kMaxModelBytes) {
    return make_error(ErrorCode::kFormat, "the SentencePiece model of {} bytes is larger than the {} accepted",
                      source.data.size(), kMaxModelBytes);
  }
  // The library rejects malformed protobufs; our own reader then takes the piece types.
  HEARTH_ASSIGN_OR_RETURN(SpModelInfo info, parse_sp_model_info(source.data));
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto loaded = processor->LoadFromSerializedProto(source.data);
  if (!loaded.ok()) {
    return make_error(ErrorCode::kFormat, "not a valid SentencePiece model: {}", loaded.ToString());
  }
  const int n = processor->GetPieceSize();
  if (n <= 0 || n > kMaxVocabSize || static_cast<size_t>(n) != info.types.size()) {
    return make_error(ErrorCode::kFormat, "the SentencePiece model has {} pieces ({} typed)", n, info.types.size());
  }
  HEARTH_ASSIGN_OR_RETURN(TokenizerConfig config, parse_tokenizer_config(source.config_json));

  auto vocab = std::make_shared<TokenizerVocab>();
  vocab_resize(*vocab, n);
  SpecialTokenMatcher specials;
  for (int id = 0; id < n; ++id) {
    const auto i = static_cast<size_t>(id);
    vocab->pieces[i] = processor->IdToPiece(id);
    vocab->types[i] = info.types[i];
    vocab->bytes[i] = spm_piece_bytes(vocab->pieces[i], vocab->types[i]);
    if (vocab->types[i] == TokenType::kControl || vocab->types[i] == TokenType::kUnknown) {
      HEARTH_RETURN_IF_ERROR(specials.add({id, vocab->pieces[i], /*special=*/true}));
    }
  }
  vocab_index(*vocab);
  vocab->bos_id = processor->bos_id();
  vocab->eos_id = processor->eos_id();
  vocab->unk_id = processor->unk_id();
  vocab->add_bos = config.add_bos_token.value_or(true);
  vocab->add_eos = config.add_eos_token.value_or(false);
  const auto config_token = [&vocab](const ConfigToken& token, TokenId& id, std::string_view what) {
    if (!token.present) return;
    if (!token.content) {
      id = -1;
      return;
    }
    if (const auto found = vocab->find(*token.content)) {
      id = *found;
    } else {
      HEARTH_LOG_WARN("tokenizer_config.json names {} token \"{}\", which the vocabulary lacks; keeping id {}", what,
                      *token.content, id);
    }
  };
  config_token(config.bos_token, vocab->bos_id, "BOS");
  config_token(config.eos_token, vocab->eos_id, "EOS");
  vocab->chat_template = std::move(config.chat_template);
  vocab->strips_leading_space = info.add_dummy_prefix;
  HEARTH_RETURN_IF_ERROR(vocab_finalize(*vocab, source));
  return std::unique_ptr<Tokenizer>(
      std::make_unique<SentencePieceTokenizer>(std::move(vocab), std::move(processor), std::move(specials)));
}

}  // namespace hearth
