// Session: one HTTP connection of the frontend (Boost.Beast): read a request, route it,
// answer it (one JSON body, or Server-Sent Events written as the pump hands over text),
// keep the connection alive or close it politely, and notice a client that leaves while
// its request runs. Internal to frontend/.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "frontend/server_state.h"
#include "frontend/webui.h"

namespace hearth {

namespace beast = boost::beast;
namespace http = beast::http;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<FrontendServer::Impl> server);
  ~Session();

  void start() { read_request(); }

  // The server is draining: a keep-alive connection waiting for its next request, with no
  // byte of it received, is closed now; one in the middle of a request closes after
  // answering. A connection that has not sent its first request yet was accepted to be
  // served: its client may be about to write (or its bytes still be on the way), so it
  // gets kFirstRequestGrace for them before it is closed.
  void post_drain();

  // Called from the pump (any thread): bytes of a streamed response; `last` ends it.
  void post_stream(std::string bytes, bool last);
  // Called from the pump: the whole response of a non-streamed request.
  void post_response(int status, std::string body, std::string_view retry_after = {});

 private:
  void read_request();
  bool idle_with_nothing_waiting();
  void on_read(beast::error_code ec);

  void handle();
  bool answer_cors(http::verb route_method);
  bool authorized(std::string_view path);
  void serve(std::string_view path);
  void handle_generation(ApiEndpoint endpoint);
  void serve_page(std::string_view path, const WebAsset& asset);
  void handle_count_tokens();
  void handle_embeddings();
  void handle_lora_admin(bool load);
  // Answers 503 when no engine has served for longer than --engine-wait; true if it did.
  bool refused_engine_down();
  void handle_tokenize();
  void handle_detokenize();
  void error(const Status& st, std::string_view retry_after = {});

  // The route as /metrics labels it: a known path, or "other" (label values stay few).
  std::string_view route_label() const { return route_.empty() ? std::string_view("other") : route_; }

  // One line per request: who, what, how it ended, how long it took, never the prompt
  // unless --log-prompts. Probes and scrapes only at debug.
  void log_access(int status);

  void respond(int status, std::string body, std::string_view content_type, std::string_view retry_after = {});

  // Streams: a chunked text/event-stream response written piece by piece. The head goes
  // out with the first chunk, so a request that fails before producing anything (no
  // engine, say) still gets a real HTTP status.
  void begin_stream();
  void queue_chunk(std::string bytes, bool last);
  void flush();

  // While a generation runs, a read that ends tells us the client went away. Bytes it
  // reads (a pipelined next request) are kept for the next read_request().
  void watch_disconnect();
  // Runs `next` once no watch read is pending (cancelling it), so that two reads never
  // run on the socket at once.
  void after_watch(std::function<void()> next);

  void client_gone();

  // Ends a connection politely: stop sending, then read and drop what the client still
  // sends (the rest of a refused body) for a moment, so that it sees our response
  // instead of a reset.
  void linger();
  void linger_more();

  void close();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  std::shared_ptr<FrontendServer::Impl> server_;
  std::shared_ptr<Generation> generation_;
  std::deque<std::string> outbox_;
  bool writing_ = false;
  bool stream_done_ = false;
  bool keep_alive_ = true;
  bool awaiting_request_ = false;  // a read of the next request is pending
  int64_t requests_ = 0;           // reads completed on this connection
  std::optional<asio::steady_timer> drain_grace_;  // a draining connection's wait for its first request
  bool watching_ = false;          // watch_disconnect's read is pending
  std::function<void()> after_watch_;
  bool head_sent_ = false;         // this response's stream head went out
  std::string request_id_;         // x-request-id of the request being answered
  std::string client_;             // the peer's address:port, for the access log
  std::string route_;              // the request's route, when it is a known one
  ApiEndpoint error_shape_ = ApiEndpoint::kChatCompletions;  // whose error bodies this request gets
  std::chrono::steady_clock::time_point request_started_;
  bool logged_ = false;            // this request's access-log line is written
  std::vector<std::pair<std::string, std::string>> extra_headers_;  // CORS, WWW-Authenticate

  friend struct FrontendServer::Impl;
};

}  // namespace hearth
