#include "tokenizer/pipeline.h"

#include <string>
#include <utility>
#include <vector>

namespace hearth {
namespace {

class PipelineTokenizer final : public Tokenizer {
 public:
  PipelineTokenizer(std::shared_ptr<const TokenizerVocab> vocab, Pipeline pipeline)
      : Tokenizer(std::move(vocab)), pipeline_(std::move(pipeline)) {}

  Result<std::vector<TokenId>> encode(std::string_view text, const EncodeOptions& options) const override {
    HEARTH_RETURN_IF_ERROR(check_encode_input(text));
    std::vector<TokenId> ids;
    ids.reserve(text.size() / 3 + 2);
    if (options.add_special && vocab_->add_bos) ids.push_back(vocab_->bos_id);

    std::vector<SpecialTokenMatcher::Piece> segments, parts;
    std::vector<std::string> words;
    pipeline_.raw_specials.split(text, options.parse_special, segments);
    for (const auto& segment : segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
        continue;
      }
      const bool at_start = segment.begin == 0;
      const std::string_view raw = text.substr(segment.begin, segment.end - segment.begin);
      std::string normalized;
      if (!pipeline_.normalizer.empty()) {
        HEARTH_ASSIGN_OR_RETURN(normalized, pipeline_.normalizer.apply(raw));
      } else {
        normalized.assign(raw);
      }
      parts.clear();
      pipeline_.normalized_specials.split(normalized, options.parse_special, parts);
      for (const auto& part : parts) {
        if (part.id >= 0) {
          ids.push_back(part.id);
          continue;
        }
        const std::string_view piece = std::string_view(normalized).substr(part.begin, part.end - part.begin);
        if (pipeline_.pre_tokenizer.empty()) {
          encode_word(piece, ids);
          continue;
        }
        HEARTH_RETURN_IF_ERROR(pipeline_.pre_tokenizer.apply(piece, at_start && part.begin == 0, words));
        for (const std::string& word : words) encode_word(word, ids);
      }
    }
    if (options.add_special && vocab_->add_eos) ids.push_back(vocab_->eos_id);
    return ids;
  }

 private:
  void encode_word(std::string_view word, std::vector<TokenId>& ids) const {
    std::visit([&](const auto& model) { model.encode(word, ids); }, pipeline_.model);
  }

  Pipeline pipeline_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_pipeline_tokenizer(std::shared_ptr<const TokenizerVocab> vocab, Pipeline pipeline) {
  return std::make_unique<PipelineTokenizer>(std::move(vocab), std::move(pipeline));
}

}  // namespace hearth
