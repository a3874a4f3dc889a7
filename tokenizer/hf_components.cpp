#include "tokenizer/hf_components.h"

#include <string>

#include "common/json.h"

namespace hearth {
namespace {

Result<std::string> string_field(const boost::json::object& obj, std::string_view key, std::string_view what) {
  auto v = json_opt_string(obj, key);
  if (!v.is_ok()) return v.status().with_context(what);
  if (!v->has_value()) return make_error(ErrorCode::kFormat, "{}: field \"{}\" is missing", what, key);
  return std::move(**v);
}

Result<bool> bool_field(const boost::json::object& obj, std::string_view key, bool fallback, std::string_view what) {
  auto v = json_opt_bool(obj, key);
  if (!v.is_ok()) return v.status().with_context(what);
  return v->value_or(fallback);
}

Result<const boost::json::array*> array_field(const boost::json::object& obj, std::string_view key,
                                              std::string_view what) {
  const auto it = obj.find(boost::json::string_view(key.data(), key.size()));
  if (it == obj.end() || !it->value().is_array()) {
    return make_error(ErrorCode::kFormat, "{}: field \"{}\" should be a list", what, key);
  }
  return &it->value().as_array();
}

// {"String": " "} or {"Regex": "\\s+"}.
Result<Regex> pattern_field(const boost::json::object& obj, std::string_view what) {
  const boost::json::object* pattern = json_find_object(obj, "pattern");
  if (pattern == nullptr) return make_error(ErrorCode::kFormat, "{}: \"pattern\" should be an object", what);
  HEARTH_ASSIGN_OR_RETURN(auto literal, json_opt_string(*pattern, "String"));
  if (literal) return Regex::compile(*literal, /*literal=*/true);
  HEARTH_ASSIGN_OR_RETURN(auto regex, json_opt_string(*pattern, "Regex"));
  if (regex) return Regex::compile(*regex);
  return make_error(ErrorCode::kFormat, "{}: \"pattern\" should hold \"String\" or \"Regex\"", what);
}

Result<SplitBehavior> behavior_field(const boost::json::object& obj, std::string_view what, SplitBehavior fallback) {
  const auto it = obj.find("behavior");
  if (it == obj.end() || it->value().is_null()) return fallback;
  if (!it->value().is_string()) return make_error(ErrorCode::kFormat, "{}: \"behavior\" should be a string", what);
  const std::string_view name = it->value().as_string();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return make_error(ErrorCode::kUnsupported, "{}: split behavior \"{}\" is not supported", what, name);
}

// Metaspace's prepend rule: "prepend_scheme", or the older "add_prefix_space" flag.
Result<PrependScheme> prepend_scheme_field(const boost::json::object& obj, std::string_view what) {
  const auto it = obj.find("prepend_scheme");
  if (it != obj.end() && !it->value().is_null()) {
    if (!it->value().is_string())
      return make_error(ErrorCode::kFormat, "{}: \"prepend_scheme\" should be a string", what);
    const std::string_view scheme = it->value().as_string();
    if (scheme == "always") return PrependScheme::kAlways;
    if (scheme == "first") return PrependScheme::kFirst;
    if (scheme == "never") return PrependScheme::kNever;
    return make_error(ErrorCode::kUnsupported, "{}: prepend_scheme \"{}\" is not supported", what, scheme);
  }
  HEARTH_ASSIGN_OR_RETURN(bool add, bool_field(obj, "add_prefix_space", true, what));
  return add ? PrependScheme::kAlways : PrependScheme::kNever;
}

Result<std::string> metaspace_replacement(const boost::json::object& obj, std::string_view what) {
  HEARTH_ASSIGN_OR_RETURN(auto replacement, json_opt_string(obj, "replacement"));
  if (!replacement) return std::string("\xe2\x96\x81");
  if (replacement->empty()) return make_error(ErrorCode::kFormat, "{}: empty replacement", what);
  return std::move(*replacement);
}

}  // namespace

Result<std::string> hf_component_type(const boost::json::value& json, std::string_view what) {
  if (!json.is_object()) return make_error(ErrorCode::kFormat, "{} should be an object", what);
  HEARTH_ASSIGN_OR_RETURN(std::string type, string_field(json.as_object(), "type", what));
  return type;
}

Status hf_parse_normalizer(const boost::json::value& json, Normalizer& out) {
  if (json.is_null()) return Status::ok();
  constexpr std::string_view kWhat = "tokenizer.json normalizer";
  HEARTH_ASSIGN_OR_RETURN(const std::string type, hf_component_type(json, kWhat));
  const boost::json::object& obj = json.as_object();
  if (type == "Sequence") {
    HEARTH_ASSIGN_OR_RETURN(const boost::json::array* list, array_field(obj, "normalizers", kWhat));
    for (const auto& item : *list) HEARTH_RETURN_IF_ERROR(hf_parse_normalizer(item, out));
  } else if (type == "NFC") {
    out.add_unicode_form(Normalizer::Form::kNfc);
  } else if (type == "NFKC") {
    out.add_unicode_form(Normalizer::Form::kNfkc);
  } else if (type == "NFD") {
    out.add_unicode_form(Normalizer::Form::kNfd);
  } else if (type == "NFKD") {
    out.add_unicode_form(Normalizer::Form::kNfkd);
  } else if (type == "Lowercase") {
    out.add_lowercase();
  } else if (type == "Prepend") {
    HEARTH_ASSIGN_OR_RETURN(std::string prepend, string_field(obj, "prepend", kWhat));
    out.add_prepend(std::move(prepend));
  } else if (type == "Replace") {
    HEARTH_ASSIGN_OR_RETURN(Regex pattern, pattern_field(obj, kWhat));
    HEARTH_ASSIGN_OR_RETURN(std::string content, string_field(obj, "content", kWhat));
    out.add_replace(std::move(pattern), std::move(content));
  } else if (type == "Strip") {
    HEARTH_ASSIGN_OR_RETURN(bool left, bool_field(obj, "strip_left", true, kWhat));
    HEARTH_ASSIGN_OR_RETURN(bool right, bool_field(obj, "strip_right", true, kWhat));
    out.add_strip(left, right);
  } else {
    return make_error(ErrorCode::kUnsupported, "tokenizer.json normalizer type \"{}\" is not supported", type);
  }
  return Status::ok();
}

Status hf_parse_pre_tokenizer(const boost::json::value& json, PreTokenizer& out) {
  if (json.is_null()) return Status::ok();
  constexpr std::string_view kWhat = "tokenizer.json pre_tokenizer";
  HEARTH_ASSIGN_OR_RETURN(const std::string type, hf_component_type(json, kWhat));
  const boost::json::object& obj = json.as_object();
  if (type == "Sequence") {
    HEARTH_ASSIGN_OR_RETURN(const boost::json::array* list, array_field(obj, "pretokenizers", kWhat));
    for (const auto& item : *list) HEARTH_RETURN_IF_ERROR(hf_parse_pre_tokenizer(item, out));
  } else if (type == "ByteLevel") {
    HEARTH_ASSIGN_OR_RETURN(bool add_prefix_space, bool_field(obj, "add_prefix_space", true, kWhat));
    HEARTH_ASSIGN_OR_RETURN(bool use_regex, bool_field(obj, "use_regex", true, kWhat));
    HEARTH_RETURN_IF_ERROR(out.add_byte_level(add_prefix_space, use_regex));
  } else if (type == "Split") {
    HEARTH_ASSIGN_OR_RETURN(Regex pattern, pattern_field(obj, kWhat));
    HEARTH_ASSIGN_OR_RETURN(SplitBehavior behavior, behavior_field(obj, kWhat, SplitBehavior::kIsolated));
    HEARTH_ASSIGN_OR_RETURN(bool invert, bool_field(obj, "invert", false, kWhat));
    out.add_split(std::move(pattern), behavior, invert);
  } else if (type == "Digits") {
    HEARTH_ASSIGN_OR_RETURN(bool individual, bool_field(obj, "individual_digits", false, kWhat));
    HEARTH_ASSIGN_OR_RETURN(Regex digits, Regex::compile(individual ? R"(\p{N})" : R"(\p{N}+)"));
    out.add_split(std::move(digits), SplitBehavior::kIsolated, false);
  } else if (type == "Metaspace") {
    HEARTH_ASSIGN_OR_RETURN(std::string replacement, metaspace_replacement(obj, kWhat));
    HEARTH_ASSIGN_OR_RETURN(PrependScheme scheme, prepend_scheme_field(obj, kWhat));
    HEARTH_ASSIGN_OR_RETURN(bool split, bool_field(obj, "split", true, kWhat));
    out.add_metaspace(std::move(replacement), scheme, split);
  } else if (type == "Whitespace") {
    // Keeps runs of word characters and runs of other non-space characters.
    HEARTH_ASSIGN_OR_RETURN(Regex words, Regex::compile(R"(\w+|[^\w\s]+)"));
    out.add_split(std::move(words), SplitBehavior::kRemoved, /*invert=*/true);
  } else if (type == "WhitespaceSplit") {
    HEARTH_ASSIGN_OR_RETURN(Regex spaces, Regex::compile(R"(\s+)"));
    out.add_split(std::move(spaces), SplitBehavior::kRemoved, false);
  } else if (type == "Punctuation") {
    HEARTH_ASSIGN_OR_RETURN(SplitBehavior behavior, behavior_field(obj, kWhat, SplitBehavior::kIsolated));
    HEARTH_ASSIGN_OR_RETURN(Regex punct,
                            Regex::compile(R"([\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}])"));
    out.add_split(std::move(punct), behavior, false);
  } else if (type == "CharDelimiterSplit") {
    HEARTH_ASSIGN_OR_RETURN(std::string delimiter, string_field(obj, "delimiter", kWhat));
    HEARTH_ASSIGN_OR_RETURN(Regex pattern, Regex::compile(delimiter, /*literal=*/true));
    out.add_split(std::move(pattern), SplitBehavior::kRemoved, false);
  } else {
    return make_error(ErrorCode::kUnsupported, "tokenizer.json pre_tokenizer type \"{}\" is not supported", type);
  }
  return Status::ok();
}

Status hf_parse_decoder(const boost::json::value& json, Decoder& out) {
  if (json.is_null()) return Status::ok();
  constexpr std::string_view kWhat = "tokenizer.json decoder";
  HEARTH_ASSIGN_OR_RETURN(const std::string type, hf_component_type(json, kWhat));
  const boost::json::object& obj = json.as_object();
  if (type == "Sequence") {
    HEARTH_ASSIGN_OR_RETURN(const boost::json::array* list, array_field(obj, "decoders", kWhat));
    for (const auto& item : *list) HEARTH_RETURN_IF_ERROR(hf_parse_decoder(item, out));
  } else if (type == "ByteLevel") {
    out.add_byte_level();
  } else if (type == "Replace") {
    const boost::json::object* pattern = json_find_object(obj, "pattern");
    if (pattern == nullptr) return make_error(ErrorCode::kFormat, "{}: \"pattern\" should be an object", kWhat);
    HEARTH_ASSIGN_OR_RETURN(auto literal, json_opt_string(*pattern, "String"));
    if (!literal)
      return make_error(ErrorCode::kUnsupported, "{}: Replace with a regex pattern is not supported", kWhat);
    HEARTH_ASSIGN_OR_RETURN(std::string content, string_field(obj, "content", kWhat));
    HEARTH_RETURN_IF_ERROR(out.add_replace(std::move(*literal), std::move(content)));
  } else if (type == "ByteFallback") {
    out.add_byte_fallback();
  } else if (type == "Fuse") {
    out.add_fuse();
  } else if (type == "Strip") {
    HEARTH_ASSIGN_OR_RETURN(std::string content, string_field(obj, "content", kWhat));
    HEARTH_ASSIGN_OR_RETURN(auto start, json_opt_int(obj, "start"));
    HEARTH_ASSIGN_OR_RETURN(auto stop, json_opt_int(obj, "stop"));
    HEARTH_RETURN_IF_ERROR(out.add_strip(std::move(content), start.value_or(0), stop.value_or(0)));
  } else if (type == "Metaspace") {
    HEARTH_ASSIGN_OR_RETURN(std::string replacement, metaspace_replacement(obj, kWhat));
    HEARTH_ASSIGN_OR_RETURN(PrependScheme scheme, prepend_scheme_field(obj, kWhat));
    out.add_metaspace(std::move(replacement), scheme != PrependScheme::kNever);
  } else {
    return make_error(ErrorCode::kUnsupported, "tokenizer.json decoder type \"{}\" is not supported", type);
  }
  return Status::ok();
}

}  // namespace hearth
