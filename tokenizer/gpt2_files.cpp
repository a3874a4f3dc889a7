// GPT-2's own files: encoder.json (= vocab.json) and vocab.bpe (= merges.txt).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/loaders.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/vocab.h"

namespace hearth {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

Result<std::vector<std::pair<std::string, std::string>>> parse_merges_text(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> merges;
  size_t pos = 0;
  size_t line_number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.substr(0, 8) == "#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return make_error(ErrorCode::kFormat, "vocab.bpe line {} is not two pieces split by a space", line_number);
    }
    if (static_cast<int64_t>(merges.size()) >= kMaxMerges)
      return make_error(ErrorCode::kFormat, "vocab.bpe has too many merges");
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  return merges;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_gpt2_files(const TokenizerSource& source) {
  HEARTH_ASSIGN_OR_RETURN(boost::json::value root, json_parse(source.data, "encoder.json"));
  if (!root.is_object()) return make_error(ErrorCode::kFormat, "encoder.json is not a JSON object");
  const boost::json::object& obj = root.as_object();
  if (obj.empty() || static_cast<int64_t>(obj.size()) > kMaxVocabSize) {
    return make_error(ErrorCode::kFormat, "encoder.json has {} entries", obj.size());
  }
  PieceMap model_ids;
  model_ids.reserve(obj.size());
  TokenId max_id = -1;
  for (const auto& entry : obj) {
    const boost::json::value& v = entry.value();
    const bool in_range = (v.is_int64() && v.as_int64() >= 0 && v.as_int64() < kMaxVocabSize) ||
                          (v.is_uint64() && v.as_uint64() < static_cast<uint64_t>(kMaxVocabSize));
    if (!in_range || entry.key().size() == 0 || entry.key().size() > kMaxPieceBytes) {
      return make_error(ErrorCode::kFormat, "encoder.json entry \"{}\" needs a short piece and an id in [0, {})",
                        std::string_view(entry.key()).substr(0, 64), kMaxVocabSize);
    }
    const auto id = static_cast<TokenId>(v.is_int64() ? v.as_int64() : static_cast<int64_t>(v.as_uint64()));
    model_ids.emplace(std::string(entry.key()), id);
    max_id = std::max(max_id, id);
  }
  if (max_id >= 2 * static_cast<int64_t>(obj.size()) + 1024) {
    return make_error(ErrorCode::kFormat, "encoder.json: id {} is far past the {} tokens listed", max_id, obj.size());
  }
  auto vocab = std::make_shared<TokenizerVocab>();
  vocab_resize(*vocab, max_id + 1);
  for (const auto& [piece, id] : model_ids) {
    const auto i = static_cast<size_t>(id);
    if (!vocab->pieces[i].empty()) return make_error(ErrorCode::kFormat, "encoder.json: id {} is used twice", id);
    vocab->pieces[i] = piece;
    vocab->types[i] = TokenType::kNormal;
  }
  vocab_index(*vocab);

  Pipeline pipeline;
  if (const auto eot = vocab->find(kEndOfText)) {
    vocab->types[static_cast<size_t>(*eot)] = TokenType::kControl;
    HEARTH_RETURN_IF_ERROR(pipeline.raw_specials.add({*eot, std::string(kEndOfText), /*special=*/true}));
    vocab->bos_id = *eot;
    vocab->eos_id = *eot;
  }
  HEARTH_RETURN_IF_ERROR(pipeline.pre_tokenizer.add_byte_level(/*add_prefix_space=*/false, /*use_regex=*/true));
  HEARTH_ASSIGN_OR_RETURN(auto merges, parse_merges_text(source.merges));
  HEARTH_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::build(std::move(model_ids), merges, BpeOptions{}));
  pipeline.model = std::move(bpe);

  for (size_t i = 0; i < vocab->pieces.size(); ++i) {
    if (vocab->types[i] != TokenType::kNormal) continue;
    if (!byte_level_decode(vocab->pieces[i], vocab->bytes[i])) vocab->bytes[i] = vocab->pieces[i];
  }
  vocab->add_bos = false;
  vocab->add_eos = false;
  HEARTH_RETURN_IF_ERROR(vocab_finalize(*vocab, source));
  return make_pipeline_tokenizer(std::move(vocab), std::move(pipeline));
}

}  // namespace hearth
