// The OpenAI-compatible request and response formats: parsing and validating request
// bodies into plain structs, and building response bodies and stream chunks.
//
// Pure functions over JSON text; thread-safe. Errors are Status values whose code the
// HTTP layer maps to a status (api_status_of): kInvalidArgument / kFormat / kOutOfRange /
// kUnsupported -> 400, kNotFound -> 404, kResourceExhausted -> 429, kUnavailable -> 503,
// anything else -> 500. Messages name the offending field first ("temperature must be
// between 0 and 2, not 7", "messages[2].content: ..."): api_error_body reports a message
// that begins with a request field's name (or with "unknown field NAME"), up to the first
// space or colon, as `param`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "common/sampling_params.h"
#include "common/status.h"

namespace hearth {

// kMessages (Anthropic's Messages API) and kResponses (OpenAI's Responses API) parse into
// the same request as chat completions (frontend/dialects.h) and answer in their own shapes.
enum class ApiEndpoint : uint8_t { kCompletions, kChatCompletions, kMessages, kResponses, kEmbeddings };
// Whether the endpoint's prompt is messages through the chat template.
inline bool api_is_chat(ApiEndpoint e) { return e != ApiEndpoint::kCompletions && e != ApiEndpoint::kEmbeddings; }

struct ApiMessage {
  std::string role;     // system, user, assistant, tool (developer is read as system)
  std::string content;  // text parts of an array content are joined
  // name, tool_calls (each call's arguments as an object, as templates expect) and
  // tool_call_id, when given: what the chat template sees besides role and content.
  boost::json::object extra;
};

// What a request constrains its output to: response_format json_object / json_schema, or
// one of the guided_* extensions (vLLM's names).
struct ApiConstraint {
  enum class Kind : uint8_t { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  boost::json::value schema;         // kJsonSchema
  std::string text;                  // kRegex: the pattern; kGrammar: GBNF
  std::vector<std::string> choices;  // kChoice
  std::string param;                 // the field it came from ("response_format", "guided_json", ...)
};

struct ApiTool {
  std::string name;
  std::string description;
  boost::json::value parameters;  // a JSON schema object; null: the function takes no arguments
  boost::json::value definition;  // the tool as given, for the chat template
};

enum class ApiToolChoice : uint8_t { kNone, kAuto, kRequired, kNamed };

// A call the model made, as the response reports it.
struct ApiToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, serialized
};

struct ApiRequest {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string model;                     // as given ("" when absent)
  std::optional<std::string> prompt;     // completions: text prompt
  std::vector<int32_t> prompt_tokens;    // completions: prompt given as token ids
  std::vector<ApiMessage> messages;      // chat
  std::optional<int32_t> max_tokens;     // max_tokens / max_completion_tokens; nullopt: to the context
  SamplingParams sampling;               // common/sampling_params.h: defaults and ranges
  std::optional<uint64_t> seed;          // absent: a random seed per request (sampling.seed unused)
  std::vector<std::string> stop;         // up to 4 non-empty strings
  int32_t n = 1;                         // 1..8
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  bool echo = false;                     // completions only
  int32_t logprobs = -1;                 // top alternatives per token; -1: no logprobs at all
  bool ignore_eos = false;               // vLLM's extension, for benchmarks
  bool continuous_usage_stats = false;   // stream_options.continuous_usage_stats: usage in every chunk
  std::optional<ApiConstraint> constraint;
  std::vector<LogitBias> logit_bias;     // ids as given: the server checks them against the vocabulary
  std::optional<std::string> suffix;     // completions: fill-in-the-middle
  std::optional<int32_t> best_of;        // completions: sample this many, return the n best
  int32_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;   // more ids that end a choice (the model's own always do)
  std::vector<ApiTool> tools;            // chat
  ApiToolChoice tool_choice = ApiToolChoice::kNone;  // kAuto by default when tools are given
  std::string tool_choice_name;          // kNamed
  bool parallel_tool_calls = true;
  std::optional<std::string> user;
  std::vector<std::string> ignored_fields;  // unknown fields accepted by ApiParseOptions::lenient_fields
  // Variables for the chat template beside messages and tools (chat_template_kwargs;
  // enable_thinking from Anthropic's thinking).
  boost::json::object template_kwargs;
  // Reasoning tokens a choice may spend before it is ended ("length"); nullopt: the
  // server's --reasoning-budget. Anthropic's thinking.budget_tokens.
  std::optional<int32_t> reasoning_budget;
  bool wants_reasoning = false;  // asked for thinking output (Anthropic's thinking: enabled)
  // kMessages: the text of a final assistant message (a prefill), which the answer
  // continues: it follows the template's generation prompt, and is not repeated.
  std::string prefill;
  // kResponses: the settings its response object reports back (instructions,
  // tools, text, metadata, ...), as given.
  boost::json::object settings;
};

struct ApiParseOptions {
  // Accept and ignore fields no schema has (noted in ApiRequest::ignored_fields) instead
  // of answering 400.
  bool lenient_fields = false;
};

// Parses and validates a request body for `endpoint`. Every field is implemented or
// refused: fields of the OpenAI schema hearth does not implement get a kUnsupported
// error naming them (unless their value asks for nothing, such as tools: [] or
// response_format {"type": "text"}), unknown fields a kInvalidArgument one ("unknown
// field NAME: ...") unless options.lenient_fields; fields of the wrong type, out-of-range
// values and missing required fields are errors.
Result<ApiRequest> api_parse_request(std::string_view body, ApiEndpoint endpoint, const ApiParseOptions& options = {});

// The HTTP status for an error Status.
int api_status_of(const Status& status);
// OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
std::string api_error_body(const Status& status);

// One token as reported in logprobs.
struct ApiTokenLogprob {
  std::string token;  // the token's text (its bytes, lossily decoded if not valid UTF-8)
  std::vector<uint8_t> bytes;  // the bytes it adds to the text; empty: those of `token`
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // alternatives, most likely first
  std::vector<std::vector<uint8_t>> top_bytes;  // per alternative; missing or empty: its text
};

// One finished choice.
struct ApiChoice {
  int32_t index = 0;
  std::string text;
  std::string finish_reason;  // "stop", "length", "tool_calls"
  std::optional<std::string> reasoning;  // chat with a reasoning parser: reasoning_content
  std::vector<ApiToolCall> tool_calls;  // chat
  std::vector<ApiTokenLogprob> logprobs;  // when asked
  int32_t text_offset_base = 0;           // completions: where the generated text starts (echo)
};

struct ApiUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // of the prompt tokens, those the engine's prefix cache held
  int32_t reasoning_tokens = 0;  // of the completion tokens, those inside the reasoning
};

// What every response and chunk of one request carries.
struct ApiResponseHead {
  std::string id;
  int64_t created = 0;
  std::string model;
  std::string system_fingerprint;  // empty: left out
};

// The whole (non-streamed) response body.
std::string api_response_body(const ApiRequest& request, const ApiResponseHead& head,
                              const std::vector<ApiChoice>& choices, const ApiUsage& usage);

// One server-sent event for a stream: "data: {...}\n\n". `delta` is the new text of
// choice `index`; `finish_reason` empty until the last chunk of that choice; `role_chunk`
// makes the chat delta carry {"role": "assistant"} (the first chunk of each choice).
// `text_offset_base`: completions logprobs, the byte offset in the choice's text of the
// first token of `logprobs`. `usage`: the usage so far (continuous_usage_stats), or none.
std::string api_stream_chunk(const ApiRequest& request, const ApiResponseHead& head, int32_t index,
                             std::string_view delta, std::string_view finish_reason,
                             const std::vector<ApiTokenLogprob>& logprobs, bool role_chunk,
                             int32_t text_offset_base = 0, const ApiUsage* usage = nullptr);
// A chat chunk with reasoning text of choice `index`: delta.reasoning_content.
std::string api_stream_reasoning_chunk(const ApiRequest& request, const ApiResponseHead& head, int32_t index,
                                       std::string_view delta, bool role_chunk);
// A chat chunk with the tool calls of choice `index` that completed: delta.tool_calls,
// numbered from `first` (their position among the choice's calls).
std::string api_stream_tool_calls_chunk(const ApiRequest& request, const ApiResponseHead& head, int32_t index,
                                        const std::vector<ApiToolCall>& calls, int32_t first, bool role_chunk);
// The usage chunk (stream_options.include_usage), and the terminator "data: [DONE]\n\n".
std::string api_stream_usage_chunk(const ApiRequest& request, const ApiResponseHead& head, const ApiUsage& usage);
inline constexpr std::string_view kApiStreamDone = "data: [DONE]\n\n";
// An error event for a stream that fails after it started.
std::string api_stream_error(const Status& status);

}  // namespace hearth
