#include "frontend/session.h"

#include <algorithm>
#include <random>
#include <thread>

#include <boost/json.hpp>

#include "common/json.h"
#include "common/utf8.h"
#include "frontend/http_limits.h"
#include "frontend/webui.h"

namespace hearth {

namespace {

// The client's x-request-id when it is short and printable, else a new one.
std::string request_id_of(std::string_view given) {
  const bool usable = !given.empty() && given.size() <= 128 &&
                      std::all_of(given.begin(), given.end(), [](char c) { return c > 0x20 && c < 0x7F; });
  return usable ? std::string(given) : random_id("req-");
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
// The shape errors on `target` take: Anthropic's on its routes, OpenAI's elsewhere.
ApiEndpoint error_shape_of(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  return path == "/v1/messages" || path == "/v1/messages/count_tokens" ? ApiEndpoint::kMessages
                                                                      : ApiEndpoint::kChatCompletions;
}

// Probes and scrapes: not counted as requests, logged at debug only.
bool is_probe_route(std::string_view path) { return path == "/metrics" || path == "/health" || path == "/ready"; }

std::string millis(double seconds) { return seconds < 0 ? std::string("-") : fmt::format("{:.1f}", seconds * 1e3); }

}  // namespace

Session::Session(tcp::socket socket, std::shared_ptr<FrontendServer::Impl> server)
    : stream_(std::move(socket)), server_(std::move(server)) {
  ++server_->open_sessions;
  beast::error_code ec;
  const auto remote = stream_.socket().remote_endpoint(ec);
  if (!ec) client_ = fmt::format("{}:{}", remote.address().to_string(), remote.port());
}

Session::~Session() { --server_->open_sessions; }

void Session::post_drain() {
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

void Session::post_stream(std::string bytes, bool last) {
  asio::post(stream_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes), last]() mutable {
    self->queue_chunk(std::move(bytes), last);
  });
}

void Session::post_response(int status, std::string body, std::string_view retry_after) {
  asio::post(stream_.get_executor(),
             [self = shared_from_this(), status, body = std::move(body), retry = std::string(retry_after)]() mutable {
               self->respond(status, std::move(body), "application/json", retry);
               self->generation_.reset();
             });
}

void Session::read_request() {
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

bool Session::idle_with_nothing_waiting() {
  beast::error_code ec;
  const bool bytes_waiting =
      buffer_.size() > 0 || stream_.socket().available(ec) > 0 || (parser_ && parser_->got_some());
  return awaiting_request_ && !bytes_waiting;
}

void Session::on_read(beast::error_code ec) {
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
  error_shape_ = ApiEndpoint::kChatCompletions;
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    error_shape_ = error_shape_of(std::string_view(parser_->get().target().data(), parser_->get().target().size()));
    respond(413, dialect_error_body(error_shape_, make_error(ErrorCode::kInvalidArgument, "the request body is larger than {} bytes",
                                           server_->options.max_body_bytes)),
            "application/json");
    return;
  }
  if (ec) return close();
  request_ = parser_->release();
  keep_alive_ = request_.keep_alive() && !server_->draining.load(std::memory_order_acquire);
  handle();
}

void Session::error(const Status& st, std::string_view retry_after) {
  respond(api_status_of(st), dialect_error_body(error_shape_, st), "application/json", retry_after);
}

void Session::log_access(int status) {
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
    if (g->adapter.slot >= 0) line += " adapter=" + g->adapter.name;
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

void Session::respond(int status, std::string body, std::string_view content_type, std::string_view retry_after) {
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

void Session::begin_stream() {
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

void Session::queue_chunk(std::string bytes, bool last) {
  if (!head_sent_) begin_stream();
  if (!bytes.empty()) outbox_.push_back(fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes));
  if (last) {
    outbox_.push_back("0\r\n\r\n");
    stream_done_ = true;
    log_access(200);
  }
  flush();
}

void Session::flush() {
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

void Session::watch_disconnect() {
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

void Session::after_watch(std::function<void()> next) {
  if (!watching_) return next();
  after_watch_ = std::move(next);
  beast::error_code ec;
  stream_.socket().cancel(ec);
}

void Session::client_gone() {
  if (auto g = generation_) {
    g->client_gone.store(true, std::memory_order_release);
    log_access(499);  // nginx's "client closed request"
  }
  close();
}

void Session::linger() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(std::chrono::seconds(5));
  buffer_.consume(buffer_.size());
  stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](beast::error_code e, size_t) {
    if (e) return self->close();
    self->linger_more();
  });
}

void Session::linger_more() {
  stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](beast::error_code e, size_t) {
    if (e) return self->close();
    self->linger_more();
  });
}

void Session::close() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

namespace {

struct Route {
  std::string_view path;
  http::verb method;
};
constexpr Route kRoutes[] = {
    {"/v1/completions", http::verb::post}, {"/v1/chat/completions", http::verb::post},
    {"/v1/messages", http::verb::post},    {"/v1/messages/count_tokens", http::verb::post},
    {"/v1/responses", http::verb::post},   {"/v1/embeddings", http::verb::post},
    {"/v1/models", http::verb::get},       {"/health", http::verb::get},
    {"/ready", http::verb::get},           {"/tokenize", http::verb::post},
    {"/detokenize", http::verb::post},     {"/metrics", http::verb::get},
    {"/v1/load_lora_adapter", http::verb::post}, {"/v1/unload_lora_adapter", http::verb::post},
};

}  // namespace

void Session::handle() {
  const std::string target(request_.target());
  const std::string path = target.substr(0, target.find('?'));
  error_shape_ = error_shape_of(path);
  const auto method = request_.method();
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (r.path == path) route = &r;
  }
  if (route == nullptr && method == http::verb::get && server_->options.webui) {
    if (const WebAsset* asset = webui_find(path)) return serve_page(path, *asset);
  }
  if (route == nullptr) return error(make_error(ErrorCode::kNotFound, "no route {}", path));
  route_ = route->path;
  if (answer_cors(route->method)) return;
  if (!authorized(path)) return;
  if (route->method != method) {
    auto body = dialect_error_body(error_shape_, make_error(ErrorCode::kInvalidArgument, "{} does not accept {}", path,
                                          std::string(http::to_string(method))));
    return respond(405, std::move(body), "application/json");
  }
  serve(path);
}

// The chat page: open to all (it holds no data; its API calls carry the key), never
// framed, running only its own scripts and styles.
void Session::serve_page(std::string_view path, const WebAsset& asset) {
  route_ = path == "/" ? "/" : "/webui/";
  extra_headers_.emplace_back("Content-Security-Policy",
                              "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'");
  extra_headers_.emplace_back("X-Content-Type-Options", "nosniff");
  extra_headers_.emplace_back("Cache-Control", "no-cache");
  respond(200, std::string(asset.bytes), asset.content_type);
}

// CORS: a browser's request from an allowed origin gets it echoed (with what it may
// read); a preflight (OPTIONS) is answered here, with the methods and headers it asked
// about, or 403. True when the request was answered.
bool Session::answer_cors(http::verb route_method) {
  const FrontendOptions& o = server_->options;
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
  if (request_.method() != http::verb::options) return false;
  if (!origin_allowed) {
    const Status refused =
        origin.empty() ? make_error(ErrorCode::kInvalidArgument, "OPTIONS is for CORS preflights, which send an Origin")
                       : make_error(ErrorCode::kInvalidArgument,
                                    "origin {} may not call this server (hearth-frontend --cors-origin allows origins)",
                                    std::string(origin));
    respond(403, api_error_body(refused), "application/json");
    return true;
  }
  extra_headers_.emplace_back("Access-Control-Allow-Methods",
                              fmt::format("{}, OPTIONS", std::string(http::to_string(route_method))));
  const auto asked = request_["Access-Control-Request-Headers"];
  extra_headers_.emplace_back("Access-Control-Allow-Headers",
                              asked.empty() ? std::string("authorization, content-type, x-request-id")
                                            : std::string(asked));
  extra_headers_.emplace_back("Access-Control-Max-Age", "600");
  respond(204, "", "");
  return true;
}

// API keys: the routes that serve the model (and /metrics with --metrics-auth) want one
// when there are keys, as Authorization: Bearer KEY or (as Anthropic's clients send it)
// x-api-key: KEY. False when the request was answered 401.
bool Session::authorized(std::string_view path) {
  const FrontendOptions& o = server_->options;
  if (o.api_keys.empty() || !(is_api_route(path) || (path == "/metrics" && o.metrics_auth))) return true;
  const auto auth = request_[http::field::authorization];
  const auto x_api_key = request_["x-api-key"];
  const bool bearer = auth.size() > 7 && beast::iequals(auth.substr(0, 7), "Bearer ");
  const bool given = bearer || !x_api_key.empty();
  const std::string_view key = bearer ? std::string_view(auth.data() + 7, auth.size() - 7)
                                      : std::string_view(x_api_key.data(), x_api_key.size());
  if (given && key_matches(key, o.api_keys)) return true;
  extra_headers_.emplace_back("WWW-Authenticate", "Bearer");
  const std::string_view message = given ? "Incorrect API key provided."
                                         : "No API key provided: send it as the header Authorization: Bearer KEY "
                                           "or x-api-key: KEY.";
  respond(401, dialect_unauthorized_body(error_shape_, message), "application/json");
  return false;
}

void Session::serve(std::string_view path) {
  if (path == "/v1/completions") return handle_generation(ApiEndpoint::kCompletions);
  if (path == "/v1/chat/completions") return handle_generation(ApiEndpoint::kChatCompletions);
  if (path == "/v1/messages") return handle_generation(ApiEndpoint::kMessages);
  if (path == "/v1/responses") return handle_generation(ApiEndpoint::kResponses);
  if (path == "/v1/messages/count_tokens") return handle_count_tokens();
  if (path == "/v1/embeddings") return handle_embeddings();
  if (path == "/v1/load_lora_adapter") return handle_lora_admin(/*load=*/true);
  if (path == "/v1/unload_lora_adapter") return handle_lora_admin(/*load=*/false);
  if (path == "/health") {
    // Whether the API wants a key: the chat page asks for one before it calls (a 401
    // would tell anyone as much).
    return respond(200, server_->options.api_keys.empty() ? R"({"status":"ok","api_key_required":false})"
                                                          : R"({"status":"ok","api_key_required":true})",
                   "application/json");
  }
  if (path == "/ready") {
    if (server_->draining.load()) {
      return error(make_error(ErrorCode::kUnavailable, "this frontend is shutting down"), "1");
    }
    if (server_->engine_ready()) return respond(200, R"({"status":"ready"})", "application/json");
    return error(make_error(ErrorCode::kUnavailable, "no engine is serving this instance"), "1");
  }
  if (path == "/v1/models") {
    boost::json::array data;
    for (const std::string& name : server_->facts.model_names) {
      data.push_back(boost::json::object{{"id", name},
                                         {"object", "model"},
                                         {"created", unix_seconds()},
                                         {"owned_by", "hearth"},
                                         {"root", server_->facts.model_names.front()},
                                         {"max_model_len", server_->facts.context}});
    }
    server_->adapters.list_models(data, server_->model_id, server_->facts.context);
    return respond(200, boost::json::serialize(boost::json::object{{"object", "list"}, {"data", std::move(data)}}),
                   "application/json");
  }
  if (path == "/tokenize") return handle_tokenize();
  if (path == "/detokenize") return handle_detokenize();
  return respond(200, server_->render_metrics(), "text/plain; version=0.0.4; charset=utf-8");
}

// Run-time adapter loading (--allow-runtime-lora): the file reads and the wait of an
// unload for the adapter's requests run on a thread of their own; the answer is posted
// back to this connection.
void Session::handle_lora_admin(bool load) {
  FrontendServer::Impl& s = *server_;
  if (!s.options.allow_runtime_lora) {
    return error(make_error(ErrorCode::kUnsupported, "loading and unloading adapters at run time is off: start "
                            "hearth-frontend with --allow-runtime-lora (hearth serve --allow-runtime-lora)"));
  }
  auto parsed = lora_admin_parse(request_.body(), load);
  if (!parsed.is_ok()) return error(parsed.status());
  if (!s.adapters.present()) {
    return error(make_error(ErrorCode::kUnsupported, "this instance keeps no adapters: start hearth-loader with "
                            "--max-loras N (hearth serve --max-loras N)"));
  }
  // The answer may come long after the read timeout (an unload waits for the adapter's
  // requests): the connection's timer must not close it meanwhile.
  stream_.expires_never();
  auto worker = std::make_shared<AdminWorker>(s);  // counted before the thread exists (run() waits for it)
  std::thread([self = shared_from_this(), server = server_, worker, load, r = std::move(parsed).value()]() {
    Result<LoraSlotInfo> done =
        load ? server->adapters.load({.program = server->options.loader_program,
                                      .instance = server->options.instance,
                                      .shm_dir = server->shm_dir.string()},
                                     r.name, r.path, server->facts.model_names)
             : server->adapters.unload(
                   r.name, {.queued_here = [&](uint32_t slot, uint64_t id) { return server->adapter_queued(slot, id); },
                            .engine_down = [&] { return server->engine_known_down(); },
                            .engine_serves_segment = [&] { return server->engine_serves_adapters(); },
                            .stopping = [&] { return server->stopping.load(std::memory_order_acquire) ||
                                                     server->draining.load(std::memory_order_acquire); }});
    if (!done.is_ok()) {
      HEARTH_LOG_WARN("{} adapter {}: {}", load ? "loading" : "unloading", r.name, done.status().to_string());
      const ErrorCode code = done.status().code();
      const bool again = code == ErrorCode::kResourceExhausted || code == ErrorCode::kUnavailable;
      return self->post_response(api_status_of(done.status()), dialect_error_body(self->error_shape_, done.status()),
                                 again ? "1" : "");
    }
    HEARTH_LOG_INFO("{} adapter {} (slot {}{})", load ? "loaded" : "unloaded", r.name, done->slot,
                    load ? fmt::format(", {} matrices of rank up to {}, from {}", done->n_matrices, done->max_rank,
                                       done->source)
                         : std::string());
    self->post_response(200, boost::json::serialize(boost::json::object{
                                 {"object", "lora_adapter"},
                                 {"id", done->name},
                                 {"status", load ? "loaded" : "unloaded"},
                                 {"slot", done->slot},
                                 {"max_rank", done->max_rank},
                                 {"matrices", done->n_matrices},
                                 {"root", done->source}}));
  }).detach();
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
              {"tokens", std::move(tokens)}, {"count", count}, {"max_model_len", server_->facts.context}}),
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

void Session::handle_count_tokens() {
  FrontendServer::Impl& s = *server_;
  auto parsed = messages_parse_request(request_.body(), /*count_tokens=*/true, {.lenient_fields = s.options.lenient_fields});
  if (!parsed.is_ok()) return error(parsed.status());
  for (const std::string& name : parsed->ignored_fields) s.note_ignored_field(name);
  if (auto model = s.resolve_model(*parsed); !model.is_ok()) return error(model.status());
  auto built = s.prompts->build(*parsed);
  if (!built.is_ok()) return error(built.status());
  respond(200, messages_count_tokens_body(static_cast<int32_t>(built->ids.size())), "application/json");
}

// With no engine for longer than --engine-wait, a new request gets 503 at once.
bool Session::refused_engine_down() {
  FrontendServer::Impl& s = *server_;
  if (!s.engine_known_down()) return false;
  ++s.rejected_engine_down;
  error(make_error(ErrorCode::kUnavailable, "no engine has served this instance for more than {} ms; try again",
                   s.options.engine_wait.count()),
        "1");
  return true;
}

// Each input is one slot whose sequence the engine pools instead of sampling
// (RequestSpec::pooling); the pump collects the vectors in input order.
void Session::handle_embeddings() {
  FrontendServer::Impl& s = *server_;
  auto parsed = embeddings_parse_request(request_.body(), {.lenient_fields = s.options.lenient_fields});
  if (!parsed.is_ok()) return error(parsed.status());
  EmbeddingsRequest& e = parsed.value();
  for (const std::string& name : e.ignored_fields) s.note_ignored_field(name);
  ApiRequest req;
  req.endpoint = ApiEndpoint::kEmbeddings;
  req.model = e.model;
  req.user = e.user;
  auto adapter = s.resolve_model(req);
  if (!adapter.is_ok()) return error(adapter.status());
  if (refused_engine_down()) return;
  const auto dim = static_cast<int32_t>(s.embedding_dim());
  if (e.dimensions && *e.dimensions > dim) {
    return error(make_error(ErrorCode::kInvalidArgument, "dimensions: this model's embeddings have {} values, not {}",
                            dim, *e.dimensions));
  }
  const size_t n_inputs = e.texts.size() + e.token_inputs.size();
  if (s.options.max_queue == 0 && n_inputs > s.facts.n_slots) {
    return error(make_error(ErrorCode::kInvalidArgument,
                            "input: {} inputs need as many request slots at once when nothing may queue "
                            "(--max-queue 0); this server has {}",
                            n_inputs, s.facts.n_slots));
  }
  auto g = std::make_shared<Generation>();
  g->embeddings.emplace();
  std::vector<std::vector<int32_t>>& inputs = g->embeddings->inputs;
  inputs = std::move(e.token_inputs);
  for (const std::string& text : e.texts) {
    auto ids = s.tokenizer->encode(text, EncodeOptions{true, false});
    if (!ids.is_ok()) return error(ids.status());
    inputs.push_back(std::move(ids).value());
  }
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string at = inputs.size() == 1 ? std::string("input") : fmt::format("input[{}]", i);
    if (inputs[i].empty()) return error(make_error(ErrorCode::kInvalidArgument, "{} has no tokens", at));
    if (inputs[i].size() >= static_cast<size_t>(s.facts.context)) {
      return error(make_error(ErrorCode::kInvalidArgument, "{}: this model's context holds {} tokens; the input has {}",
                              at, s.facts.context - 1, inputs[i].size()));
    }
    for (const int32_t id : inputs[i]) {
      if (id >= s.facts.vocab_size) {
        return error(make_error(ErrorCode::kOutOfRange, "{}: token {} is outside the vocabulary (0..{})", at, id,
                                s.facts.vocab_size - 1));
      }
    }
    total += static_cast<int64_t>(inputs[i].size());
  }
  const Pooling model_pooling = s.weights->config.pooling;
  g->pending.spec.max_tokens = 1;
  g->pending.spec.pooling = s.options.pooling != Pooling::kNone ? s.options.pooling
                            : model_pooling != Pooling::kNone  ? model_pooling
                                                               : Pooling::kLast;
  g->pending.client_request_id = request_id_;
  g->pending.spec.adapter = adapter->slot;
  g->pending.spec.adapter_id = adapter->id;
  g->embeddings->dimensions = e.dimensions.value_or(dim);
  g->embeddings->base64 = e.base64;
  g->request = std::move(req);
  g->head = {random_id(dialect_id_prefix(ApiEndpoint::kEmbeddings)), unix_seconds(),
             adapter->slot >= 0 ? adapter->name : s.model_id, s.system_fingerprint};
  g->adapter = std::move(adapter).value();
  g->prompt_tokens = static_cast<int32_t>(std::min<int64_t>(total, INT32_MAX));
  g->session = weak_from_this();
  g->started = request_started_;
  g->samples_left = static_cast<int32_t>(inputs.size());
  if (Status refused = s.start(g); !refused.is_ok()) {
    return error(refused, refused.code() == ErrorCode::kResourceExhausted ? "1" : "");
  }
  if (g->adapter.slot >= 0) {
    std::lock_guard lock(s.adapter_counts_mu);
    ++s.adapter_requests[g->adapter.name];
  }
  generation_ = g;
  watch_disconnect();
}

void Session::handle_generation(ApiEndpoint endpoint) {
  FrontendServer::Impl& s = *server_;
  const ApiParseOptions options{.lenient_fields = s.options.lenient_fields};
  auto parsed = endpoint == ApiEndpoint::kMessages    ? messages_parse_request(request_.body(), false, options)
                : endpoint == ApiEndpoint::kResponses ? responses_parse_request(request_.body(), options)
                                                      : api_parse_request(request_.body(), endpoint, options);
  if (!parsed.is_ok()) return error(parsed.status());
  ApiRequest& req = parsed.value();
  for (const std::string& name : req.ignored_fields) s.note_ignored_field(name);
  auto adapter = s.resolve_model(req);
  if (!adapter.is_ok()) return error(adapter.status());
  if (refused_engine_down()) return;
  const bool reasoning = s.reasoning != ReasoningFormat::kNone;
  if (req.wants_reasoning && !reasoning) {
    return error(make_error(ErrorCode::kUnsupported,
                            "thinking is not supported by this server: it was started without --reasoning-parser, "
                            "so it cannot tell the model's thinking from its answer"));
  }
  const int32_t budget = req.reasoning_budget.value_or(s.options.reasoning_budget);
  if (reasoning && budget == 0 && !req.template_kwargs.contains("enable_thinking")) {
    req.template_kwargs["enable_thinking"] = false;  // no budget: the template is asked not to think
  }
  auto built = s.prompts->build(req);
  if (!built.is_ok()) return error(built.status());
  auto admitted = admit(req, std::move(built->ids), s.facts, std::random_device{}());
  if (!admitted.is_ok()) return error(admitted.status());
  admitted->submit.spec.adapter = adapter->slot;
  admitted->submit.spec.adapter_id = adapter->id;
  auto g = std::make_shared<Generation>();
  g->request = req;
  g->head = {random_id(dialect_id_prefix(endpoint)), unix_seconds(), adapter->slot >= 0 ? adapter->name : s.model_id,
             s.system_fingerprint};
  g->adapter = std::move(adapter).value();
  g->tool_format = admitted->tool_format;
  g->reasoning = reasoning && api_is_chat(endpoint);
  g->opens_reasoning = built->opens_reasoning;
  g->reasoning_budget = budget;
  if (g->reasoning && budget >= 0 && s.think_close_id >= 0 && admitted->submit.spec.grammar.empty()) {
    RequestSpec& spec = admitted->submit.spec;
    spec.reasoning_budget = budget;
    spec.reasoning_start = s.think_open_id;
    spec.reasoning_end = s.think_close_id;
    spec.reasoning_open = built->opens_reasoning;
    g->budget_in_engine = true;
  }
  g->prompt_tokens = static_cast<int32_t>(admitted->submit.prompt.size());
  g->echo_text = std::move(built->echo_text);
  g->session = weak_from_this();
  g->started = request_started_;
  g->pending = std::move(admitted->submit);
  g->pending.client_request_id = request_id_;
  g->samples_left = admitted->samples;
  if (req.stream && (endpoint == ApiEndpoint::kMessages || endpoint == ApiEndpoint::kResponses)) {
    g->events = EventStream::create(req, g->head);
  }
  if (Status refused = s.start(g); !refused.is_ok()) {
    return error(refused, refused.code() == ErrorCode::kResourceExhausted ? "1" : "");
  }
  if (g->adapter.slot >= 0) {
    std::lock_guard lock(s.adapter_counts_mu);
    ++s.adapter_requests[g->adapter.name];
  }
  generation_ = g;
  watch_disconnect();
}

}  // namespace hearth
