// A small blocking HTTP/1.1 client for the tests (Boost.Beast), and Server-Sent Events
// splitting.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hearth::testing {

struct HttpResponse {
  int status = 0;  // 0: the request failed (connection refused, reset, ...)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string error;
};

// One request on a fresh connection to 127.0.0.1:port, with `headers` besides the usual.
HttpResponse http_request(uint16_t port, const std::string& method, const std::string& target,
                          const std::string& body = "", const std::string& content_type = "application/json",
                          const std::map<std::string, std::string>& headers = {});

// One request on a fresh connection with "Connection: close", read to the end of the
// response; `on_data` (when given) sees the raw bytes received so far after each read.
// A response cut short (no final chunk, or fewer bytes than Content-Length) has status
// 0 and error "truncated ...", with what arrived in `body`. Chunked bodies are decoded.
// Each read waits at most `read_timeout` (a benchmark whose requests queue behind long
// prefills gives more than the tests' two minutes).
HttpResponse http_request_streamed(uint16_t port, const std::string& target, const std::string& body,
                                   const std::function<void(const std::string&)>& on_data = {},
                                   std::chrono::seconds read_timeout = std::chrono::seconds(120));

// Several POST requests, one after the other on one keep-alive connection.
std::vector<HttpResponse> http_posts_keep_alive(uint16_t port,
                                                const std::vector<std::pair<std::string, std::string>>& requests);

// The data fields of a text/event-stream body, in order ("[DONE]" included; a typed
// event's "event: NAME" line is dropped, its data kept).
std::vector<std::string> sse_events(const std::string& body);

// Opens a connection, sends `body` to `target`, reads at least `bytes` bytes of the
// response and closes the connection abruptly (a client that vanishes mid-stream).
// Returns what it read.
std::string http_post_and_vanish(uint16_t port, const std::string& target, const std::string& body, size_t bytes);

}  // namespace hearth::testing
