#include "tokenizer/tokenizer_config.h"

#include "common/json.h"

namespace hearth {
namespace {

Result<ConfigToken> token_field(const boost::json::object& obj, std::string_view key) {
  ConfigToken token;
  const auto it = obj.find(boost::json::string_view(key.data(), key.size()));
  if (it == obj.end()) return token;
  token.present = true;
  const boost::json::value& v = it->value();
  if (v.is_null()) return token;
  if (v.is_string()) {
    token.content = std::string(v.as_string());
    return token;
  }
  if (v.is_object()) {  // {"__type": "AddedToken", "content": "<s>", ...}
    const auto content = v.as_object().find("content");
    if (content != v.as_object().end() && content->value().is_string()) {
      token.content = std::string(content->value().as_string());
      return token;
    }
  }
  return make_error(ErrorCode::kFormat,
                    "tokenizer_config.json: \"{}\" should be a string or an object with "
                    "\"content\"",
                    key);
}

Result<std::string> chat_template_field(const boost::json::object& obj) {
  const auto it = obj.find("chat_template");
  if (it == obj.end() || it->value().is_null()) return std::string();
  const boost::json::value& v = it->value();
  if (v.is_string()) return std::string(v.as_string());
  if (v.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    std::string first;
    bool have_first = false;
    for (const boost::json::value& entry : v.as_array()) {
      if (!entry.is_object()) {
        return make_error(ErrorCode::kFormat, "tokenizer_config.json: chat_template entries should be objects");
      }
      HEARTH_ASSIGN_OR_RETURN(auto name, json_opt_string(entry.as_object(), "name"));
      HEARTH_ASSIGN_OR_RETURN(auto text, json_opt_string(entry.as_object(), "template"));
      if (!text) return make_error(ErrorCode::kFormat, "tokenizer_config.json: a chat_template entry has no template");
      if (name && *name == "default") return std::move(*text);
      if (!have_first) {
        first = std::move(*text);
        have_first = true;
      }
    }
    return first;
  }
  return make_error(ErrorCode::kFormat, "tokenizer_config.json: chat_template should be a string or a list");
}

}  // namespace

Result<TokenizerConfig> parse_tokenizer_config(std::string_view json) {
  TokenizerConfig config;
  if (json.empty()) return config;
  HEARTH_ASSIGN_OR_RETURN(boost::json::value root, json_parse(json, "tokenizer_config.json"));
  if (!root.is_object()) return make_error(ErrorCode::kFormat, "tokenizer_config.json is not a JSON object");
  const boost::json::object& obj = root.as_object();
  const auto with_context = [](Status s) { return s.with_context("tokenizer_config.json"); };
  auto add_bos = json_opt_bool(obj, "add_bos_token");
  if (!add_bos.is_ok()) return with_context(add_bos.status());
  config.add_bos_token = *add_bos;
  auto add_eos = json_opt_bool(obj, "add_eos_token");
  if (!add_eos.is_ok()) return with_context(add_eos.status());
  config.add_eos_token = *add_eos;
  HEARTH_ASSIGN_OR_RETURN(config.bos_token, token_field(obj, "bos_token"));
  HEARTH_ASSIGN_OR_RETURN(config.eos_token, token_field(obj, "eos_token"));
  HEARTH_ASSIGN_OR_RETURN(config.chat_template, chat_template_field(obj));
  return config;
}

}  // namespace hearth
