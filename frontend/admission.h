// Admission: whether a parsed generation request can run on this model and server, and
// if so what the engine is asked (the broker submission, one slot per sample). A pure
// function of the parsed request, its prompt tokens and the model's facts: no sockets,
// no broker, no clock (the seed a request without one gets is an argument), so every
// rule has a unit test of its own. The server's state (an engine down, a drain, a full
// queue) is judged by the caller.
//
// Rules, in order: the model is one this server serves; the prompt is not empty and
// leaves room for one token of output; max_tokens (16 for completions, the room left
// for chat when absent) fits that room (Messages' and Responses' are cut to it); min_tokens does not exceed max_tokens; the
// model's stop ids and the request's stop_token_ids merge without duplicates; the
// structured-output constraint compiles; the spec then passes request_spec_validate
// (ids in the vocabulary, counts within what a slot holds, the grammar within its
// bytes); n or best_of choices fit the server's slots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "common/status.h"
#include "frontend/openai.h"
#include "grammar/grammar.h"
#include "ipc/broker_client.h"

namespace hearth {

// What admission knows of the model and the server serving it.
struct ModelFacts {
  std::vector<std::string> model_names;  // accepted in `model` (empty `model`: any)
  int32_t context = 0;                   // tokens a request holds, prompt and output
  int32_t vocab_size = 0;
  std::vector<int32_t> stop_ids;         // the model's own
  uint32_t n_slots = 0;                  // broker slots: one per sample
  size_t grammar_bytes = 0;              // GBNF a slot holds
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // how the chat template writes tool calls
  grammar::ByteSet single_bytes;         // bytes that are tokens of their own
};

struct Admission {
  SubmitRequest submit;  // the prompt and spec; spec.sampling.seed is sample 0's seed
  int32_t samples = 1;   // slots it needs: best_of, else n
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // kNone when tools may not be called
};

// kNotFound when `request.model` names a model this server does not serve.
Status admit_model(const ApiRequest& request, const ModelFacts& facts);

// The rules above but the model's: kInvalidArgument or kOutOfRange naming the field.
// `seed` is used when the request gives none.
Result<Admission> admit(const ApiRequest& request, std::vector<int32_t> prompt, const ModelFacts& facts,
                        uint64_t seed);

}  // namespace hearth
