// Fuzz target: any bytes as what a client sends the frontend: the HTTP request parser
// with the server's limits (frontend/http_limits.h), then the request body as every
// route that reads one parses it (the OpenAI request codec for both generation routes, the
// Messages, Responses and embeddings parsers).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "frontend/http_limits.h"
#include "frontend/dialects.h"
#include "frontend/embeddings.h"
#include "frontend/openai.h"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(64 * 1024);
  parser.header_limit(hearth::kMaxHeaderBytes);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < size && !ec && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (n == 0 && ec == http::error::need_more) break;
    used += n;
    if (ec == http::error::need_more) ec = {};
  }
  const std::string_view body = parser.is_done() && !ec ? std::string_view(parser.get().body())
                                                         : std::string_view(reinterpret_cast<const char*>(data), size);
  for (const auto endpoint : {hearth::ApiEndpoint::kCompletions, hearth::ApiEndpoint::kChatCompletions}) {
    auto r = hearth::api_parse_request(body, endpoint);
    if (r.is_ok() && r->n < 1) __builtin_trap();  // a parsed request is a valid one
  }
  for (const bool count_tokens : {false, true}) {
    auto r = hearth::messages_parse_request(body, count_tokens);
    if (r.is_ok() && (r->messages.empty() || (!count_tokens && !r->max_tokens))) __builtin_trap();
  }
  if (auto r = hearth::responses_parse_request(body); r.is_ok() && r->messages.empty()) __builtin_trap();
  if (auto r = hearth::embeddings_parse_request(body); r.is_ok()) {
    // A parsed request has inputs, of one kind, none empty, and at most the limit.
    const size_t n = r->texts.size() + r->token_inputs.size();
    if (n == 0 || n > hearth::kMaxEmbeddingInputs || (!r->texts.empty() && !r->token_inputs.empty())) __builtin_trap();
    for (const auto& ids : r->token_inputs) {
      if (ids.empty()) __builtin_trap();
    }
  }
  return 0;
}
