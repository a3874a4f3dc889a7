#include "tools/load_workload.h"

#include <cmath>
#include <random>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace hearth::cli {

namespace json = boost::json;

namespace {

// Common English words: with Llama-style vocabularies nearly each is one token.
constexpr const char* kWords[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "you",   "that",  "it",    "he",    "was",   "for",
    "on",    "are",   "as",    "with",  "his",   "they",  "at",    "be",    "this",  "have",  "from",  "or",
    "one",   "had",   "by",    "word",  "but",   "not",   "what",  "all",   "were",  "we",    "when",  "your",
    "can",   "said",  "there", "use",   "an",    "each",  "which", "she",   "do",    "how",   "their", "if",
    "will",  "up",    "other", "about", "out",   "many",  "then",  "them",  "these", "so",    "some",  "her",
    "would", "make",  "like",  "him",   "into",  "time",  "has",   "look",  "two",   "more",  "write", "go",
    "see",   "number", "no",   "way",   "could", "people", "my",   "than",  "first", "water", "been",  "call",
    "who",   "oil",   "its",   "now",   "find",  "long",  "down",  "day",   "did",   "get",   "come",  "made",
    "may",   "part",  "over",  "new",   "sound", "take",  "only",  "little", "work", "know",  "place", "year",
    "live",  "me",    "back",  "give",  "most",  "very",  "after", "thing", "our",   "just",  "name",  "good",
    "sentence", "man", "think", "say",  "great", "where", "help",  "through", "much", "before", "line", "right",
};
constexpr size_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);
// Words to close the last gap of one token with, when a random word would overshoot.
constexpr const char* kShortWords[] = {"a", "the", "to", "and", "of", "I", "in"};

class PromptBuilder {
 public:
  PromptBuilder(const Tokenizer* tokenizer, std::string base) : tokenizer_(tokenizer), text_(std::move(base)) {}

  Result<size_t> count() const {
    if (tokenizer_ == nullptr) return words_ + base_words_;
    HEARTH_ASSIGN_OR_RETURN(auto ids, tokenizer_->encode(text_, EncodeOptions{.add_special = false, .parse_special = false}));
    return ids.size();
  }
  void set_base_words(size_t n) { base_words_ = n; }
  void push(std::string_view word) {
    ends_.push_back(text_.size());
    if (!text_.empty()) text_ += ' ';
    text_ += word;
    ++words_;
  }
  void pop() {
    text_.resize(ends_.back());
    ends_.pop_back();
    --words_;
  }
  bool empty() const { return ends_.empty(); }
  const std::string& text() const { return text_; }

  // Adds words drawn from `rng` until the text is `target` tokens.
  Status grow_to(size_t target, std::mt19937_64& rng) {
    std::uniform_int_distribution<size_t> pick(0, kWordCount - 1);
    HEARTH_ASSIGN_OR_RETURN(size_t n, count());
    for (int round = 0; n != target; ++round) {
      if (round > 64) {
        return make_error(ErrorCode::kInternal, "could not make a prompt of exactly {} tokens with this tokenizer ({})",
                          target, n);
      }
      if (n < target) {
        // Words are a token or more each: add as many as tokens are missing.
        for (size_t i = n; i < target; ++i) push(kWords[pick(rng)]);
        HEARTH_ASSIGN_OR_RETURN(n, count());
        continue;
      }
      // Too long: drop words until short, then close the gap with short words.
      while (n > target && !empty()) {
        pop();
        HEARTH_ASSIGN_OR_RETURN(n, count());
      }
      for (const char* w : kShortWords) {
        if (n >= target) break;
        push(w);
        HEARTH_ASSIGN_OR_RETURN(size_t m, count());
        if (m <= target) {
          n = m;
        } else {
          pop();
        }
      }
    }
    return Status::ok();
  }

 private:
  const Tokenizer* tokenizer_;
  std::string text_;
  std::vector<size_t> ends_;
  size_t words_ = 0;
  size_t base_words_ = 0;
};

}  // namespace

Result<std::vector<std::string>> synthetic_prompts(const WorkloadSpec& spec, const Tokenizer* tokenizer) {
  const size_t target = static_cast<size_t>(spec.input_tokens);
  const size_t shared = static_cast<size_t>(std::lround(spec.shared_prefix * spec.input_tokens));
  std::mt19937_64 rng(spec.seed);
  PromptBuilder prefix(tokenizer, "");
  if (shared > 0) HEARTH_RETURN_IF_ERROR(prefix.grow_to(shared, rng));
  std::vector<std::string> prompts;
  prompts.reserve(static_cast<size_t>(spec.num_prompts));
  for (int i = 0; i < spec.num_prompts; ++i) {
    std::mt19937_64 own(spec.seed * 1000003 + static_cast<uint64_t>(i) + 1);
    PromptBuilder p(tokenizer, prefix.text());
    p.set_base_words(shared);
    HEARTH_RETURN_IF_ERROR(p.grow_to(target, own));
    prompts.push_back(p.text());
  }
  return prompts;
}

std::string request_body(const WorkloadSpec& spec, std::string_view prompt, std::optional<int> max_tokens) {
  json::object body{{"model", spec.model},
                    {"max_tokens", max_tokens.value_or(spec.output_tokens)},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
  if (spec.chat) {
    body["messages"] = json::array{json::object{{"role", "user"}, {"content", prompt}}};
  } else {
    body["prompt"] = prompt;
  }
  if (spec.ignore_eos) body["ignore_eos"] = true;
  if (spec.temperature) body["temperature"] = *spec.temperature;
  for (const auto& [key, value] : spec.extra) body[key] = value;
  return json::serialize(body);
}

Result<std::vector<std::string>> synthetic_bodies(const WorkloadSpec& spec, const Tokenizer* tokenizer) {
  HEARTH_ASSIGN_OR_RETURN(auto prompts, synthetic_prompts(spec, tokenizer));
  std::vector<std::string> bodies;
  bodies.reserve(prompts.size());
  for (const std::string& p : prompts) bodies.push_back(request_body(spec, p));
  return bodies;
}

Result<std::vector<std::string>> bodies_from_prompts(const WorkloadSpec& spec, std::string_view text) {
  std::vector<std::string> bodies;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const char first = line[line.find_first_not_of(" \t")];
    if (first != '{' && first != '"') {
      bodies.push_back(request_body(spec, line));
      continue;
    }
    boost::system::error_code ec;
    const json::value v = json::parse(line, ec);
    if (ec) return make_error(ErrorCode::kInvalidArgument, "line {}: not JSON ({})", line_no, ec.message());
    if (v.is_string()) {
      bodies.push_back(request_body(spec, v.as_string()));
      continue;
    }
    const json::object& o = v.as_object();
    std::optional<int> max_tokens;
    if (const json::value* m = o.if_contains("max_tokens"); m != nullptr) {
      if (!m->is_int64() || m->as_int64() < 1 || m->as_int64() > (1 << 20)) {
        return make_error(ErrorCode::kInvalidArgument, "line {}: \"max_tokens\" is not a whole number from 1", line_no);
      }
      max_tokens = static_cast<int>(m->as_int64());
    }
    for (const auto& [key, value] : o) {
      if (key != "prompt" && key != "messages" && key != "max_tokens") {
        return make_error(ErrorCode::kInvalidArgument, "line {}: unknown field \"{}\" (prompt, messages, max_tokens)",
                          line_no, std::string_view(key));
      }
    }
    const json::value* prompt = o.if_contains("prompt");
    const json::value* messages = o.if_contains("messages");
    if (spec.chat && messages != nullptr && messages->is_array()) {
      json::object body = json::parse(request_body(spec, "", max_tokens)).as_object();
      body["messages"] = *messages;
      bodies.push_back(json::serialize(body));
    } else if (prompt != nullptr && prompt->is_string()) {
      bodies.push_back(request_body(spec, prompt->as_string(), max_tokens));
    } else {
      return make_error(ErrorCode::kInvalidArgument, "line {}: needs a string \"prompt\"{}", line_no,
                        spec.chat ? " or a \"messages\" array" : " (\"messages\" goes with --api chat)");
    }
  }
  if (bodies.empty()) return make_error(ErrorCode::kInvalidArgument, "holds no prompt");
  return bodies;
}

std::string describe(const WorkloadSpec& spec, bool from_file) {
  const std::string api = spec.chat ? "chat" : "completions";
  if (from_file) return fmt::format("{} with prompts from a file, {} output tokens", api, spec.output_tokens);
  return fmt::format("{}, {} input tokens ({:.0f}% shared), {} output tokens{}", api, spec.input_tokens,
                     100 * spec.shared_prefix, spec.output_tokens, spec.ignore_eos ? " (EOS ignored)" : "");
}

json::object workload_json(const WorkloadSpec& spec, const std::string& prompts_file) {
  json::object o{{"model", spec.model},
                 {"api", spec.chat ? "chat" : "completions"},
                 {"output_tokens", spec.output_tokens},
                 {"ignore_eos", spec.ignore_eos},
                 {"seed", spec.seed}};
  if (prompts_file.empty()) {
    o["input_tokens"] = spec.input_tokens;
    o["shared_prefix"] = spec.shared_prefix;
    o["num_prompts"] = spec.num_prompts;
  } else {
    o["prompts"] = prompts_file;
  }
  if (spec.temperature) o["temperature"] = *spec.temperature;
  if (!spec.extra.empty()) o["extra_body"] = spec.extra;
  return o;
}

}  // namespace hearth::cli
