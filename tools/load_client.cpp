#include "tools/load_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "common/version.h"

namespace hearth::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// A stream's body beyond this is a broken server, not a long completion.
constexpr size_t kMaxStreamBytes = size_t{256} << 20;
constexpr size_t kMaxErrorBodyBytes = 64 << 10;

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t int_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return -1;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  return -1;
}

bool non_empty_string(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() && !v->as_string().empty();
}

// The message of an OpenAI-style error body, or the body's start.
std::string error_message(std::string_view body) {
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (const json::value* e = v.as_object().if_contains("error"); e != nullptr) {
      if (e->is_object() && e->as_object().contains("message") && e->as_object().at("message").is_string()) {
        return std::string(e->as_object().at("message").as_string());
      }
      if (e->is_string()) return std::string(e->as_string());
    }
  }
  return std::string(body.substr(0, 200));
}

std::string host_header(const Endpoint& e) { return e.port == "80" ? e.host : e.host + ":" + e.port; }

http::request<http::string_body> make_request(const Endpoint& endpoint, http::verb verb, const std::string& target,
                                              const std::string& body) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, host_header(endpoint));
  req.set(http::field::user_agent, version_line("hearth-bench"));
  for (const auto& [name, value] : endpoint.headers) req.set(name, value);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.body() = body;
  }
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

}  // namespace

Result<Endpoint> parse_endpoint(std::string_view url) {
  Endpoint e;
  constexpr std::string_view kHttp = "http://";
  if (url.starts_with("https://")) {
    return make_error(ErrorCode::kUnsupported, "{}: hearth bench speaks plain HTTP; put a TLS proxy's plain side here", url);
  }
  if (!url.starts_with(kHttp)) return make_error(ErrorCode::kInvalidArgument, "{}: give a URL such as http://127.0.0.1:8080/v1", url);
  std::string_view rest = url.substr(kHttp.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.empty()) return make_error(ErrorCode::kInvalidArgument, "{}: the URL names no host", url);
  if (authority.front() == '[') {  // [v6 address]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return make_error(ErrorCode::kInvalidArgument, "{}: unclosed [ in the host", url);
    e.host = std::string(authority.substr(1, close - 1));
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority.front() != ':') {
      return make_error(ErrorCode::kInvalidArgument, "{}: expected :port after the address", url);
    }
    if (!authority.empty()) e.port = std::string(authority.substr(1));
  } else {
    const size_t colon = authority.rfind(':');
    e.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) e.port = std::string(authority.substr(colon + 1));
  }
  if (e.host.empty()) return make_error(ErrorCode::kInvalidArgument, "{}: the URL names no host", url);
  if (e.port.empty() || e.port.size() > 5 || e.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(e.port) == 0 || std::stoi(e.port) > 65535) {
    return make_error(ErrorCode::kInvalidArgument, "{}: the port is not a number from 1 to 65535", url);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  e.prefix = path.empty() ? "/v1" : std::string(path);
  return e;
}

Status resolve_endpoint(Endpoint& endpoint) {
  asio::io_context ioc;
  asio::ip::tcp::resolver resolver(ioc);
  boost::system::error_code ec;
  endpoint.addresses = resolver.resolve(endpoint.host, endpoint.port, ec);
  if (ec) return make_error(ErrorCode::kUnavailable, "cannot resolve {}: {}", endpoint.host, ec.message());
  return Status::ok();
}

Result<HttpReply> http_get(const Endpoint& endpoint, const std::string& target, std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(timeout);
  boost::system::error_code ec;
  // Synchronous calls ignore the stream's timer, so the exchange runs asynchronously.
  HttpReply reply;
  http::response<http::string_body> res;
  beast::flat_buffer buffer;
  auto req = make_request(endpoint, http::verb::get, target, "");
  stream.async_connect(endpoint.addresses, [&](boost::system::error_code e, const asio::ip::tcp::endpoint&) {
    if ((ec = e)) return;
    http::async_write(stream, req, [&](boost::system::error_code e2, size_t) {
      if ((ec = e2)) return;
      http::async_read(stream, buffer, res, [&](boost::system::error_code e3, size_t) { ec = e3; });
    });
  });
  ioc.run();
  if (ec) {
    return make_error(ErrorCode::kUnavailable, "GET http://{}{}: {}", host_header(endpoint), target, ec.message());
  }
  reply.status = res.result_int();
  reply.body = std::move(res.body());
  return reply;
}

void SseSplitter::feed(std::string_view bytes, std::vector<std::string>& out) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(bytes);
      return;
    }
    pending_.append(bytes.substr(0, nl));
    bytes.remove_prefix(nl + 1);
    std::string_view line = pending_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (has_data_) out.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_.append(line);
      has_data_ = true;
    }  // comments (":...") and other fields (event:, id:, retry:) carry nothing timed here
    pending_.clear();
  }
}

ChunkInfo read_chunk(std::string_view data) {
  ChunkInfo c;
  if (data == "[DONE]") {
    c.done = true;
    return c;
  }
  boost::system::error_code ec;
  const json::value v = json::parse(data, ec);
  if (ec || !v.is_object()) {
    c.malformed = true;
    c.error = "an event that is not a JSON object: " + std::string(data.substr(0, 120));
    return c;
  }
  const json::object& o = v.as_object();
  if (const json::value* e = o.if_contains("error"); e != nullptr && !e->is_null()) {
    c.error = error_message(data);
    return c;
  }
  if (const json::value* u = o.if_contains("usage"); u != nullptr && u->is_object()) {
    const json::object& usage = u->as_object();
    c.prompt_tokens = int_field(usage, "prompt_tokens");
    c.completion_tokens = int_field(usage, "completion_tokens");
    if (const json::value* d = usage.if_contains("prompt_tokens_details"); d != nullptr && d->is_object()) {
      c.cached_tokens = int_field(d->as_object(), "cached_tokens");
    }
  }
  const json::value* choices = o.if_contains("choices");
  if (choices == nullptr || !choices->is_array()) {
    if (c.completion_tokens < 0) {
      c.malformed = true;
      c.error = "an event with neither choices nor usage: " + std::string(data.substr(0, 120));
    }
    return c;
  }
  for (const json::value& choice : choices->as_array()) {
    if (!choice.is_object()) continue;
    const json::object& ch = choice.as_object();
    if (non_empty_string(ch, "text")) c.has_content = true;
    if (const json::value* d = ch.if_contains("delta"); d != nullptr && d->is_object()) {
      const json::object& delta = d->as_object();
      if (non_empty_string(delta, "content") || non_empty_string(delta, "reasoning_content")) c.has_content = true;
      if (const json::value* t = delta.if_contains("tool_calls"); t != nullptr && t->is_array() && !t->as_array().empty()) {
        c.has_content = true;
      }
    }
  }
  return c;
}

LoadConnection::LoadConnection(asio::any_io_executor executor, const Endpoint& endpoint)
    : stream_(std::move(executor)), endpoint_(endpoint) {}

asio::awaitable<RequestRecord> LoadConnection::post_stream(const std::string& target, const std::string& body,
                                                           std::chrono::steady_clock::time_point epoch,
                                                           std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  RequestRecord r;
  const auto t0 = Clock::now();
  r.start_s = seconds(t0 - epoch);
  auto since = [&] { return seconds(Clock::now() - t0); };
  auto fail = [&](std::string kind, std::string detail) {
    r.error = std::move(kind);
    r.error_detail = std::move(detail);
    r.end_s = since();
    beast::error_code ignored;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.close();
    connected_ = false;
  };
  // A parse error (a header over Beast's limit, a broken chunk) is the server's fault in
  // the stream's format; a closed or reset connection and the deadline are not.
  auto socket_failure = [](const beast::error_code& ec) -> std::string {
    if (ec == beast::error::timeout) return "timeout";
    if (ec == http::error::end_of_stream || ec == http::error::partial_message) return "reset";
    if (ec.category() == http::make_error_code(http::error::end_of_stream).category()) return "bad stream";
    return "reset";
  };

  stream_.expires_after(timeout);  // one deadline for the whole exchange
  const auto req = make_request(endpoint_, http::verb::post, target, body);
  std::optional<http::response_parser<http::buffer_body>> parser;
  // A kept-alive connection the server has since closed fails before any byte of the
  // response: then the request goes once more on a new connection.
  for (int attempt = 0;; ++attempt) {
    const bool reused = connected_;
    if (!connected_) {
      auto [ec, addr] = co_await stream_.async_connect(endpoint_.addresses, kTuple);
      if (ec) {
        fail(ec == beast::error::timeout ? "timeout" : "connect", ec.message());
        co_return r;
      }
      connected_ = true;
      buffer_.clear();
    }
    parser.emplace();
    parser->body_limit(boost::none);  // kMaxStreamBytes bounds a stream instead
    auto [wec, wn] = co_await http::async_write(stream_, req, kTuple);
    beast::error_code hec = wec;
    if (!hec) std::tie(hec, std::ignore) = co_await http::async_read_header(stream_, buffer_, *parser, kTuple);
    if (!hec) break;
    const bool stale = reused && attempt == 0 && !parser->got_some() && hec != beast::error::timeout;
    fail(socket_failure(hec), hec.message());
    if (!stale) co_return r;
    r.error.clear();
    r.error_detail.clear();
  }
  r.http_status = parser->get().result_int();
  const bool ok_status = r.http_status == 200;
  const std::string_view content_type(parser->get()[http::field::content_type].data(),
                                      parser->get()[http::field::content_type].size());
  if (ok_status && !content_type.starts_with("text/event-stream")) {
    fail("bad stream", "the server answered with " + std::string(content_type) + ", not an event stream");
    co_return r;
  }

  SseSplitter sse;
  std::vector<std::string> events;
  std::string error_body;
  size_t total = 0;
  bool done = false;
  double last_content = -1;
  char buf[16 * 1024];
  while (!parser->is_done()) {
    parser->get().body().data = buf;
    parser->get().body().size = sizeof(buf);
    auto [ec, n] = co_await http::async_read_some(stream_, buffer_, *parser, kTuple);
    if (ec == http::error::need_buffer) ec = {};
    const double now = since();
    const size_t got = sizeof(buf) - parser->get().body().size;
    total += got;
    if (!ok_status) {
      error_body.append(buf, std::min(got, kMaxErrorBodyBytes - std::min(error_body.size(), kMaxErrorBodyBytes)));
    } else {
      events.clear();
      sse.feed(std::string_view(buf, got), events);
      for (const std::string& e : events) {
        const ChunkInfo c = read_chunk(e);
        if (c.done) {
          done = true;
          r.end_s = now;
          continue;
        }
        if (c.malformed) {
          fail("bad stream", c.error);
          co_return r;
        }
        if (!c.error.empty()) {
          fail("stream error", c.error);
          co_return r;
        }
        if (c.has_content) {
          ++r.content_events;
          if (last_content < 0) {
            r.first_token_s = now;
          } else {
            r.token_gaps_s.push_back(now - last_content);
          }
          last_content = now;
        }
        if (c.prompt_tokens >= 0) r.prompt_tokens = c.prompt_tokens;
        if (c.completion_tokens >= 0) r.output_tokens = c.completion_tokens;
        if (c.cached_tokens >= 0) r.cached_tokens = c.cached_tokens;
      }
    }
    if (ec && done) {
      // Everything the request needed arrived; the connection's end after [DONE] (a
      // server closing without a final chunk) is not the request's failure.
      beast::error_code ignored;
      stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      stream_.close();
      connected_ = false;
      if (r.output_tokens == 0) r.output_tokens = r.content_events;
      co_return r;
    }
    if (ec) {
      fail(ok_status ? socket_failure(ec) : "HTTP " + std::to_string(r.http_status), ec.message());
      co_return r;
    }
    if (total > kMaxStreamBytes) {
      fail("bad stream", "the response is larger than 256 MiB");
      co_return r;
    }
  }
  if (!parser->keep_alive()) {
    beast::error_code ignored;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.close();
    connected_ = false;
  }
  if (!ok_status) {
    r.error = "HTTP " + std::to_string(r.http_status);
    r.error_detail = error_message(error_body);
    r.end_s = since();
    co_return r;
  }
  if (!done) {
    fail("truncated", "the stream ended without [DONE]");
    co_return r;
  }
  if (r.output_tokens == 0) r.output_tokens = r.content_events;
  co_return r;
}

}  // namespace hearth::cli
