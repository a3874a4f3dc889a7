// The HTTP side of `hearth bench`: streaming OpenAI requests over Boost.Beast, with the
// timings of each (time to first token, the gap before every later token, end to end)
// and its outcome. Any OpenAI-compatible server: hearth, vLLM, llama-server.
//
// A LoadConnection is one keep-alive connection, used by one coroutine at a time on the
// caller's io_context; it connects again when the server closed it. The splitter and
// chunk reader are pure functions of their input, safe anywhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "common/status.h"

namespace hearth::cli {

// Where the server is: "http://host[:port][/prefix]" (the prefix is usually /v1; given
// without it, /v1 is assumed). TLS is not spoken: https:// is refused.
struct Endpoint {
  std::string host;
  std::string port = "80";
  std::string prefix = "/v1";                 // requests go to prefix + "/completions" etc.
  std::map<std::string, std::string> headers;  // sent with every request (Authorization)
  boost::asio::ip::tcp::resolver::results_type addresses;  // resolve_endpoint() fills it
};
Result<Endpoint> parse_endpoint(std::string_view url);
// Resolves the host once, so that no request of the run waits on the resolver.
Status resolve_endpoint(Endpoint& endpoint);

// One GET (for /v1/models before a run): the status and body, or why there is none.
struct HttpReply {
  int status = 0;
  std::string body;
};
Result<HttpReply> http_get(const Endpoint& endpoint, const std::string& target, std::chrono::milliseconds timeout);

// What one request did. Times are seconds; `start_s` counts from the run's epoch, the
// others from the request's start.
struct RequestRecord {
  double start_s = 0;
  double first_token_s = -1;        // the first event carrying text; <0: none came
  double end_s = 0;                 // the stream's end ([DONE] or its last byte)
  std::vector<double> token_gaps_s;  // between consecutive events carrying text
  int64_t content_events = 0;       // events carrying text
  int64_t prompt_tokens = -1;       // from usage, when the server sent it
  int64_t output_tokens = 0;        // usage.completion_tokens, else content_events
  int64_t cached_tokens = -1;       // usage.prompt_tokens_details.cached_tokens
  int http_status = 0;
  // Empty: success. Otherwise the kind of failure, the key errors are counted by:
  // "HTTP 429" (any status but 200), "connect", "timeout", "reset" (connection lost),
  // "truncated" (no [DONE]), "stream error" (an error event inside a 200 stream),
  // "bad stream" (an event that is not a completion chunk).
  std::string error;
  std::string error_detail;  // the server's message or the socket error, for the log
  bool ok() const { return error.empty(); }
};

// Splits a text/event-stream into the data of its events (data: lines joined by \n, as
// the HTML standard says), however the bytes are cut. Comments and other fields are
// dropped.
class SseSplitter {
 public:
  // Appends the data of each event completed by `bytes` to `out`.
  void feed(std::string_view bytes, std::vector<std::string>& out);

 private:
  std::string pending_;  // bytes of an unfinished line
  std::string data_;     // data lines of the event being read
  bool has_data_ = false;
};

// What one event's data says: the end marker, whether it carries generated text (a
// completions chunk's text, or a chat delta's content, reasoning or tool call), usage,
// or an error object.
struct ChunkInfo {
  bool done = false;  // "[DONE]"
  bool has_content = false;
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;
  std::string error;  // an "error" object's message, or why the data is not a chunk
  bool malformed = false;
};
ChunkInfo read_chunk(std::string_view data);

// One keep-alive connection to the endpoint.
class LoadConnection {
 public:
  LoadConnection(boost::asio::any_io_executor executor, const Endpoint& endpoint);

  // POSTs `body` (JSON, "stream": true) to `target` and reads the whole event stream,
  // timing each event on arrival. `epoch` is the run's start. Never throws: every
  // failure is in the record. The connection is closed after a failure or when the
  // server asks for it, and opened again by the next request.
  boost::asio::awaitable<RequestRecord> post_stream(const std::string& target, const std::string& body,
                                                    std::chrono::steady_clock::time_point epoch,
                                                    std::chrono::milliseconds timeout);

 private:
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  const Endpoint& endpoint_;
  bool connected_ = false;
};

}  // namespace hearth::cli
