// The grammar a request's output must match, compiled in the frontend so that a 400
// names what cannot be honoured before a slot is taken: response_format json_object /
// json_schema, guided_json / guided_regex / guided_choice / guided_grammar, and
// tool_choice required or a named function (calls in the chat template's format, the
// arguments valid against each tool's parameters). The engine receives GBNF text.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "chat/tool_calls.h"
#include "common/status.h"
#include "frontend/openai.h"
#include "grammar/grammar.h"

namespace hearth {

// The GBNF text for `request` ("" when nothing constrains its output). Errors name the
// field: an unsupported schema keyword (kUnsupported), an invalid schema, regex or
// grammar, a grammar the vocabulary cannot write with its own tokens (`single_bytes`: the
// bytes that are tokens of their own), or one larger than `max_bytes` (kInvalidArgument).
Result<std::string> request_grammar(const ApiRequest& request, ToolCallFormat format,
                                    const grammar::ByteSet& single_bytes, size_t max_bytes);

}  // namespace hearth
