// Hugging Face tokenizer.json (BPE models) with tokenizer_config.json.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/log.h"
#include "tokenizer/decoder.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/loaders.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/vocab.h"

namespace hearth {
namespace {

constexpr size_t kMaxJsonBytes = size_t{256} << 20;

// The value at `key`, or null when absent.
const boost::json::value& field(const boost::json::object& obj, std::string_view key) {
  static const boost::json::value kNull;
  const auto it = obj.find(boost::json::string_view(key.data(), key.size()));
  return it == obj.end() ? kNull : it->value();
}

Status bad(std::string_view message) { return Status(ErrorCode::kFormat, "tokenizer.json: " + std::string(message)); }

Result<TokenId> id_value(const boost::json::value& v, std::string_view what) {
  if (v.is_int64() && v.as_int64() >= 0 && v.as_int64() < kMaxVocabSize) return static_cast<TokenId>(v.as_int64());
  if (v.is_uint64() && v.as_uint64() < static_cast<uint64_t>(kMaxVocabSize)) return static_cast<TokenId>(v.as_uint64());
  return make_error(ErrorCode::kFormat, "tokenizer.json: {} should be an id in [0, {})", what, kMaxVocabSize);
}

Result<bool> flag(const boost::json::object& obj, std::string_view key, bool fallback) {
  auto v = json_opt_bool(obj, key);
  if (!v.is_ok()) return v.status().with_context("tokenizer.json");
  return v->value_or(fallback);
}

Result<std::optional<std::string>> opt_string(const boost::json::object& obj, std::string_view key) {
  auto v = json_opt_string(obj, key);
  if (!v.is_ok()) return v.status().with_context("tokenizer.json");
  return std::move(*v);
}

struct HfAddedToken {
  AddedToken token;
  bool normalized = false;
};

// The special tokens a TemplateProcessing (or Bert/Roberta processing) puts around the
// text: at most one before and one after.
struct PostProcessorTokens {
  std::optional<TokenId> before;
  std::optional<TokenId> after;
};

Status parse_post_processor(const boost::json::value& json, PostProcessorTokens& out) {
  if (json.is_null()) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(const std::string type, hf_component_type(json, "tokenizer.json post_processor"));
  const boost::json::object& obj = json.as_object();
  if (type == "ByteLevel") return Status::ok();  // only adjusts offsets
  if (type == "Sequence") {
    const boost::json::array* list = json_find_array(obj, "processors");
    if (list == nullptr) return bad("post_processor Sequence without \"processors\"");
    for (const auto& item : *list) HEARTH_RETURN_IF_ERROR(parse_post_processor(item, out));
    return Status::ok();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    // "cls": ["<s>", 0], "sep": ["</s>", 2]
    for (const auto* key : {"cls", "sep"}) {
      const boost::json::array* pair = json_find_array(obj, key);
      if (pair == nullptr || pair->size() != 2) return bad("post_processor cls/sep should be [token, id]");
      HEARTH_ASSIGN_OR_RETURN(TokenId id, id_value((*pair)[1], "post_processor id"));
      (std::string_view(key) == "cls" ? out.before : out.after) = id;
    }
    return Status::ok();
  }
  if (type != "TemplateProcessing") {
    return make_error(ErrorCode::kUnsupported, "tokenizer.json post_processor type \"{}\" is not supported", type);
  }
  const boost::json::array* single = json_find_array(obj, "single");
  const boost::json::object* specials = json_find_object(obj, "special_tokens");
  if (single == nullptr || specials == nullptr)
    return bad("TemplateProcessing needs \"single\" and \"special_tokens\"");
  bool seen_sequence = false;
  std::vector<TokenId> before, after;
  for (const auto& item : *single) {
    if (!item.is_object()) return bad("TemplateProcessing items should be objects");
    const boost::json::object& piece = item.as_object();
    if (json_find_object(piece, "Sequence") != nullptr) {
      seen_sequence = true;
      continue;
    }
    const boost::json::object* special = json_find_object(piece, "SpecialToken");
    if (special == nullptr) return bad("TemplateProcessing items should be Sequence or SpecialToken");
    HEARTH_ASSIGN_OR_RETURN(auto name, opt_string(*special, "id"));
    if (!name) return bad("TemplateProcessing SpecialToken without \"id\"");
    const boost::json::object* entry = json_find_object(*specials, *name);
    const boost::json::array* ids = entry ? json_find_array(*entry, "ids") : nullptr;
    if (ids == nullptr || ids->size() != 1) {
      return make_error(ErrorCode::kUnsupported,
                        "tokenizer.json: TemplateProcessing token \"{}\" should map to exactly one id", *name);
    }
    HEARTH_ASSIGN_OR_RETURN(TokenId id, id_value((*ids)[0], "TemplateProcessing id"));
    (seen_sequence ? after : before).push_back(id);
  }
  if (before.size() > 1 || after.size() > 1) {
    return make_error(ErrorCode::kUnsupported,
                      "tokenizer.json: TemplateProcessing adds {} tokens before and {} after "
                      "the text; hearth supports at most one each",
                      before.size(), after.size());
  }
  if (!before.empty()) out.before = before[0];
  if (!after.empty()) out.after = after[0];
  return Status::ok();
}

Result<std::vector<std::pair<std::string, std::string>>> parse_merges(const boost::json::array& list) {
  if (static_cast<int64_t>(list.size()) > kMaxMerges) return bad("too many merges");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const boost::json::value& m = list[i];
    if (m.is_string()) {  // "a b"
      const std::string_view s = m.as_string();
      const size_t space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos) {
        return make_error(ErrorCode::kFormat, "tokenizer.json: merge {} (\"{}\") is not two pieces split by a space", i,
                          s);
      }
      merges.emplace_back(std::string(s.substr(0, space)), std::string(s.substr(space + 1)));
    } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() && m.as_array()[1].is_string()) {
      merges.emplace_back(std::string(m.as_array()[0].as_string()), std::string(m.as_array()[1].as_string()));
    } else {
      return make_error(ErrorCode::kFormat, "tokenizer.json: merge {} should be \"a b\" or [\"a\", \"b\"]", i);
    }
  }
  return merges;
}

Result<std::vector<HfAddedToken>> parse_added_tokens(const boost::json::object& root) {
  std::vector<HfAddedToken> out;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->value().is_null()) return out;
  if (!it->value().is_array()) return bad("\"added_tokens\" should be a list");
  const boost::json::array& list = it->value().as_array();
  if (static_cast<int64_t>(list.size()) > kMaxVocabSize) return bad("too many added tokens");
  for (const auto& item : list) {
    if (!item.is_object()) return bad("added tokens should be objects");
    const boost::json::object& obj = item.as_object();
    HfAddedToken added;
    const auto id = obj.find("id");
    if (id == obj.end()) return bad("an added token has no \"id\"");
    HEARTH_ASSIGN_OR_RETURN(added.token.id, id_value(id->value(), "added token id"));
    HEARTH_ASSIGN_OR_RETURN(auto content, opt_string(obj, "content"));
    if (!content || content->empty() || content->size() > kMaxPieceBytes) {
      return make_error(ErrorCode::kFormat, "tokenizer.json: added token {} needs a \"content\" of 1 to {} bytes",
                        added.token.id, kMaxPieceBytes);
    }
    added.token.content = std::move(*content);
    HEARTH_ASSIGN_OR_RETURN(added.token.special, flag(obj, "special", false));
    HEARTH_ASSIGN_OR_RETURN(added.token.lstrip, flag(obj, "lstrip", false));
    HEARTH_ASSIGN_OR_RETURN(added.token.rstrip, flag(obj, "rstrip", false));
    HEARTH_ASSIGN_OR_RETURN(added.token.single_word, flag(obj, "single_word", false));
    HEARTH_ASSIGN_OR_RETURN(added.normalized, flag(obj, "normalized", !added.token.special));
    out.push_back(std::move(added));
  }
  return out;
}

// Looks a config token up: the added tokens first, then the vocabulary.
TokenId resolve_token(const TokenizerVocab& vocab, const ConfigToken& token, TokenId fallback, std::string_view what) {
  if (!token.present) return fallback;
  if (!token.content) return -1;
  if (const auto id = vocab.find(*token.content)) return *id;
  HEARTH_LOG_WARN("tokenizer_config.json names {} token \"{}\", which the vocabulary lacks", what, *token.content);
  return -1;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_hf_json(const TokenizerSource& source) {
  if (source.data.size() > kMaxJsonBytes) return bad("file too large");
  HEARTH_ASSIGN_OR_RETURN(TokenizerConfig config, parse_tokenizer_config(source.config_json));
  HEARTH_ASSIGN_OR_RETURN(boost::json::value root_value, json_parse(source.data, "tokenizer.json"));
  if (!root_value.is_object()) return bad("not a JSON object");
  const boost::json::object& root = root_value.as_object();

  const boost::json::object* model = json_find_object(root, "model");
  if (model == nullptr) return bad("\"model\" should be an object");
  HEARTH_ASSIGN_OR_RETURN(auto model_type, opt_string(*model, "type"));
  if (!model_type && model->contains("merges")) model_type = "BPE";  // older files leave it out
  if (!model_type || *model_type != "BPE") {
    return make_error(ErrorCode::kUnsupported, "tokenizer.json model type \"{}\" is not supported (only BPE is)",
                      model_type.value_or("(none)"));
  }
  const boost::json::object* model_vocab = json_find_object(*model, "vocab");
  const boost::json::array* merges_json = json_find_array(*model, "merges");
  if (model_vocab == nullptr) return bad("model \"vocab\" should be an object");
  if (merges_json == nullptr) return bad("model \"merges\" should be a list");
  if (static_cast<int64_t>(model_vocab->size()) > kMaxVocabSize) return bad("the vocabulary is too large");

  BpeOptions options;
  HEARTH_ASSIGN_OR_RETURN(options.byte_fallback, flag(*model, "byte_fallback", false));
  HEARTH_ASSIGN_OR_RETURN(options.ignore_merges, flag(*model, "ignore_merges", false));
  HEARTH_ASSIGN_OR_RETURN(options.fuse_unk, flag(*model, "fuse_unk", false));
  HEARTH_ASSIGN_OR_RETURN(auto prefix, opt_string(*model, "continuing_subword_prefix"));
  HEARTH_ASSIGN_OR_RETURN(auto suffix, opt_string(*model, "end_of_word_suffix"));
  options.continuing_subword_prefix = prefix.value_or("");
  options.end_of_word_suffix = suffix.value_or("");
  HEARTH_ASSIGN_OR_RETURN(auto unk_token, opt_string(*model, "unk_token"));

  HEARTH_ASSIGN_OR_RETURN(std::vector<HfAddedToken> added, parse_added_tokens(root));

  // Ids: the model's vocabulary plus the added tokens; a few holes are tolerated (they
  // stay kUnused), a sparse table is not.
  TokenId max_id = -1;
  PieceMap model_ids;
  model_ids.reserve(model_vocab->size());
  for (const auto& entry : *model_vocab) {
    HEARTH_ASSIGN_OR_RETURN(TokenId id, id_value(entry.value(), "a vocabulary id"));
    if (entry.key().size() == 0 || entry.key().size() > kMaxPieceBytes) {
      return make_error(ErrorCode::kFormat,
                        "tokenizer.json: vocabulary piece of id {} is empty or longer than {} bytes", id,
                        kMaxPieceBytes);
    }
    model_ids.emplace(std::string(entry.key()), id);
    max_id = std::max(max_id, id);
  }
  for (const auto& a : added) max_id = std::max(max_id, a.token.id);
  const int64_t entries = static_cast<int64_t>(model_vocab->size() + added.size());
  if (max_id < 0) return bad("the vocabulary is empty");
  if (max_id >= 2 * entries + 1024) {
    return make_error(ErrorCode::kFormat, "tokenizer.json: id {} is far past the {} tokens listed", max_id, entries);
  }
  auto vocab = std::make_shared<TokenizerVocab>();
  vocab_resize(*vocab, max_id + 1);
  std::vector<bool> assigned(static_cast<size_t>(max_id) + 1, false);
  for (const auto& [piece, id] : model_ids) {
    const auto i = static_cast<size_t>(id);
    if (assigned[i]) return make_error(ErrorCode::kFormat, "tokenizer.json: id {} is used by two pieces", id);
    assigned[i] = true;
    vocab->pieces[i] = piece;
    vocab->types[i] = (options.byte_fallback && parse_byte_piece(piece)) ? TokenType::kByte : TokenType::kNormal;
  }
  for (const auto& a : added) {
    const auto i = static_cast<size_t>(a.token.id);
    vocab->pieces[i] = a.token.content;
    vocab->types[i] = a.token.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  vocab_index(*vocab);
  if (unk_token) {
    const auto it = model_ids.find(*unk_token);
    if (it == model_ids.end()) {
      return make_error(ErrorCode::kFormat, "tokenizer.json: unk_token \"{}\" is not in the vocabulary", *unk_token);
    }
    options.unk_id = it->second;
    vocab->unk_id = it->second;
  }

  Pipeline pipeline;
  HEARTH_RETURN_IF_ERROR(hf_parse_normalizer(field(root, "normalizer"), pipeline.normalizer));
  HEARTH_RETURN_IF_ERROR(hf_parse_pre_tokenizer(field(root, "pre_tokenizer"), pipeline.pre_tokenizer));
  Decoder decoder;
  HEARTH_RETURN_IF_ERROR(hf_parse_decoder(field(root, "decoder"), decoder));
  PostProcessorTokens post;
  HEARTH_RETURN_IF_ERROR(parse_post_processor(field(root, "post_processor"), post));

  for (auto& a : added) {
    if (!a.normalized) {
      HEARTH_RETURN_IF_ERROR(pipeline.raw_specials.add(a.token));
      continue;
    }
    // Matched in normalized text, so its own text is normalized the same way.
    HEARTH_ASSIGN_OR_RETURN(a.token.content, pipeline.normalizer.apply(a.token.content));
    HEARTH_RETURN_IF_ERROR(pipeline.normalized_specials.add(a.token));
  }

  {
    HEARTH_ASSIGN_OR_RETURN(auto merges, parse_merges(*merges_json));
    HEARTH_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::build(std::move(model_ids), merges, std::move(options)));
    pipeline.model = std::move(bpe);
  }

  for (size_t i = 0; i < vocab->pieces.size(); ++i) {
    if (vocab->types[i] == TokenType::kControl || vocab->types[i] == TokenType::kUnused) continue;
    vocab->bytes[i] = decoder.token_bytes(vocab->pieces[i]);
  }
  vocab->strips_leading_space = decoder.strips_leading_space();

  for (const auto id : {post.before, post.after}) {
    if (id && *id > max_id)
      return make_error(ErrorCode::kFormat, "tokenizer.json: post_processor id {} is unknown", *id);
  }
  vocab->bos_id = resolve_token(*vocab, config.bos_token, post.before.value_or(-1), "BOS");
  vocab->eos_id = resolve_token(*vocab, config.eos_token, post.after.value_or(-1), "EOS");
  vocab->add_bos = config.add_bos_token.value_or(post.before.has_value());
  vocab->add_eos = config.add_eos_token.value_or(post.after.has_value());
  vocab->chat_template = std::move(config.chat_template);
  HEARTH_RETURN_IF_ERROR(vocab_finalize(*vocab, source));
  return make_pipeline_tokenizer(std::move(vocab), std::move(pipeline));
}

}  // namespace hearth
