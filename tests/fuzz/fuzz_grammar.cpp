// Fuzz target: what clients send as constraints (guided_grammar GBNF, JSON schemas,
// regexes) and what models write as tool calls. The first byte picks which; the rest is
// the input. A grammar that compiles is walked for a few steps over a small vocabulary
// with a budget. Everything must come back as a Status or text, never crash or hang.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "chat/tool_calls.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace {

void walk(const std::string& gbnf) {
  static const auto vocab = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    bytes.emplace_back();
    for (const char* t : {"{\"", "\": ", "true", "12", "abc", "\xC3\xA9", "<tool_call>"}) bytes.emplace_back(t);
    return std::make_shared<const hearth::grammar::Vocabulary>(hearth::grammar::Vocabulary::build(bytes).value());
  }();
  hearth::grammar::GrammarLimits limits;
  limits.max_elements = 1u << 16;
  auto g = hearth::grammar::Grammar::parse(gbnf, "root", limits);
  if (!g.is_ok()) return;
  hearth::grammar::MatcherLimits ml;
  ml.max_nodes = 1u << 16;
  ml.max_stacks = 256;
  auto c = hearth::grammar::CompiledGrammar::create(std::move(g).value(), vocab, ml);
  if (!c.is_ok()) return;
  hearth::grammar::GrammarMatcher m(*c, {256});
  hearth::grammar::TokenMask mask;
  for (int step = 0; step < 16 && !m.terminated(); ++step) {
    if (!m.fill_mask(mask, 16 - step).is_ok()) return;
    int32_t pick = -1;
    for (int32_t id = vocab->size() - 1; id >= 0 && pick < 0; --id) {
      if (mask.test(id)) pick = id;
    }
    if (pick < 0) return;
    if (!m.accept(pick).is_ok()) __builtin_trap();  // the mask allowed it
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      walk(std::string(input));
      break;
    case 1: {
      boost::system::error_code ec;
      boost::json::parse_options po;
      po.max_depth = 64;
      const boost::json::value schema = boost::json::parse(input, ec, {}, po);
      if (ec) break;
      auto gbnf = hearth::grammar::json_schema_to_gbnf(schema);
      if (gbnf.is_ok() && gbnf->size() < (1u << 16)) walk(*gbnf);
      break;
    }
    case 2: {
      auto expr = hearth::grammar::regex_to_gbnf(input, hearth::grammar::RegexTarget::kJsonString);
      if (expr.is_ok()) walk("root ::= " + *expr);
      break;
    }
    default:
      for (auto f : {hearth::ToolCallFormat::kHermes, hearth::ToolCallFormat::kLlama3Json,
                     hearth::ToolCallFormat::kMistral}) {
        hearth::ToolCallParser p(f);
        std::vector<hearth::ToolCall> calls;
        std::string out = p.push(input.substr(0, input.size() / 2), calls);
        out += p.push(input.substr(input.size() / 2), calls);
        out += p.finish(calls);
      }
      break;
  }
  return 0;
}
