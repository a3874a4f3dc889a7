#include "chat/tool_calls.h"

#include <boost/json.hpp>

namespace hearth {
namespace {

namespace json = boost::json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

bool call_from(const json::value& v, ToolCall& out) {
  if (!v.is_object()) return false;
  const json::object& o = v.as_object();
  const auto* name = o.if_contains("name");
  if (name == nullptr || !name->is_string() || name->as_string().empty()) return false;
  const json::value* args = o.if_contains("arguments");
  if (args == nullptr) args = o.if_contains("parameters");
  out.name = std::string(name->as_string());
  if (args == nullptr || args->is_null()) {
    out.arguments = "{}";
  } else if (args->is_object()) {
    out.arguments = json::serialize(*args);
  } else if (args->is_string()) {  // arguments already serialized
    boost::system::error_code ec;
    const json::value inner = json::parse(args->as_string(), ec);
    if (ec || !inner.is_object()) return false;
    out.arguments = json::serialize(inner);
  } else {
    return false;
  }
  return true;
}

// Every JSON value in `s`, separated by whitespace or `sep` (0: none allowed).
bool parse_values(std::string_view s, char sep, std::vector<json::value>& out) {
  s = trim(s);
  while (!s.empty()) {
    json::stream_parser p;
    boost::system::error_code ec;
    const size_t used = p.write_some(s.data(), s.size(), ec);
    if (ec) return false;
    if (!p.done()) p.finish(ec);  // a number at the very end is complete only at the end
    if (ec || !p.done()) return false;
    out.push_back(p.release());
    s = trim(s.substr(used));
    if (!s.empty() && sep != 0 && s.front() == sep) s = trim(s.substr(1));
  }
  return !out.empty();
}

}  // namespace

std::string_view tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kNone:
      break;
  }
  return "none";
}

Result<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    if (name == tool_call_format_name(f)) return f;
  }
  if (name == "qwen" || name == "chatml") return ToolCallFormat::kHermes;
  if (name == "llama3" || name == "llama") return ToolCallFormat::kLlama3Json;
  return make_error(ErrorCode::kInvalidArgument, "--tool-call-parser must be hermes, llama3_json or mistral, not \"{}\"",
                    name);
}

ToolCallFormat tool_call_format_detect(std::string_view t) {
  if (t.find("tools") == std::string_view::npos) return ToolCallFormat::kNone;
  if (t.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (t.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (t.find(kPythonTag) != std::string_view::npos ||
      (t.find("<|start_header_id|>") != std::string_view::npos && t.find("\"parameters\"") != std::string_view::npos)) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

bool tool_call_parse_object(std::string_view text, ToolCall& out) {
  boost::system::error_code ec;
  const json::value v = json::parse(trim(text), ec);
  return !ec && call_from(v, out);
}

std::string ToolCallParser::push(std::string_view text, std::vector<ToolCall>& calls) {
  held_ += text;
  if (format_ == ToolCallFormat::kNone) {
    std::string out = std::move(held_);
    held_.clear();
    return out;
  }
  if (format_ == ToolCallFormat::kHermes) return push_hermes(calls);
  // Llama 3 and Mistral: the answer is calls only when it opens with one; decide on the
  // first characters that tell, then hold it all (calls) or pass it on (content).
  if (!decided_) {
    std::string_view s = held_;
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    if (s.empty()) return "";
    std::string_view marker = format_ == ToolCallFormat::kLlama3Json ? kPythonTag : kMistralMarker;
    if (s.size() < marker.size() && marker.starts_with(s)) return "";  // maybe the marker
    if (s.starts_with(marker)) s = trim(s.substr(marker.size()));
    if (s.empty()) return "";
    if (format_ == ToolCallFormat::kLlama3Json) {
      calling_ = s.front() == '{';
    } else {
      if (s.front() == '[') {
        std::string_view rest = trim(s.substr(1));
        if (rest.empty()) return "";
        calling_ = rest.front() == '{';
      } else {
        calling_ = false;
      }
    }
    decided_ = true;
  }
  if (calling_) return "";
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

std::string ToolCallParser::push_hermes(std::vector<ToolCall>& calls) {
  std::string content;
  while (true) {
    if (!calling_) {
      if (after_call_) {
        // Whitespace between calls belongs to neither; before other text it is content.
        size_t ws = 0;
        while (ws < held_.size() && is_space(held_[ws])) ++ws;
        if (ws == held_.size()) return content;
        const std::string_view rest = std::string_view(held_).substr(ws);
        if (rest.starts_with(kHermesOpen) || kHermesOpen.starts_with(rest)) held_.erase(0, ws);
        after_call_ = false;
      }
      const size_t open = held_.find(kHermesOpen);
      if (open == std::string::npos) {
        const size_t keep = partial_suffix(held_, kHermesOpen);
        content += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return content;
      }
      content += held_.substr(0, open);
      held_.erase(0, open);
      calling_ = true;
    }
    const size_t close = held_.find(kHermesClose);
    if (close == std::string::npos) return content;
    ToolCall call;
    const std::string_view inner = std::string_view(held_).substr(kHermesOpen.size(), close - kHermesOpen.size());
    if (tool_call_parse_object(inner, call)) {
      calls.push_back(std::move(call));
      after_call_ = true;
    } else {
      content += held_.substr(0, close + kHermesClose.size());  // not a call after all
    }
    held_.erase(0, close + kHermesClose.size());
    calling_ = false;
  }
}

std::string ToolCallParser::finish_held(std::vector<ToolCall>& calls) {
  std::string held = std::move(held_);
  held_.clear();
  if (format_ == ToolCallFormat::kHermes) {
    if (!calling_) return after_call_ && trim(held).empty() ? "" : held;
    ToolCall call;  // a call the output ended inside, its closing tag never written
    if (tool_call_parse_object(std::string_view(held).substr(kHermesOpen.size()), call)) {
      calls.push_back(std::move(call));
      return "";
    }
    return held;
  }
  if (!calling_) return held;
  std::string_view s = trim(held);
  const std::string_view marker = format_ == ToolCallFormat::kLlama3Json ? kPythonTag : kMistralMarker;
  if (s.starts_with(marker)) s = trim(s.substr(marker.size()));
  std::vector<json::value> values;
  if (!parse_values(s, format_ == ToolCallFormat::kLlama3Json ? ';' : 0, values)) return held;
  std::vector<ToolCall> found;
  for (const json::value& v : values) {
    if (format_ == ToolCallFormat::kMistral) {
      if (!v.is_array() || values.size() != 1) return held;
      for (const json::value& item : v.as_array()) {
        ToolCall c;
        if (!call_from(item, c)) return held;
        found.push_back(std::move(c));
      }
    } else {
      ToolCall c;
      if (!call_from(v, c)) return held;
      found.push_back(std::move(c));
    }
  }
  if (found.empty()) return held;
  for (ToolCall& c : found) calls.push_back(std::move(c));
  return "";
}

std::string ToolCallParser::finish(std::vector<ToolCall>& calls) { return finish_held(calls); }

}  // namespace hearth
