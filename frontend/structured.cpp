#include "frontend/structured.h"

#include <fmt/format.h>

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace hearth {
namespace {

namespace json = boost::json;

// The rules of a forced tool call in `format`: one call to any tool of `tools` (or only
// to `only`), or several when parallel calls are allowed.
Result<std::string> tool_grammar(const ApiRequest& r, ToolCallFormat format) {
  if (format == ToolCallFormat::kNone) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tool_choice: this model's chat template has no tool-call format to force a call in (start the "
                      "server with --chat-template chatml, llama3 or mistral, or --tool-call-parser)");
  }
  grammar::JsonGrammarBuilder b;
  const std::string_view args_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  std::vector<std::string> calls;
  for (const ApiTool& tool : r.tools) {
    if (r.tool_choice == ApiToolChoice::kNamed && tool.name != r.tool_choice_name) continue;
    std::string args;
    if (tool.parameters.is_null()) {
      args = "\"{}\"";
    } else {
      auto rule = b.add_schema(tool.parameters, "tool-" + tool.name);
      if (!rule.is_ok()) return rule.status().with_context(fmt::format("tools[{}].function.parameters", tool.name));
      args = *rule;
    }
    const std::string head = fmt::format("{{\"name\": \"{}\", \"{}\": ", tool.name, args_key);
    calls.push_back(fmt::format("{} {} \"}}\"", grammar::gbnf_literal(head), args));
  }
  b.add_rule("call", fmt::format("{}", fmt::join(calls, " | ")));
  const bool many = r.parallel_tool_calls && r.tool_choice == ApiToolChoice::kRequired;
  std::string root;
  switch (format) {
    case ToolCallFormat::kHermes:
      b.add_rule("call-block", "\"<tool_call>\\n\" call \"\\n</tool_call>\"");
      root = many ? "call-block (\"\\n\" call-block)*" : "call-block";
      break;
    case ToolCallFormat::kLlama3Json:
      root = many ? "call (\"; \" call)*" : "call";
      break;
    case ToolCallFormat::kMistral:
      root = many ? "\"[\" call (\", \" call)* \"]\"" : "\"[\" call \"]\"";
      break;
    case ToolCallFormat::kNone:
      break;
  }
  return b.gbnf(root);
}

Result<std::string> constraint_grammar(const ApiConstraint& c) {
  switch (c.kind) {
    case ApiConstraint::Kind::kJsonObject: {
      grammar::JsonGrammarBuilder b;
      const std::string object = b.any_object();
      return b.gbnf(object);
    }
    case ApiConstraint::Kind::kJsonSchema: {
      auto g = grammar::json_schema_to_gbnf(c.schema);
      if (!g.is_ok()) {
        return g.status().with_context(c.param == "response_format" ? "response_format.json_schema.schema" : c.param);
      }
      return g;
    }
    case ApiConstraint::Kind::kRegex: {
      auto g = grammar::regex_to_gbnf(c.text, grammar::RegexTarget::kText);
      if (!g.is_ok()) return g.status().with_context(c.param);
      return "root ::= " + *g + "\n";
    }
    case ApiConstraint::Kind::kChoice: {
      std::vector<std::string> alts;
      for (const std::string& choice : c.choices) {
        if (choice.empty()) return make_error(ErrorCode::kInvalidArgument, "guided_choice holds an empty string");
        alts.push_back(grammar::gbnf_literal(choice));
      }
      return fmt::format("root ::= {}\n", fmt::join(alts, " | "));
    }
    case ApiConstraint::Kind::kGrammar:
      return c.text;
  }
  return make_error(ErrorCode::kInternal, "unknown constraint");
}

}  // namespace

Result<std::string> request_grammar(const ApiRequest& r, ToolCallFormat format, const grammar::ByteSet& single_bytes,
                                    size_t max_bytes) {
  std::string gbnf;
  std::string param;
  if (r.constraint) {
    HEARTH_ASSIGN_OR_RETURN(gbnf, constraint_grammar(*r.constraint));
    param = r.constraint->param;
  } else if (r.tool_choice == ApiToolChoice::kRequired || r.tool_choice == ApiToolChoice::kNamed) {
    HEARTH_ASSIGN_OR_RETURN(gbnf, tool_grammar(r, format));
    param = "tool_choice";
  } else {
    return std::string();
  }
  if (gbnf.size() > max_bytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: the constraint compiles to a grammar of {} bytes; this server takes at most {} "
                      "(hearth-engine --max-grammar-bytes)",
                      param, gbnf.size(), max_bytes);
  }
  auto g = grammar::Grammar::parse(gbnf);
  if (!g.is_ok()) return g.status().with_context(param);
  if (g->min_length(single_bytes) >= grammar::kUnreachable) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: this model's vocabulary cannot write any output the constraint allows (a character it "
                      "needs is no token of its own)",
                      param);
  }
  return gbnf;
}

}  // namespace hearth
