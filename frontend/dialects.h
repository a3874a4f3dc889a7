// The two other request shapes clients speak: Anthropic's Messages API (POST /v1/messages,
// /v1/messages/count_tokens; frontend/anthropic.cpp) and OpenAI's Responses API
// (POST /v1/responses; frontend/responses.cpp). Each parses into the ApiRequest chat
// completions use (endpoint kMessages or kResponses: messages for the chat template, tools,
// tool_choice, an output constraint, sampling), so the prompt, admission, the engine and the
// pump are the same; only the answer's shape differs: one body, or a stream of typed
// events (EventStream).
//
// As for chat completions, every field is implemented or refused by name: what these APIs
// have that hearth lacks (images, documents, server-side tools, stored responses, extended
// thinking) is a 400 that says so, never silently dropped. Pure functions; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "frontend/openai.h"

namespace hearth {

// POST /v1/messages; `count_tokens`: the body of /v1/messages/count_tokens (no max_tokens,
// no sampling, no stream).
Result<ApiRequest> messages_parse_request(std::string_view body, bool count_tokens, const ApiParseOptions& options = {});
// POST /v1/responses.
Result<ApiRequest> responses_parse_request(std::string_view body, const ApiParseOptions& options = {});

// How one choice ended, in the pump's terms: its text (what was not tool calls), its calls,
// its finish_reason (stop, length, tool_calls) and the stop string that ended it, if one did.
struct DialectResult {
  std::string text;
  std::string reasoning;  // with a reasoning parser: the thinking before the text
  std::vector<ApiToolCall> calls;
  std::string finish_reason;
  std::string stop_sequence;
  ApiUsage usage;
};

// The whole (non-streamed) answer of a kMessages or kResponses request.
std::string dialect_response_body(const ApiRequest& request, const ApiResponseHead& head, const DialectResult& result);
// The body of /v1/messages/count_tokens.
std::string messages_count_tokens_body(int32_t input_tokens);

// An error body in the endpoint's shape: Anthropic's {"type": "error", "error": {"type",
// "message"}} for kMessages, OpenAI's for the others (api_error_body).
std::string dialect_error_body(ApiEndpoint endpoint, const Status& status);
// The 401 body of a request without a valid key.
std::string dialect_unauthorized_body(ApiEndpoint endpoint, std::string_view message);
// The prefix of a response id: msg_, resp_, chatcmpl-, cmpl-.
std::string_view dialect_id_prefix(ApiEndpoint endpoint);

// A streamed answer as typed server-sent events ("event: NAME\ndata: {...}\n\n"): the
// start events go out with the first text or tool call, each piece of reasoning or text
// is one delta of a thinking / text block (Messages) or a reasoning / message item
// (Responses), each tool call a block or item of its own, and finish() closes what is
// open and ends the stream. Not thread-safe: one per request, used by the pump.
class EventStream {
 public:
  // kMessages or kResponses.
  static std::unique_ptr<EventStream> create(const ApiRequest& request, const ApiResponseHead& head);
  virtual ~EventStream() = default;
  // The usage so far (the pump sets it before each call): the start event reports the
  // prompt's tokens and how many of them the prefix cache held.
  void set_usage(const ApiUsage& usage) { usage_ = usage; }
  virtual std::string reasoning(std::string_view delta) = 0;
  virtual std::string text(std::string_view delta) = 0;
  virtual std::string tool_calls(const std::vector<ApiToolCall>& calls) = 0;
  virtual std::string finish(const DialectResult& result) = 0;
  // A stream that fails after it began: an error event (after which nothing follows).
  virtual std::string error(const Status& status) = 0;

 protected:
  ApiUsage usage_;
};

}  // namespace hearth
