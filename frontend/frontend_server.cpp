#include "frontend/frontend_server.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "chat/tool_calls.h"
#include "common/json.h"
#include "common/log.h"
#include "common/process.h"
#include "common/test_point.h"
#include "common/utf8.h"
#include "common/version.h"
#include "frontend/http_limits.h"
#include "frontend/metrics.h"
#include "frontend/openai.h"
#include "frontend/prompt.h"
#include "frontend/structured.h"
#include "frontend/text_stream.h"
#include "grammar/grammar.h"
#include "ipc/broker_client.h"
#include "ipc/tp_segment.h"
#include "ipc/weights_segment.h"
#include "tokenizer/source_codec.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}", prefix, rng());
}

// A tool call's id: Mistral templates want nine letters and digits, others call_<hex>.
std::string tool_call_id(ToolCallFormat format) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  if (format != ToolCallFormat::kMistral) return fmt::format("call_{:016x}{:08x}", rng(), rng() & 0xffffffffu);
  constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id += kAlnum[rng() % kAlnum.size()];
  return id;
}

// The client's x-request-id when it is short and printable, else a new one.
std::string request_id_of(std::string_view given) {
  const bool usable = !given.empty() && given.size() <= 128 &&
                      std::all_of(given.begin(), given.end(), [](char c) { return c > 0x20 && c < 0x7F; });
  return usable ? std::string(given) : random_id("req-");
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// How long a draining frontend waits for the first request of a connection it accepted.
constexpr std::chrono::milliseconds kFirstRequestGrace{2000};

// Whether `given` is one of `keys`, in time that depends on the keys' lengths only: every
// key is compared over its whole length, whatever matched before.
bool key_matches(std::string_view given, const std::vector<std::string>& keys) {
  unsigned match = 0;
  for (const std::string& key : keys) {
    unsigned diff = given.size() != key.size() ? 1u : 0u;
    for (size_t i = 0; i < key.size(); ++i) {
      const char g = i < given.size() ? given[i] : '\0';
      diff |= static_cast<unsigned>(static_cast<unsigned char>(g ^ key[i]));
    }
    match |= diff == 0 ? 1u : 0u;
  }
  return match != 0;
}

// The routes that serve the model (and so want an API key when there are keys).
bool is_api_route(std::string_view path) {
  return path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize";
}
// Probes and scrapes: not counted as requests, logged at debug only.
bool is_probe_route(std::string_view path) { return path == "/metrics" || path == "/health" || path == "/ready"; }

std::string millis(double seconds) { return seconds < 0 ? std::string("-") : fmt::format("{:.1f}", seconds * 1e3); }

}  // namespace

class Session;

// One HTTP request being generated: its choices (one broker slot each) and what has been
// sent. Only the pump thread touches it after submission, except `client_gone`.
struct Generation {
  struct Choice {
    uint32_t slot = 0;
    uint32_t generation = 0;  // the slot's claim count when we took it
    bool slot_held = true;
    int32_t consumed = 0;
    std::optional<TextStream> text;
    std::string finish_reason;
    std::chrono::steady_clock::time_point last_token;  // when the pump last saw its tokens
    bool done = false;       // no more text will come for it
    bool announced = false;  // the first stream chunk (with the role) went out
    bool finish_sent = false;  // the stream chunk with its finish_reason went out
    std::vector<ApiTokenLogprob> logprobs;
    std::optional<ToolCallParser> tools;  // when the model may call tools
    std::string content;                  // the text that is not tool calls
    std::vector<ApiToolCall> calls;
    size_t calls_sent = 0;                // streamed so far
    double logprob_sum = 0.0;             // best_of ranks choices by their mean
  };
  ApiRequest request;
  ApiResponseHead head;
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // of those, found in the engine's prefix cache (the most any choice found)
  std::string echo_text;
  std::vector<Choice> choices;
  std::weak_ptr<Session> session;
  std::atomic<bool> client_gone{false};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // Waiting in the frontend's queue for slots: the submission still to make, how many
  // samples have yet to get a slot, and since when it waits (for the queue time).
  SubmitRequest pending;
  uint64_t base_seed = 0;  // sample i draws with base_seed + i
  int32_t samples_left = 0;
  std::chrono::steady_clock::time_point submitted;  // when its last slot was claimed
  bool queue_time_seen = false;
  std::chrono::steady_clock::time_point first_token_at;
  // For the access log: the pump writes them, a session may read them while it runs.
  std::atomic<int64_t> ttft_us{-1};
  std::atomic<int32_t> output_tokens{0};
  std::string finish_reasons;  // the choices', comma-separated
  bool first_token_seen = false;
  bool stream_started = false;  // stream bytes were sent (so the status is 200)
  bool finished = false;
  bool failed = false;
};

struct FrontendServer::Impl : std::enable_shared_from_this<FrontendServer::Impl> {
  FrontendOptions options;
  std::optional<AttachedWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<PromptBuilder> prompts;
  grammar::ByteSet single_bytes;  // bytes that are tokens of their own (what grammars may rely on)
  std::string model_id;
  std::string system_fingerprint;
  int32_t context = 0;
  std::optional<BrokerClient> client;
  asio::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::atomic<bool> stopping{false};
  // Draining (after drain()): no new connections; requests in flight finish until
  // `drain_deadline`, then end with an error; run() returns once nothing is left.
  std::atomic<bool> draining{false};
  std::atomic<int64_t> drain_deadline_ns{0};  // steady clock
  std::optional<asio::steady_timer> drain_timer;
  std::mutex sessions_mutex;  // guards `sessions`
  std::vector<std::weak_ptr<Session>> sessions;
  std::atomic<int> open_sessions{0};
  std::atomic<int64_t> pump_beat_ns{0};  // steady clock of the pump's last round
  std::atomic<bool> engine_up{false};
  // Steady-clock ns since when no engine is up (0 while one is; set by the pump): requests
  // in flight wait engine_wait from then, and one arriving later than that gets 503 at once.
  std::atomic<int64_t> engine_down_since_ns{0};
  std::mutex mutex;  // guards `active` and `queue`
  std::list<std::shared_ptr<Generation>> active;
  std::deque<std::shared_ptr<Generation>> queue;  // waiting for slots, first come first served
  std::thread pump;
  std::vector<std::string> model_names;  // accepted in `model`; the first is model_id
  std::string model_label;               // model_name="..." for /metrics
  // Counters for /metrics.
  std::atomic<uint64_t> errors_total{0}, tokens_total{0}, prompt_tokens_total{0};
  std::atomic<uint64_t> rejected_queue_full{0}, rejected_queue_timeout{0}, rejected_engine_down{0},
      rejected_connections{0};
  std::array<std::atomic<uint64_t>, 4> finished_by_reason{};  // stop, length, tool_calls, abort
  LatencyHistogram time_to_first_token, request_duration, queue_time;
  LatencyHistogram time_per_output_token{kTokenLatencyBounds}, inter_token_latency{kTokenLatencyBounds};
  std::mutex responses_mu;  // guards `responses`
  std::map<std::pair<std::string, int>, uint64_t> responses;  // (route, HTTP status) -> count
  void count_response(std::string_view route, int status) {
    std::lock_guard lock(responses_mu);
    ++responses[{std::string(route), status}];
  }
  void count_finish(std::string_view reason) {
    static constexpr std::string_view kReasons[] = {"stop", "length", "tool_calls", "abort"};
    for (size_t i = 0; i < std::size(kReasons); ++i) {
      if (kReasons[i] == reason) finished_by_reason[i].fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Whether no engine has served for longer than engine_wait (a restart would be done by now).
  bool engine_known_down(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const {
    const int64_t since = engine_down_since_ns.load(std::memory_order_relaxed);
    return since != 0 && now.time_since_epoch().count() - since > std::chrono::nanoseconds(options.engine_wait).count();
  }
  // The slots a queued generation still needs, claimed in order; false when every slot is
  // busy (it stays queued), and the error when a submission failed otherwise.
  Result<bool> claim_slots(Generation& g);
  void pump_queue();
  // A request given up on: its slots the engine has not taken go back at once (so they
  // never look busy to the next client), the others are cancelled and go back when the
  // engine lets go of them. False when none is still held.
  bool give_up(Generation& g) {
    bool held = false;
    for (auto& c : g.choices) {
      if (!c.slot_held) continue;
      if (!client->holds(c.slot, c.generation)) {  // taken from us (see advance): not ours to touch
        c.slot_held = false;
        c.done = true;
        continue;
      }
      if (client->withdraw(c.slot)) {
        c.slot_held = false;
        c.done = true;
      } else {
        client->cancel(c.slot);
        held = true;
      }
    }
    return held;
  }

  Status load(const FrontendOptions& o);
  void accept();
  void pump_loop();
  void advance(Generation& g);
  // --lenient-fields: says once per field name that requests carry it and it is ignored.
  void note_ignored_field(const std::string& name) {
    std::lock_guard lock(ignored_mu);
    if (ignored_fields.size() < 256 && ignored_fields.insert(name).second) {
      HEARTH_LOG_WARN("requests carry the unknown field {}; ignored (--lenient-fields)", name);
    }
  }
  std::mutex ignored_mu;
  std::set<std::string> ignored_fields;

  // Whether an engine serves the instance, as the pump last saw it (every round).
  bool engine_ready() const { return engine_up.load(std::memory_order_relaxed); }
  // An engine is up when its heartbeat is fresh and its process runs (a killed engine is
  // noticed at once, a wedged one within the heartbeat bound).
  bool probe_engine() const {
    if (!client->engine_alive(std::chrono::milliseconds(3000))) return false;
    const BrokerHeader& h = client->broker().header();
    const int32_t pid = h.engine_pid.load(std::memory_order_relaxed);
    return pid > 0 && process_alive(pid, h.engine_start_time.load(std::memory_order_relaxed));
  }
  bool drain_expired() const {
    return draining.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now().time_since_epoch().count() > drain_deadline_ns.load();
  }
  size_t active_count() {
    std::lock_guard lock(mutex);
    return active.size();
  }
  void begin_drain(std::chrono::milliseconds timeout);
  void watch_drain();
  void release_handlers();
};

// ---------------------------------------------------------------- HTTP session

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<FrontendServer::Impl> server)
      : stream_(std::move(socket)), server_(std::move(server)) {
    ++server_->open_sessions;
    beast::error_code ec;
    const auto remote = stream_.socket().remote_endpoint(ec);
    if (!ec) client_ = fmt::format("{}:{}", remote.address().to_string(), remote.port());
  }
  ~Session() { --server_->open_sessions; }

  void start() { read_request(); }

  // The server is draining: a keep-alive connection waiting for its next request, with no
  // byte of it received, is closed now; one in the middle of a request closes after
  // answering. A connection that has not sent its first request yet was accepted to be
  // served: its client may be about to write (or its bytes still be on the way), so it
  // gets kFirstRequestGrace for them before it is closed.
  void post_drain() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      self->keep_alive_ = false;
      if (!self->idle_with_nothing_waiting()) return;
      if (self->requests_ > 0) return self->close();
      self->drain_grace_.emplace(self->stream_.get_executor());
      self->drain_grace_->expires_after(kFirstRequestGrace);
      self->drain_grace_->async_wait([self](beast::error_code ec) {
        if (!ec && self->idle_with_nothing_waiting()) self->close();
      });
    });
  }

  // Called from the pump (any thread): bytes of a streamed response; `last` ends it.
  void post_stream(std::string bytes, bool last) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes), last]() mutable {
      self->queue_chunk(std::move(bytes), last);
    });
  }
  // Called from the pump: the whole response of a non-streamed request.
  void post_response(int status, std::string body, std::string_view retry_after = {}) {
    asio::post(stream_.get_executor(),
               [self = shared_from_this(), status, body = std::move(body), retry = std::string(retry_after)]() mutable {
                 self->respond(status, std::move(body), "application/json", retry);
                 self->generation_.reset();
               });
  }

 private:
  void read_request() {
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(kMaxHeaderBytes);
    // The whole request, or the start of the next one on a kept-alive connection, within
    // the read timeout: an idle or slow client does not hold a connection for long.
    stream_.expires_after(server_->options.read_timeout);
    awaiting_request_ = true;
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  bool idle_with_nothing_waiting() {
    beast::error_code ec;
    const bool bytes_waiting =
        buffer_.size() > 0 || stream_.socket().available(ec) > 0 || (parser_ && parser_->got_some());
    return awaiting_request_ && !bytes_waiting;
  }

  void on_read(beast::error_code ec) {
    awaiting_request_ = false;
    ++requests_;
    head_sent_ = false;
    logged_ = false;
    route_.clear();
    extra_headers_.clear();
    request_started_ = std::chrono::steady_clock::now();
    request_id_ = request_id_of(ec || !parser_ ? std::string_view()
                                               : std::string_view(parser_->get()["x-request-id"].data(),
                                                                  parser_->get()["x-request-id"].size()));
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      respond(413, api_error_body(make_error(ErrorCode::kInvalidArgument, "the request body is larger than {} bytes",
                                             server_->options.max_body_bytes)),
              "application/json");
      return;
    }
    if (ec) return close();
    request_ = parser_->release();
    keep_alive_ = request_.keep_alive() && !server_->draining.load(std::memory_order_acquire);
    handle();
  }

  void handle();
  void handle_generation(ApiEndpoint endpoint);
  void handle_tokenize();
  void handle_detokenize();
  void handle_metrics();
  void error(const Status& st, std::string_view retry_after = {}) {
    respond(api_status_of(st), api_error_body(st), "application/json", retry_after);
  }

  // The route as /metrics labels it: a known path, or "other" (label values stay few).
  std::string_view route_label() const { return route_.empty() ? std::string_view("other") : route_; }

  // One line per request: who, what, how it ended, how long it took, never the prompt
  // unless --log-prompts. Probes and scrapes only at debug.
  void log_access(int status) {
    if (logged_) return;
    logged_ = true;
    const bool probe = is_probe_route(route_);
    if (!probe) server_->count_response(route_label(), status);
    if (!spdlog::should_log(probe ? spdlog::level::debug : spdlog::level::info)) return;
    const double took = seconds_since(request_started_);
    std::string line = fmt::format("access {} \"{} {}\" {} request_id={}", client_.empty() ? "-" : client_,
                                   std::string(http::to_string(request_.method())), std::string(request_.target()),
                                   status, request_id_);
    if (const auto g = generation_) {
      const int64_t ttft_us = g->ttft_us.load(std::memory_order_relaxed);
      line += fmt::format(" prompt_tokens={} output_tokens={} ttft_ms={} duration_ms={} finish={}", g->prompt_tokens,
                          g->output_tokens.load(std::memory_order_relaxed), millis(ttft_us < 0 ? -1 : ttft_us / 1e6),
                          millis(took), status == 499 || g->finish_reasons.empty() ? "-" : g->finish_reasons);
      if (server_->options.log_prompts) {
        line += " prompt=" + boost::json::serialize(boost::json::value(utf8_sanitize(request_.body().substr(0, 4096))));
      }
    } else {
      line += fmt::format(" duration_ms={}", millis(took));
    }
    if (probe) {
      HEARTH_LOG_DEBUG("{}", line);
    } else {
      HEARTH_LOG_INFO("{}", line);
    }
  }

  void respond(int status, std::string body, std::string_view content_type, std::string_view retry_after = {}) {
    if (status >= 400) ++server_->errors_total;
    log_access(status);
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::server, "hearth");
    res->set("x-request-id", request_id_);
    if (status != 204) res->set(http::field::content_type, content_type);
    for (const auto& [name, value] : extra_headers_) res->set(name, value);
    if (!retry_after.empty()) res->set(http::field::retry_after, retry_after);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    if (status == 204) res->erase(http::field::content_length);  // a 204 has no body, and says none
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->close();
      if (!self->keep_alive_) return self->after_watch([self] { self->linger(); });
      self->after_watch([self] { self->read_request(); });
    });
  }

  // Streams: a chunked text/event-stream response written piece by piece. The head goes
  // out with the first chunk, so a request that fails before producing anything (no
  // engine, say) still gets a real HTTP status.
  void begin_stream() {
    head_sent_ = true;
    std::string head =
        "HTTP/1.1 200 OK\r\nServer: hearth\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\nx-request-id: " +
        request_id_ + "\r\n";
    for (const auto& [name, value] : extra_headers_) head += name + ": " + value + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    outbox_.push_back(std::move(head));
    flush();
  }
  void queue_chunk(std::string bytes, bool last) {
    if (!head_sent_) begin_stream();
    if (!bytes.empty()) outbox_.push_back(fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes));
    if (last) {
      outbox_.push_back("0\r\n\r\n");
      stream_done_ = true;
      log_access(200);
    }
    flush();
  }
  void flush() {
    if (writing_ || outbox_.empty()) return;
    writing_ = true;
    auto data = std::make_shared<std::string>(std::move(outbox_.front()));
    outbox_.pop_front();
    asio::async_write(stream_, asio::buffer(*data), [self = shared_from_this(), data](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->client_gone();
      if (!self->outbox_.empty()) return self->flush();
      if (self->stream_done_) {
        self->stream_done_ = false;
        self->generation_.reset();
        if (!self->keep_alive_) return self->close();
        self->after_watch([self] { self->read_request(); });
      }
    });
  }

  // While a generation runs, a read that ends tells us the client went away. Bytes it
  // reads (a pipelined next request) are kept for the next read_request().
  void watch_disconnect() {
    watching_ = true;
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(1024), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (!ec) self->buffer_.commit(n);
      if (self->after_watch_) {  // the response is out: go on with the connection
        auto next = std::move(self->after_watch_);
        self->after_watch_ = nullptr;
        return next();
      }
      if (ec) return self->client_gone();
      if (self->generation_) self->watch_disconnect();
    });
  }
  // Runs `next` once no watch read is pending (cancelling it), so that two reads never
  // run on the socket at once.
  void after_watch(std::function<void()> next) {
    if (!watching_) return next();
    after_watch_ = std::move(next);
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }

  void client_gone() {
    if (auto g = generation_) {
      g->client_gone.store(true, std::memory_order_release);
      log_access(499);  // nginx's "client closed request"
    }
    close();
  }

  // Ends a connection politely: stop sending, then read and drop what the client still
  // sends (the rest of a refused body) for a moment, so that it sees our response
  // instead of a reset.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(5));
    buffer_.consume(buffer_.size());
    stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->close();
      self->linger_more();
    });
  }
  void linger_more() {
    stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->close();
      self->linger_more();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

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
  std::chrono::steady_clock::time_point request_started_;
  bool logged_ = false;            // this request's access-log line is written
  std::vector<std::pair<std::string, std::string>> extra_headers_;  // CORS, WWW-Authenticate

  friend struct FrontendServer::Impl;
};

void Session::handle() {
  const std::string target(request_.target());
  const std::string path = target.substr(0, target.find('?'));
  const auto method = request_.method();
  const FrontendOptions& o = server_->options;
  struct Route {
    std::string_view path;
    http::verb method;
  };
  static constexpr Route kRoutes[] = {
      {"/v1/completions", http::verb::post}, {"/v1/chat/completions", http::verb::post},
      {"/v1/models", http::verb::get},       {"/health", http::verb::get},
      {"/ready", http::verb::get},           {"/tokenize", http::verb::post},
      {"/detokenize", http::verb::post},     {"/metrics", http::verb::get},
  };
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (r.path == path) route = &r;
  }
  if (route == nullptr) return error(make_error(ErrorCode::kNotFound, "no route {}", path));
  route_ = route->path;
  // CORS: a browser's request from an allowed origin gets it echoed (with what it may
  // read); a preflight gets the methods and headers it asked about.
  const auto origin = request_[http::field::origin];
  const bool origin_allowed =
      !origin.empty() && std::any_of(o.cors_origins.begin(), o.cors_origins.end(), [&](const std::string& allowed) {
        return allowed == "*" || allowed == origin;
      });
  if (origin_allowed) {
    const bool any = std::find(o.cors_origins.begin(), o.cors_origins.end(), "*") != o.cors_origins.end();
    extra_headers_.emplace_back("Access-Control-Allow-Origin", any ? "*" : std::string(origin));
    extra_headers_.emplace_back("Vary", "Origin");
    extra_headers_.emplace_back("Access-Control-Expose-Headers", "x-request-id, retry-after");
  }
  if (method == http::verb::options) {
    if (!origin_allowed) {
      const Status refused =
          origin.empty() ? make_error(ErrorCode::kInvalidArgument, "OPTIONS is for CORS preflights, which send an Origin")
                         : make_error(ErrorCode::kInvalidArgument,
                                      "origin {} may not call this server (hearth-frontend --cors-origin allows origins)",
                                      std::string(origin));
      return respond(403, api_error_body(refused), "application/json");
    }
    extra_headers_.emplace_back("Access-Control-Allow-Methods",
                                fmt::format("{}, OPTIONS", std::string(http::to_string(route->method))));
    const auto asked = request_["Access-Control-Request-Headers"];
    extra_headers_.emplace_back("Access-Control-Allow-Headers",
                                asked.empty() ? std::string("authorization, content-type, x-request-id")
                                              : std::string(asked));
    extra_headers_.emplace_back("Access-Control-Max-Age", "600");
    return respond(204, "", "");
  }
  if (!o.api_keys.empty() && (is_api_route(path) || (path == "/metrics" && o.metrics_auth))) {
    const auto auth = request_[http::field::authorization];
    const bool bearer = auth.size() > 7 && beast::iequals(auth.substr(0, 7), "Bearer ");
    const std::string_view key = bearer ? std::string_view(auth.data() + 7, auth.size() - 7) : std::string_view();
    if (!bearer || !key_matches(key, o.api_keys)) {
      extra_headers_.emplace_back("WWW-Authenticate", "Bearer");
      const std::string message = bearer ? "Incorrect API key provided."
                                         : "No API key provided: send it as the header Authorization: Bearer KEY.";
      return respond(401,
                     boost::json::serialize(boost::json::object{
                         {"error", {{"message", message},
                                    {"type", "invalid_request_error"},
                                    {"param", nullptr},
                                    {"code", "invalid_api_key"}}}}),
                     "application/json");
    }
  }
  if (route->method != method) {
    auto body = api_error_body(make_error(ErrorCode::kInvalidArgument, "{} does not accept {}", path,
                                          std::string(http::to_string(method))));
    return respond(405, std::move(body), "application/json");
  }
  if (path == "/v1/completions") return handle_generation(ApiEndpoint::kCompletions);
  if (path == "/v1/chat/completions") return handle_generation(ApiEndpoint::kChatCompletions);
  if (path == "/health") return respond(200, R"({"status":"ok"})", "application/json");
  if (path == "/ready") {
    if (server_->draining.load()) {
      return error(make_error(ErrorCode::kUnavailable, "this frontend is shutting down"), "1");
    }
    if (server_->engine_ready()) return respond(200, R"({"status":"ready"})", "application/json");
    return error(make_error(ErrorCode::kUnavailable, "no engine is serving this instance"), "1");
  }
  if (path == "/v1/models") {
    boost::json::array data;
    for (const std::string& name : server_->model_names) {
      data.push_back(boost::json::object{{"id", name},
                                         {"object", "model"},
                                         {"created", unix_seconds()},
                                         {"owned_by", "hearth"},
                                         {"root", server_->model_names.front()},
                                         {"max_model_len", server_->context}});
    }
    return respond(200, boost::json::serialize(boost::json::object{{"object", "list"}, {"data", std::move(data)}}),
                   "application/json");
  }
  if (path == "/tokenize") return handle_tokenize();
  if (path == "/detokenize") return handle_detokenize();
  return handle_metrics();
}

void Session::handle_tokenize() {
  auto doc = json_parse(request_.body(), "the request body", 16);
  if (!doc.is_ok() || !doc->is_object()) {
    return error(doc.is_ok() ? make_error(ErrorCode::kInvalidArgument, "the body must be a JSON object") : doc.status());
  }
  const auto& o = doc->as_object();
  auto prompt = json_opt_string(o, "prompt");
  auto special = json_opt_bool(o, "add_special_tokens");
  if (!prompt.is_ok()) return error(prompt.status());
  if (!special.is_ok()) return error(special.status());
  if (!*prompt) return error(make_error(ErrorCode::kInvalidArgument, "prompt: a string is required"));
  auto ids = server_->tokenizer->encode(**prompt, EncodeOptions{special->value_or(true), true});
  if (!ids.is_ok()) return error(ids.status());
  boost::json::array tokens;
  for (TokenId id : *ids) tokens.push_back(id);
  const auto count = tokens.size();
  respond(200,
          boost::json::serialize(boost::json::object{
              {"tokens", std::move(tokens)}, {"count", count}, {"max_model_len", server_->context}}),
          "application/json");
}

void Session::handle_detokenize() {
  auto doc = json_parse(request_.body(), "the request body", 16);
  if (!doc.is_ok() || !doc->is_object()) {
    return error(doc.is_ok() ? make_error(ErrorCode::kInvalidArgument, "the body must be a JSON object") : doc.status());
  }
  const auto* tokens = json_find_array(doc->as_object(), "tokens");
  if (tokens == nullptr) return error(make_error(ErrorCode::kInvalidArgument, "tokens: an array of token ids is required"));
  std::vector<TokenId> ids;
  for (const auto& v : *tokens) {
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() >= server_->tokenizer->vocab_size()) {
      return error(make_error(ErrorCode::kInvalidArgument, "tokens: every entry must be a token id in 0..{}",
                              server_->tokenizer->vocab_size() - 1));
    }
    ids.push_back(static_cast<TokenId>(v.as_int64()));
  }
  respond(200, boost::json::serialize(boost::json::object{{"prompt", server_->tokenizer->decode(ids)}}),
          "application/json");
}

// The tensor-parallel group of the instance, read from its tp segment at each scrape
// (rank 0 may have replaced it since the last one); nothing when there is none.
void render_tp_metrics(std::string& out, const FrontendOptions& o) {
  const auto dir = o.shm_dir.empty() ? shm_dir_default() : o.shm_dir;
  auto tp = TpSegment::attach(segment_path(dir, o.instance, "tp"), /*writable=*/false);
  if (!tp.is_ok()) return;
  const TpHeader& h = tp->header();
  const uint64_t epoch = h.epoch.load(std::memory_order_acquire);
  const bool up = h.group_state.load(std::memory_order_acquire) == static_cast<uint32_t>(TpGroupState::kActive);
  render_metric(out, "hearth_tp_ranks", "gauge", "Ranks of the tensor-parallel engine group", h.tp_size);
  render_metric(out, "hearth_tp_group_up", "gauge", "1 while every rank of the group is in its current epoch",
                up ? 1 : 0);
  render_metric(out, "hearth_tp_group_epoch", "gauge", "Epoch of the engine group (bumped by every formation)", epoch);
  render_metric(out, "hearth_tp_group_restarts_total", "counter",
                "Times the engine group formed again after it broke or rank 0 restarted", h.restarts.load());
  struct Family {
    const char* name;
    const char* type;
    const char* help;
  };
  const Family families[] = {
      {"hearth_tp_rank_up", "gauge", "1 when the rank runs and has joined the group's current epoch"},
      {"hearth_tp_rank_steps_total", "counter", "Forward steps the rank ran"},
      {"hearth_tp_rank_step_seconds_total", "counter", "Time the rank spent in forward steps, collectives included"},
      {"hearth_tp_rank_last_step_seconds", "gauge", "The rank's latest forward step"},
  };
  for (const Family& f : families) {
    render_metric_header(out, f.name, f.type, f.help);
    for (int r = 0; r < tp->tp_size(); ++r) {
      const TpRankEntry& e = tp->rank(r);
      double v = 0;
      if (f.name == families[0].name) {
        const int32_t pid = e.pid.load(std::memory_order_relaxed);
        v = up && e.epoch.load() == epoch && e.state.load() == static_cast<uint32_t>(TpRankState::kJoined) &&
                    pid != 0 && process_alive(pid, e.start_time.load())
                ? 1
                : 0;
      } else if (f.name == families[1].name) {
        v = static_cast<double>(e.steps.load(std::memory_order_relaxed));
      } else if (f.name == families[2].name) {
        v = static_cast<double>(e.step_ns.load(std::memory_order_relaxed)) / 1e9;
      } else {
        v = static_cast<double>(e.last_step_ns.load(std::memory_order_relaxed)) / 1e9;
      }
      out += fmt::format("{}{{rank=\"{}\"}} {}\n", f.name, r, v);
    }
  }
}

// Names follow vLLM's where the meaning is the same (prompt and generation tokens, TTFT,
// time per output token, inter-token latency, end-to-end and queue time, running and
// waiting requests, KV-cache usage, preemptions, finished requests by reason), with a
// model_name label; the rest are hearth's own.
void Session::handle_metrics() {
  FrontendServer::Impl& s = *server_;
  const BrokerHeader& h = s.client->broker().header();
  const std::string& m = s.model_label;
  std::string out;
  render_metric_header(out, "hearth_http_requests_total", "counter",
                       "HTTP requests answered, by route and status (probes and scrapes not counted)");
  {
    std::lock_guard lock(s.responses_mu);
    for (const auto& [key, n] : s.responses) {
      out += fmt::format("hearth_http_requests_total{{{},code=\"{}\"}} {}\n", metric_label("route", key.first),
                         key.second, n);
    }
  }
  render_metric(out, "hearth_http_errors_total", "counter", "HTTP requests answered with an error status",
                static_cast<double>(s.errors_total.load()));
  render_metric_header(out, "hearth_requests_rejected_total", "counter",
                       "Generation requests turned away before they ran, by reason");
  const std::pair<const char*, const std::atomic<uint64_t>*> rejected[] = {
      {"queue_full", &s.rejected_queue_full},
      {"queue_timeout", &s.rejected_queue_timeout},
      {"engine_down", &s.rejected_engine_down},
      {"connections", &s.rejected_connections}};
  for (const auto& [reason, n] : rejected) {
    out += fmt::format("hearth_requests_rejected_total{{reason=\"{}\"}} {}\n", reason, n->load());
  }
  render_metric(out, "hearth_prompt_tokens_total", "counter", "Prompt tokens prefilled (once per choice)",
                static_cast<double>(s.prompt_tokens_total.load()), m);
  render_metric(out, "hearth_generation_tokens_total", "counter", "Tokens generated and sent to clients",
                static_cast<double>(s.tokens_total.load()), m);
  render_metric_header(out, "hearth_request_success_total", "counter",
                       "Choices that finished, by finish reason (abort: the client left)");
  const char* reasons[] = {"stop", "length", "tool_calls", "abort"};
  for (size_t i = 0; i < std::size(reasons); ++i) {
    out += fmt::format("hearth_request_success_total{{{},finished_reason=\"{}\"}} {}\n", m, reasons[i],
                       s.finished_by_reason[i].load());
  }
  size_t queued = 0;
  {
    std::lock_guard lock(s.mutex);
    queued = s.queue.size();
  }
  render_metric(out, "hearth_num_requests_running", "gauge", "Sequences the engine runs",
                static_cast<double>(h.stat_running.load()), m);
  render_metric(out, "hearth_num_requests_waiting", "gauge",
                "Sequences waiting for the engine, and requests in this frontend's queue waiting for a slot",
                static_cast<double>(h.stat_waiting.load() + queued), m);
  render_metric(out, "hearth_frontend_queue_requests", "gauge", "Requests in this frontend's queue waiting for a slot",
                static_cast<double>(queued));
  const double blocks = h.stat_kv_blocks_total.load();
  render_metric(out, "hearth_kv_cache_usage_perc", "gauge", "KV-cache usage, 0 to 1 (1: every block in use)",
                blocks > 0 ? h.stat_kv_blocks_used.load() / blocks : 0.0, m);
  render_metric(out, "hearth_num_preemptions_total", "counter",
                "Running sequences sent back to waiting for lack of KV-cache blocks",
                static_cast<double>(h.stat_preemptions.load()), m);
  render_metric(out, "hearth_prefix_cache_queries_total", "counter",
                "Prompt tokens looked up in the prefix cache (each request's first admission)",
                static_cast<double>(h.stat_prefix_queries.load()), m);
  render_metric(out, "hearth_prefix_cache_hits_total", "counter",
                "Prompt tokens found in the prefix cache: hits / queries is the hit ratio",
                static_cast<double>(h.stat_prefix_hits.load()), m);
  render_metric(out, "hearth_kv_adopted_total", "counter",
                "Requests a restarted engine resumed from the resident KV cache, without computing them again",
                static_cast<double>(h.stat_kv_adopted.load()), m);
  render_metric(out, "hearth_kv_adopt_rejected_total", "counter",
                "Resumed requests whose adopted KV cache failed its check and were computed again",
                static_cast<double>(h.stat_kv_adopt_rejected.load()), m);
  render_metric(out, "hearth_engine_up", "gauge", "1 when an engine heartbeat is fresh", s.engine_ready() ? 1 : 0);
  render_metric(out, "hearth_engine_running", "gauge", "Sequences the engine runs", h.stat_running.load());
  render_metric(out, "hearth_engine_waiting", "gauge", "Sequences waiting for the engine", h.stat_waiting.load());
  render_metric(out, "hearth_kv_blocks_used", "gauge", "KV cache blocks in use", h.stat_kv_blocks_used.load());
  render_metric(out, "hearth_kv_blocks_capacity", "gauge", "KV cache blocks", h.stat_kv_blocks_total.load());
  render_metric(out, "hearth_engine_steps_total", "counter", "Engine steps", static_cast<double>(h.stat_steps.load()));
  render_metric(out, "hearth_engine_cancelled_total", "counter",
                "Sequences the engine stopped early: cancelled, or their frontend was gone",
                static_cast<double>(h.stat_cancelled.load()));
  render_metric(out, "hearth_engine_slots_reclaimed_total", "counter",
                "Request slots of gone frontends the engine returned to the free list",
                static_cast<double>(h.stat_reclaimed.load()));
  render_tp_metrics(out, s.options);
  s.time_to_first_token.render(out, "hearth_time_to_first_token_seconds",
                               "From a generation request's arrival to its first token", m);
  s.time_per_output_token.render(out, "hearth_time_per_output_token_seconds",
                                 "Per request: from its first token to its last, over the tokens after the first", m);
  s.inter_token_latency.render(out, "hearth_inter_token_latency_seconds", "Between successive tokens of a choice", m);
  s.request_duration.render(out, "hearth_e2e_request_latency_seconds",
                            "From a generation request's arrival to its last token, for requests that completed", m);
  s.queue_time.render(out, "hearth_request_queue_time_seconds",
                      "From a generation request's arrival until the engine admitted it (the frontend's queue "
                      "included)",
                      m);
  render_metric(out, "hearth_build_info", "gauge", "The build serving: version and source commit", 1,
                metric_label("version", hearth_version()) + "," + metric_label("commit", hearth_commit()));
  render_process_metrics(out);
  respond(200, std::move(out), "text/plain; version=0.0.4; charset=utf-8");
}

void Session::handle_generation(ApiEndpoint endpoint) {
  FrontendServer::Impl& s = *server_;
  auto parsed = api_parse_request(request_.body(), endpoint, {.lenient_fields = s.options.lenient_fields});
  if (!parsed.is_ok()) return error(parsed.status());
  ApiRequest& req = parsed.value();
  for (const std::string& name : req.ignored_fields) s.note_ignored_field(name);
  if (!req.model.empty() && std::find(s.model_names.begin(), s.model_names.end(), req.model) == s.model_names.end()) {
    return error(make_error(ErrorCode::kNotFound, "model: \"{}\" is not served here (this server has \"{}\")", req.model,
                            fmt::join(s.model_names, "\", \"")));
  }
  if (s.engine_known_down()) {
    ++s.rejected_engine_down;
    return error(make_error(ErrorCode::kUnavailable, "no engine has served this instance for more than {} ms; try again",
                            s.options.engine_wait.count()),
                 "1");
  }
  auto built = s.prompts->build(req);
  if (!built.is_ok()) return error(built.status());
  std::vector<TokenId>& prompt = built->ids;
  if (prompt.empty()) return error(make_error(ErrorCode::kInvalidArgument, "prompt: the prompt is empty"));
  if (static_cast<int32_t>(prompt.size()) >= s.context) {
    return error(make_error(ErrorCode::kInvalidArgument,
                            "prompt: this model's context holds {} tokens; the prompt has {} (it needs room for at "
                            "least one more)",
                            s.context, prompt.size()));
  }
  const int32_t room = s.context - static_cast<int32_t>(prompt.size());
  int32_t max_tokens = req.max_tokens.value_or(endpoint == ApiEndpoint::kCompletions ? 16 : room);
  if (max_tokens > room) {
    return error(make_error(ErrorCode::kInvalidArgument,
                            "max_tokens: {} tokens of output do not fit: the context holds {} and the prompt takes {}",
                            max_tokens, s.context, prompt.size()));
  }
  if (req.min_tokens > max_tokens) {
    return error(make_error(ErrorCode::kInvalidArgument, "min_tokens ({}) must not exceed max_tokens ({})",
                            req.min_tokens, max_tokens));
  }
  const int32_t vocab = s.tokenizer->vocab_size();
  for (const LogitBias& b : req.logit_bias) {
    if (b.id >= vocab) {
      return error(make_error(ErrorCode::kInvalidArgument, "logit_bias: token {} is outside the vocabulary (0..{})",
                              b.id, vocab - 1));
    }
  }
  SubmitRequest sub;
  sub.stop_ids.assign(s.tokenizer->stop_ids().begin(), s.tokenizer->stop_ids().end());
  for (int32_t id : req.stop_token_ids) {
    if (id >= vocab) {
      return error(make_error(ErrorCode::kInvalidArgument, "stop_token_ids: token {} is outside the vocabulary (0..{})",
                              id, vocab - 1));
    }
    if (std::find(sub.stop_ids.begin(), sub.stop_ids.end(), id) == sub.stop_ids.end()) sub.stop_ids.push_back(id);
  }
  if (sub.stop_ids.size() > static_cast<size_t>(kMaxStopIds)) {
    return error(make_error(ErrorCode::kInvalidArgument,
                            "stop_token_ids: with the model's own, {} stop ids; at most {} are supported",
                            sub.stop_ids.size(), kMaxStopIds));
  }
  auto gbnf = request_grammar(req, s.prompts->tool_format(), s.single_bytes, s.client->grammar_capacity());
  if (!gbnf.is_ok()) return error(gbnf.status());

  const int32_t samples = req.best_of.value_or(req.n);
  if (static_cast<uint32_t>(samples) > s.client->broker().n_slots()) {
    return error(make_error(ErrorCode::kInvalidArgument, "{}: {} choices need as many request slots; this server has {}",
                            req.best_of ? "best_of" : "n", samples, s.client->broker().n_slots()));
  }
  auto g = std::make_shared<Generation>();
  g->request = req;
  g->head = {random_id(endpoint == ApiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-"), unix_seconds(), s.model_id,
             s.system_fingerprint};
  g->tool_format = req.tool_choice == ApiToolChoice::kNone ? ToolCallFormat::kNone : s.prompts->tool_format();
  g->prompt_tokens = static_cast<int32_t>(prompt.size());
  g->echo_text = std::move(built->echo_text);
  g->session = weak_from_this();
  g->started = request_started_;
  sub.prompt = std::move(prompt);
  sub.max_tokens = max_tokens;
  sub.ignore_stop = req.ignore_eos;
  sub.top_logprobs = std::max(0, req.logprobs);
  sub.min_tokens = req.min_tokens;
  sub.logit_bias = req.logit_bias;
  sub.grammar = std::move(gbnf).value();
  sub.client_request_id = request_id_;
  g->base_seed = req.seed.value_or(std::random_device{}());
  g->pending = std::move(sub);
  g->samples_left = samples;
  // Slots now when none is free-for-all ahead of it; else (or when they are all busy) the
  // queue, first come first served, while it has room.
  Status refused;
  {
    std::lock_guard lock(s.mutex);
    bool started = false;
    if (s.queue.empty()) {
      auto claimed = s.claim_slots(*g);
      if (!claimed.is_ok()) {
        refused = claimed.status();
      } else {
        started = *claimed;
      }
    }
    if (started) {
      s.active.push_back(g);
    } else if (refused.is_ok() && static_cast<int>(s.queue.size()) < s.options.max_queue) {
      s.queue.push_back(g);
    } else {
      if (refused.is_ok()) {
        ++s.rejected_queue_full;
        refused = s.options.max_queue == 0
                      ? make_error(ErrorCode::kResourceExhausted, "all {} request slots are busy; try again",
                                   s.client->broker().n_slots())
                      : make_error(ErrorCode::kResourceExhausted,
                                   "all {} request slots are busy and {} requests wait for them; try again",
                                   s.client->broker().n_slots(), s.queue.size());
      }
      g->failed = true;
      if (s.give_up(*g)) s.active.push_back(g);
    }
  }
  if (!refused.is_ok()) {
    return error(refused, refused.code() == ErrorCode::kResourceExhausted ? "1" : "");
  }
  generation_ = g;
  watch_disconnect();
}

Result<bool> FrontendServer::Impl::claim_slots(Generation& g) {
  const int32_t samples = g.request.best_of.value_or(g.request.n);
  while (g.samples_left > 0) {
    g.pending.sampling = g.request.sampling;
    g.pending.sampling.seed = g.base_seed + static_cast<uint64_t>(samples - g.samples_left);
    uint32_t generation = 0;
    auto slot = client->submit(g.pending, &generation);
    if (!slot.is_ok()) {
      if (slot.status().code() == ErrorCode::kResourceExhausted) return false;
      return slot.status();
    }
    HEARTH_TEST_POINT("frontend.submitted");  // queued; nothing follows it yet
    Generation::Choice c;
    c.slot = *slot;
    c.generation = generation;
    c.text.emplace(*tokenizer, g.request.stop, /*at_start=*/false);
    if (g.tool_format != ToolCallFormat::kNone) c.tools.emplace(g.tool_format);
    g.choices.push_back(std::move(c));
    --g.samples_left;
  }
  g.submitted = std::chrono::steady_clock::now();
  g.pending = SubmitRequest();
  return true;
}

// The queue's head gets slots as they free up; what waited too long, lost its client or
// its engine ends here.
void FrontendServer::Impl::pump_queue() {
  std::vector<std::pair<std::shared_ptr<Generation>, Status>> ended;
  {
    std::lock_guard lock(mutex);
    const auto now = std::chrono::steady_clock::now();
    bool slots_busy = false;
    for (auto it = queue.begin(); it != queue.end();) {
      std::shared_ptr<Generation> g = *it;
      Status why;
      if (g->client_gone.load(std::memory_order_acquire)) {
        why = make_error(ErrorCode::kUnavailable, "the client left");
      } else if (now - g->started > options.queue_timeout) {
        ++rejected_queue_timeout;
        why = make_error(ErrorCode::kResourceExhausted,
                         "all {} request slots stayed busy for the {} ms this request may wait; try again",
                         client->broker().n_slots(), options.queue_timeout.count());
      } else if (engine_known_down()) {
        ++rejected_engine_down;
        why = make_error(ErrorCode::kUnavailable, "no engine has served this instance for more than {} ms; try again",
                         options.engine_wait.count());
      } else if (drain_expired()) {
        why = make_error(ErrorCode::kUnavailable, "this frontend shut down before the request started; try again");
      } else if (slots_busy) {
        ++it;  // waits behind the head (the rest is only checked for what has ended)
        continue;
      } else {
        auto claimed = claim_slots(*g);
        if (claimed.is_ok() && !*claimed) {
          slots_busy = true;
          ++it;
          continue;
        }
        if (claimed.is_ok()) {
          it = queue.erase(it);
          active.push_back(std::move(g));
          continue;
        }
        why = claimed.status();
      }
      it = queue.erase(it);
      g->failed = true;
      if (give_up(*g)) active.push_back(g);
      ended.emplace_back(std::move(g), std::move(why));
    }
  }
  for (auto& [g, why] : ended) {
    auto session = g->session.lock();
    if (!session || g->client_gone.load(std::memory_order_acquire)) continue;
    session->post_response(api_status_of(why), api_error_body(why),
                           why.code() == ErrorCode::kResourceExhausted || why.code() == ErrorCode::kUnavailable ? "1"
                                                                                                                 : "");
  }
}

// ---------------------------------------------------------------- pump

namespace {

// The text of a token for logprobs (its bytes, shown lossily when not valid UTF-8).
ApiTokenLogprob token_logprob(const Tokenizer& t, const ProducedToken& p, int32_t top) {
  ApiTokenLogprob out;
  const std::string_view bytes = t.token_bytes(p.id);
  out.token = utf8_sanitize(bytes);
  out.bytes.assign(bytes.begin(), bytes.end());
  out.logprob = p.logprob;
  for (int32_t k = 0; k < top; ++k) {
    const std::string_view b = t.token_bytes(p.top_ids[k]);
    out.top.emplace_back(utf8_sanitize(b), p.top_logprobs[k]);
    out.top_bytes.emplace_back(b.begin(), b.end());
  }
  return out;
}

std::string finish_reason_of(FinishReason f) { return f == FinishReason::kLength ? "length" : "stop"; }

}  // namespace

void FrontendServer::Impl::advance(Generation& g) {
  const bool gone = g.client_gone.load(std::memory_order_acquire);
  auto session = g.session.lock();
  const bool stream = g.request.stream;
  const bool echo = g.request.echo && g.request.endpoint == ApiEndpoint::kCompletions;
  std::string out;  // stream bytes produced this round
  bool all_done = true;
  Status failure;
  auto usage_now = [&] {
    ApiUsage u;
    u.prompt_tokens = g.prompt_tokens;
    u.cached_tokens = g.cached_tokens;
    for (const auto& c : g.choices) u.completion_tokens += c.consumed;
    return u;
  };
  // One piece of a choice's text (a token's, or what was held at its end): through the
  // tool-call parser when there is one, then one stream chunk for it (OpenAI and vLLM
  // send a chunk per token), and one for the calls it completed.
  auto emit = [&](Generation::Choice& c, int32_t index, std::string piece, std::vector<ApiTokenLogprob> logprobs) {
    std::vector<ToolCall> calls;
    std::string content = c.tools ? c.tools->push(piece, calls) : std::move(piece);
    c.content += content;
    for (ToolCall& call : calls) c.calls.push_back({tool_call_id(g.tool_format), std::move(call.name), std::move(call.arguments)});
    if (!stream) {
      for (auto& l : logprobs) c.logprobs.push_back(std::move(l));
      return;
    }
    if (gone || failure.code() != ErrorCode::kOk) return;
    if (!content.empty() || !logprobs.empty()) {
      const auto base = static_cast<int32_t>((echo ? g.echo_text.size() : 0) + c.content.size() - content.size());
      if (echo && !c.announced) content = g.echo_text + content;
      const ApiUsage usage = usage_now();
      out += api_stream_chunk(g.request, g.head, index, content, "", logprobs, !c.announced, base,
                              g.request.continuous_usage_stats ? &usage : nullptr);
      c.announced = true;
    }
    if (c.calls.size() > c.calls_sent) {
      const std::vector<ApiToolCall> fresh(c.calls.begin() + static_cast<long>(c.calls_sent), c.calls.end());
      out += api_stream_tool_calls_chunk(g.request, g.head, index, fresh, static_cast<int32_t>(c.calls_sent), !c.announced);
      c.announced = true;
      c.calls_sent = c.calls.size();
    }
  };
  // The slot is not ours any more: an engine that judged this frontend gone (its
  // heartbeat stalled past hearth-engine's bound) freed it. Never touch it again.
  auto taken = [&](Generation::Choice& c) {
    HEARTH_LOG_WARN("slot {} was taken from this frontend while its request ran", c.slot);
    c.slot_held = false;
    c.done = true;
    if (failure.code() == ErrorCode::kOk) {
      failure = make_error(ErrorCode::kUnavailable, "the engine dropped this request (it judged this frontend gone); try again");
    }
  };
  std::vector<ProducedToken> fresh_tokens;
  for (size_t i = 0; i < g.choices.size(); ++i) {
    Generation::Choice& c = g.choices[i];
    const auto index = static_cast<int32_t>(i);
    if (!c.slot_held) continue;
    const SlotProgress p = client->progress(c.slot);
    if (!p.held_by(c.generation)) {
      taken(c);
      continue;
    }
    // This round's tokens (and a terminal slot's finish and error, read with `p`) are
    // copied, then the claim checked again: a slot freed and claimed anew while they were
    // read may hold another request's tokens, or a new claim's cleared fields.
    fresh_tokens.clear();
    for (int32_t k = c.consumed; k < p.n_produced && !c.done; ++k) fresh_tokens.push_back(client->token(c.slot, k));
    std::atomic_thread_fence(std::memory_order_acquire);  // the copies before the claim's second look
    if ((!fresh_tokens.empty() || p.terminal()) && !client->holds(c.slot, c.generation)) {
      taken(c);
      continue;
    }
    if (gone && !p.terminal() && !c.done) {
      client->cancel(c.slot);
      c.done = true;
    }
    if (!g.queue_time_seen && p.queue_ns != 0) {
      g.queue_time_seen = true;
      queue_time.observe(std::chrono::duration<double>(g.submitted - g.started).count() +
                         static_cast<double>(p.queue_ns) * 1e-9);
    }
    g.cached_tokens = std::max(g.cached_tokens, p.cached_tokens);
    const int32_t consumed_before = c.consumed;
    for (size_t k = 0; k < fresh_tokens.size() && !c.done; ++k) {
      const ProducedToken& t = fresh_tokens[k];
      ++c.consumed;
      if (!g.first_token_seen) {
        g.first_token_seen = true;
        g.first_token_at = std::chrono::steady_clock::now();
        const double ttft = std::chrono::duration<double>(g.first_token_at - g.started).count();
        time_to_first_token.observe(ttft);
        g.ttft_us.store(static_cast<int64_t>(ttft * 1e6), std::memory_order_relaxed);
        prompt_tokens_total.fetch_add(static_cast<uint64_t>(g.prompt_tokens) * g.choices.size(),
                                      std::memory_order_relaxed);
      }
      std::string piece = c.text->push(t.id);
      ++tokens_total;
      g.output_tokens.fetch_add(1, std::memory_order_relaxed);
      c.logprob_sum += t.logprob;
      std::vector<ApiTokenLogprob> logprobs;
      if (g.request.logprobs >= 0) logprobs.push_back(token_logprob(*tokenizer, t, g.request.logprobs));
      if (c.text->stopped()) {  // a stop string: the rest of this choice is not wanted
        client->cancel(c.slot);
        c.done = true;
        c.finish_reason = "stop";
      }
      emit(c, index, std::move(piece), std::move(logprobs));
    }
    // The gap since this choice's previous tokens, shared by the tokens of this round (the
    // pump sees a step's tokens together).
    if (const int32_t fresh = c.consumed - consumed_before; fresh > 0) {
      const auto now = std::chrono::steady_clock::now();
      if (consumed_before > 0) {
        const double gap = std::chrono::duration<double>(now - c.last_token).count() / fresh;
        for (int32_t k = 0; k < fresh; ++k) inter_token_latency.observe(gap);
      }
      c.last_token = now;
    }
    if (p.terminal()) {
      if (p.state == SlotState::kFailed) failure = Status(p.error_code, p.error);
      if (p.state == SlotState::kCancelled && !c.done && !gone && !g.failed && failure.code() == ErrorCode::kOk) {
        // Not asked for: the engine dropped it, judging this frontend gone (see above).
        failure = make_error(ErrorCode::kUnavailable, "the engine dropped this request (it judged this frontend gone); try again");
      }
      if (!c.done) {
        c.finish_reason = finish_reason_of(p.finish);
        c.done = true;
        emit(c, index, c.text->finish(), {});
      }
      client->release_from(c.slot, p.state);
      c.slot_held = false;
    } else {
      all_done = false;
    }
    if (c.done && !c.finish_sent && !c.finish_reason.empty()) {
      if (c.tools) {  // what the parser held: content, or calls the output ended in
        std::vector<ToolCall> calls;
        std::string rest = c.tools->finish(calls);
        c.tools.reset();
        for (ToolCall& call : calls) c.calls.push_back({tool_call_id(g.tool_format), std::move(call.name), std::move(call.arguments)});
        emit(c, index, std::move(rest), {});
      }
      if (!c.calls.empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
      if (stream && !gone && failure.code() == ErrorCode::kOk) {
        const ApiUsage usage = usage_now();
        const ApiUsage* with = g.request.continuous_usage_stats ? &usage : nullptr;
        if (!c.announced) {
          out += api_stream_chunk(g.request, g.head, index, echo ? g.echo_text : "", "", {}, true, 0, with);
          c.announced = true;
        }
        out += api_stream_chunk(g.request, g.head, index, "", c.finish_reason, {}, false, 0, with);
      }
      c.finish_sent = true;
      if (!gone) count_finish(c.finish_reason);
    }
  }
  // Ends the response with an error: an HTTP status while nothing was streamed yet,
  // else an error event (after the text that was ready) and [DONE].
  auto end_with_error = [&](const Status& st, std::string_view retry_after) {
    if (!session || gone) return;
    if (stream && g.stream_started) {
      session->post_stream(std::move(out) + api_stream_error(st) + std::string(kApiStreamDone), true);
    } else {
      session->post_response(api_status_of(st), api_error_body(st), retry_after);
    }
    out.clear();
  };
  auto cancel_all = [&] { give_up(g); };
  if (!out.empty()) g.stream_started = true;
  // A request whose engine is gone for too long ends with 503.
  // It waits --engine-wait from the later of its arrival and the engine's going away,
  // so a restarted engine in time resumes it and the client sees only a pause.
  const auto now = std::chrono::steady_clock::now();
  if (!all_done && !g.failed && engine_known_down(now) &&
      now - g.started > options.engine_wait) {
    cancel_all();
    end_with_error(make_error(ErrorCode::kUnavailable, "no engine answered within {} ms; try again",
                              options.engine_wait.count()),
                   "1");
    g.failed = true;
  }
  // A draining frontend whose deadline passed ends what is left, with an error the
  // client can retry on (another frontend, or this one's successor, is taking requests).
  if (!all_done && !g.failed && drain_expired()) {
    cancel_all();
    end_with_error(make_error(ErrorCode::kUnavailable, "this frontend shut down before the request finished; try again"),
                   "1");
    g.failed = true;
  }
  if (stream && !gone && !out.empty() && session && !g.failed) {
    session->post_stream(std::move(out), false);
    out.clear();
    HEARTH_TEST_POINT("frontend.streamed");  // part of a stream handed to the connection
  }
  if (!all_done) return;
  g.finished = true;
  if (gone && !g.failed) {
    for (size_t i = 0; i < g.choices.size(); ++i) count_finish("abort");
  }
  if (gone || g.failed || !session) return;
  if (failure.code() != ErrorCode::kOk) return end_with_error(failure, "");
  request_duration.observe(seconds_since(g.started));
  int32_t longest = 0;
  for (const auto& c : g.choices) {
    longest = std::max(longest, c.consumed);
    if (!g.finish_reasons.empty()) g.finish_reasons += ',';
    g.finish_reasons += c.finish_reason;
  }
  if (longest > 1) {
    time_per_output_token.observe(seconds_since(g.first_token_at) / (longest - 1));
  }
  const ApiUsage usage = usage_now();
  if (stream) {
    std::string tail;
    if (g.request.include_usage) tail += api_stream_usage_chunk(g.request, g.head, usage);
    tail += kApiStreamDone;
    session->post_stream(std::move(tail), true);
    return;
  }
  // best_of: the n choices with the highest mean log-probability per token.
  std::vector<size_t> order(g.choices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (g.choices.size() > static_cast<size_t>(g.request.n)) {
    auto mean = [&](size_t i) { return g.choices[i].logprob_sum / std::max(1, g.choices[i].consumed); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mean(a) > mean(b); });
    order.resize(static_cast<size_t>(g.request.n));
  }
  std::vector<ApiChoice> choices;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& c = g.choices[order[k]];
    ApiChoice a;
    a.index = static_cast<int32_t>(k);
    a.text = echo ? g.echo_text + c.content : c.content;
    a.text_offset_base = echo ? static_cast<int32_t>(g.echo_text.size()) : 0;
    a.finish_reason = c.finish_reason;
    a.logprobs = c.logprobs;
    a.tool_calls = c.calls;
    choices.push_back(std::move(a));
  }
  session->post_response(200, api_response_body(g.request, g.head, choices, usage));
}

void FrontendServer::Impl::pump_loop() {
  while (!stopping.load(std::memory_order_acquire)) {
    const auto round = std::chrono::steady_clock::now();
    pump_beat_ns.store(round.time_since_epoch().count(), std::memory_order_relaxed);
    const bool up = probe_engine();
    engine_up.store(up, std::memory_order_relaxed);
    if (up) {
      engine_down_since_ns.store(0, std::memory_order_relaxed);
    } else if (engine_down_since_ns.load(std::memory_order_relaxed) == 0) {
      engine_down_since_ns.store(std::max<int64_t>(1, round.time_since_epoch().count()), std::memory_order_relaxed);
    }
    const uint32_t seen = client->news();
    client->heartbeat();
    pump_queue();
    std::vector<std::shared_ptr<Generation>> work;
    {
      std::lock_guard lock(mutex);
      work.assign(active.begin(), active.end());
    }
    for (auto& g : work) advance(*g);
    {
      std::lock_guard lock(mutex);
      active.remove_if([](const std::shared_ptr<Generation>& g) {
        for (const auto& c : g->choices) {
          if (c.slot_held) return false;
        }
        return true;
      });
    }
    client->wait(seen, std::chrono::milliseconds(20));
  }
}

// ---------------------------------------------------------------- server

Status FrontendServer::Impl::load(const FrontendOptions& o) {
  options = o;
  HEARTH_RETURN_IF_ERROR(instance_name_check(o.instance));
  const auto dir = o.shm_dir.empty() ? shm_dir_default() : o.shm_dir;
  HEARTH_ASSIGN_OR_RETURN(AttachedWeights w, weights_attach(segment_path(dir, o.instance, "weights")));
  HEARTH_ASSIGN_OR_RETURN(TokenizerSource source, tokenizer_source_decode(w.tokenizer_blob));
  HEARTH_ASSIGN_OR_RETURN(tokenizer, tokenizer_load(source));
  HEARTH_ASSIGN_OR_RETURN(PromptBuilder pb, PromptBuilder::create(*tokenizer, w.chat_template,
                                                                   {o.chat_template, o.tool_call_parser}));
  prompts.emplace(std::move(pb));
  if (prompts->has_chat_template()) {
    HEARTH_LOG_INFO("chat template: {}; tool calls: {}", prompts->template_origin(),
                    tool_call_format_name(prompts->tool_format()));
  } else {
    HEARTH_LOG_INFO("no chat template: /v1/chat/completions answers 400 (start with --chat-template to serve chat)");
  }
  for (TokenId id = 0; id < tokenizer->vocab_size(); ++id) {
    const std::string_view b = tokenizer->token_bytes(id);
    if (b.size() == 1) single_bytes.set(static_cast<uint8_t>(b[0]));
  }
  // --served-model-name: those names only; else the model's own and the instance's.
  model_names = o.served_model_names;
  if (model_names.empty()) {
    model_names.push_back(w.model_name.empty() ? o.instance : w.model_name);
    if (model_names.front() != o.instance) model_names.push_back(o.instance);
  }
  for (const std::string& name : model_names) {
    if (name.empty() || name.size() > 256) {
      return make_error(ErrorCode::kInvalidArgument, "a served model name must have 1 to 256 characters");
    }
  }
  model_id = model_names.front();
  model_label = metric_label("model_name", model_id);
  system_fingerprint = fmt::format("fp_hearth_{}", w.header->fingerprint.hex().substr(0, 12));
  HEARTH_ASSIGN_OR_RETURN(BrokerClient c, BrokerClient::connect(segment_path(dir, o.instance, "broker")));
  context = static_cast<int32_t>(c.broker().slot_tokens());
  client.emplace(std::move(c));
  engine_up.store(probe_engine());
  weights.emplace(std::move(w));
  try {
    if (o.listen_fd >= 0) {
      // A socket handed over (systemd, `hearth serve`): it must be a listening TCP socket.
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int type = 0, listening = 0;
      socklen_t type_len = sizeof(type), listening_len = sizeof(listening);
      if (::getsockname(o.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
          (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) ||
          ::getsockopt(o.listen_fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM ||
          ::getsockopt(o.listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &listening_len) != 0 || !listening) {
        return make_error(ErrorCode::kInvalidArgument, "file descriptor {} is not a listening TCP socket",
                          o.listen_fd);
      }
      ::fcntl(o.listen_fd, F_SETFD, FD_CLOEXEC);  // not for the processes this one starts
      acceptor.emplace(ioc, addr.ss_family == AF_INET ? tcp::v4() : tcp::v6(), o.listen_fd);
    } else {
      const auto address = asio::ip::make_address(o.host);
      acceptor.emplace(ioc);
      const tcp::endpoint endpoint(address, o.port);
      acceptor->open(endpoint.protocol());
      acceptor->set_option(asio::socket_base::reuse_address(true));
      // Several frontends may listen on one port, so a new one can start before the old
      // one drains (connections queued at the old one when it closes are lost, though:
      // pass one shared socket, by systemd or `hearth serve`, for restarts that lose none).
      const int one = 1;
      ::setsockopt(acceptor->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
      acceptor->bind(endpoint);
      acceptor->listen(asio::socket_base::max_listen_connections);
    }
  } catch (const boost::system::system_error& e) {
    return make_error(ErrorCode::kIo, "cannot listen on {}:{}: {}", o.host, o.port, e.what());
  }
  beast::error_code ec;
  const auto local = acceptor->local_endpoint(ec);
  if (!ec && !local.address().is_loopback() && o.api_keys.empty()) {
    HEARTH_LOG_WARN("listening on {} without an API key: anyone who can reach it may use the model "
                    "(--api-key, --api-key-file or HEARTH_API_KEY)",
                    local.address().to_string());
  }
  if (!o.api_keys.empty()) HEARTH_LOG_INFO("{} API key(s): /v1/* and the tokenizer routes want one", o.api_keys.size());
  return Status::ok();
}

void FrontendServer::Impl::accept() {
  acceptor->async_accept(asio::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->stopping.load()) return;
    if (!ec && self->open_sessions.load() >= self->options.max_connections) {
      // Over the cap: a short answer and close, without a session (a full server must not
      // spend memory on clients it cannot serve).
      ++self->rejected_connections;
      static constexpr std::string_view kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nServer: hearth\r\nContent-Type: application/json\r\nRetry-After: "
          "1\r\nConnection: close\r\nContent-Length: 115\r\n\r\n"
          "{\"error\":{\"message\":\"too many open connections; try again\",\"type\":\"server_error\",\"param\":null,"
          "\"code\":\"overloaded\"}}";
      ::send(socket.native_handle(), kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      beast::error_code ignored;
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
      if (!self->draining.load()) self->accept();
      return;
    }
    // A connection accepted as a drain began is still served (and then closed).
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      auto session = std::make_shared<Session>(std::move(socket), self);
      {
        std::lock_guard lock(self->sessions_mutex);
        std::erase_if(self->sessions, [](const std::weak_ptr<Session>& w) { return w.expired(); });
        self->sessions.push_back(session);
      }
      session->start();
    }
    if (!self->draining.load()) self->accept();
  });
}

// Runs on the io_context: stop accepting (connections then queue in the kernel for the
// next frontend, when the listening socket is shared), close idle connections, and
// watch until every request has ended.
void FrontendServer::Impl::begin_drain(std::chrono::milliseconds timeout) {
  HEARTH_TEST_POINT("frontend.drain.begin");
  if (draining.exchange(true)) return;
  drain_deadline_ns.store((std::chrono::steady_clock::now() + timeout).time_since_epoch().count());
  HEARTH_LOG_INFO("draining: {} requests in flight, deadline in {} ms", active_count(), timeout.count());
  beast::error_code ec;
  acceptor->close(ec);
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(sessions_mutex);
    for (auto& w : sessions) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->post_drain();
  drain_timer.emplace(ioc);
  watch_drain();
}

void FrontendServer::Impl::watch_drain() {
  const bool idle = active_count() == 0 && open_sessions.load() == 0;
  // Past the deadline the pump ends what is left; give those answers a moment to go out.
  const bool overdue = std::chrono::steady_clock::now().time_since_epoch().count() >
                       drain_deadline_ns.load() + std::chrono::nanoseconds(std::chrono::seconds(2)).count();
  if (idle || overdue) {
    if (overdue) HEARTH_LOG_WARN("drain deadline passed with {} connections open", open_sessions.load());
    ioc.stop();
    return;
  }
  drain_timer->expires_after(std::chrono::milliseconds(10));
  drain_timer->async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->watch_drain();
  });
}

Result<std::unique_ptr<FrontendServer>> FrontendServer::create(const FrontendOptions& options) {
  auto impl = std::make_shared<Impl>();
  HEARTH_RETURN_IF_ERROR(impl->load(options));
  std::unique_ptr<FrontendServer> server(new FrontendServer());
  server->impl_ = std::move(impl);
  return server;
}

FrontendServer::~FrontendServer() {
  if (impl_ && impl_->pump.joinable()) {
    impl_->stopping.store(true);
    impl_->pump.join();
  }
}

uint16_t FrontendServer::port() const { return impl_->acceptor->local_endpoint().port(); }

Status FrontendServer::run() {
  Impl& m = *impl_;
  m.pump = std::thread([&m] { m.pump_loop(); });
  m.accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, m.options.threads); ++i) threads.emplace_back([&m] { m.ioc.run(); });
  m.ioc.run();
  for (auto& t : threads) t.join();
  m.stopping.store(true);
  if (m.pump.joinable()) m.pump.join();
  m.client->leave();  // at once, whatever happens below
  m.release_handlers();
  return Status::ok();
}

// The io_context is stopped and its threads are gone, but handlers still queued in it
// (a cancelled accept, reads of connections left open) hold shared pointers to the
// server, which holds the io_context: a cycle nothing would break. Close what is left
// and run those handlers, so that they complete with errors and let go.
void FrontendServer::Impl::release_handlers() {
  beast::error_code ec;
  acceptor->close(ec);
  if (drain_timer) drain_timer->cancel();
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(sessions_mutex);
    for (auto& w : sessions) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
    sessions.clear();
  }
  for (auto& s : live) s->close();
  live.clear();
  {
    std::lock_guard lock(mutex);
    active.clear();
  }
  ioc.restart();
  for (int round = 0; round < 1000 && ioc.poll() > 0; ++round) {
  }
}

void FrontendServer::drain(std::chrono::milliseconds timeout) {
  asio::post(impl_->ioc, [impl = impl_, timeout] { impl->begin_drain(timeout); });
}

bool FrontendServer::healthy(std::chrono::milliseconds max_age) const {
  const int64_t beat = impl_->pump_beat_ns.load(std::memory_order_relaxed);
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  return beat != 0 && now - beat <= std::chrono::nanoseconds(max_age).count();
}

void FrontendServer::stop() {
  impl_->stopping.store(true);
  asio::post(impl_->ioc, [impl = impl_] {
    beast::error_code ec;
    impl->acceptor->close(ec);
    impl->ioc.stop();
  });
}

}  // namespace hearth
