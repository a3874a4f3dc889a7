#include "tests/integration/http_client.h"

#include <algorithm>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace hearth::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// Every operation of these clients runs asynchronously under a deadline (a sync read
// on a Beast stream ignores expires_after): a server that hangs fails the request with
// "timeout" instead of hanging the test.
constexpr auto kTimeout = std::chrono::seconds(120);

// Runs `ioc` until its work is done; throws when an operation failed.
void run_all(asio::io_context& ioc, const beast::error_code& ec) {
  ioc.run();
  if (ec) throw beast::system_error(ec);
}

}  // namespace

HttpResponse http_request(uint16_t port, const std::string& method, const std::string& target,
                          const std::string& body, const std::string& content_type,
                          const std::map<std::string, std::string>& headers) {
  HttpResponse out;
  try {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    if (!body.empty()) req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    beast::error_code failed;
    stream.expires_after(kTimeout);
    stream.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), [&](beast::error_code ec) {
      if (ec) return void(failed = ec);
      http::async_write(stream, req, [&](beast::error_code wec, size_t) {
        if (wec) return void(failed = wec);
        http::async_read(stream, buffer, parser, [&](beast::error_code rec, size_t) { failed = rec; });
      });
    });
    run_all(ioc, failed);
    const auto& res = parser.get();
    out.status = static_cast<int>(res.result_int());
    for (const auto& f : res) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      out.headers[name] = std::string(f.value());
    }
    out.body = res.body();
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  } catch (const std::exception& e) {
    out.status = 0;
    out.error = e.what();
  }
  return out;
}

namespace {

// Decodes a chunked body; false when it ends before the last (empty) chunk.
bool dechunk(const std::string& in, std::string& out) {
  size_t pos = 0;
  while (true) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) return false;
    size_t size = 0;
    try {
      size = std::stoul(in.substr(pos, eol - pos), nullptr, 16);
    } catch (const std::exception&) {
      return false;
    }
    if (size == 0) return true;
    if (eol + 2 + size + 2 > in.size()) return false;
    out.append(in, eol + 2, size);
    pos = eol + 2 + size + 2;
  }
}

}  // namespace

HttpResponse http_request_streamed(uint16_t port, const std::string& target, const std::string& body,
                                   const std::function<void(const std::string&)>& on_data,
                                   std::chrono::seconds read_timeout) {
  HttpResponse out;
  std::string raw;
  try {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    const std::string request = "POST " + target +
                                " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    char buf[8192];
    beast::error_code failed;
    // Reads until the server closes; each read has the full timeout.
    std::function<void()> read_more = [&] {
      stream.expires_after(read_timeout);
      stream.async_read_some(asio::buffer(buf), [&](beast::error_code ec, size_t n) {
        if (n > 0) {
          raw.append(buf, n);
          if (on_data) on_data(raw);
        }
        if (ec == asio::error::eof) return;
        if (ec) {
          out.error = "read: " + ec.message();
          return;
        }
        read_more();
      });
    };
    stream.expires_after(kTimeout);
    stream.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), [&](beast::error_code ec) {
      if (ec) return void(failed = ec);
      asio::async_write(stream, asio::buffer(request), [&](beast::error_code wec, size_t) {
        if (wec) return void(failed = wec);
        read_more();
      });
    });
    run_all(ioc, failed);
  } catch (const std::exception& e) {
    out.error = e.what();
    return out;
  }
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.rfind("HTTP/1.1 ", 0) != 0) {
    out.error = "truncated: no response head (" + out.error + ")";
    out.body = raw;
    return out;
  }
  const int status = std::stoi(raw.substr(9, 3));
  size_t line = raw.find("\r\n") + 2;
  while (line < head_end) {
    const size_t eol = raw.find("\r\n", line);
    const std::string field = raw.substr(line, eol - line);
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      std::string name = field.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      out.headers[name] = field.substr(field.find_first_not_of(' ', colon + 1));
    }
    line = eol + 2;
  }
  const std::string payload = raw.substr(head_end + 4);
  bool complete = false;
  if (out.headers["transfer-encoding"] == "chunked") {
    complete = dechunk(payload, out.body);
  } else if (out.headers.contains("content-length")) {
    out.body = payload;
    complete = payload.size() == std::stoul(out.headers["content-length"]);
  }
  if (!complete) {
    out.error = "truncated response (" + out.error + ") after " + std::to_string(payload.size()) + " bytes, ending " + payload.substr(payload.size() > 80 ? payload.size() - 80 : 0);
    if (out.body.empty()) out.body = payload;
    return out;
  }
  out.status = status;
  return out;
}

std::vector<HttpResponse> http_posts_keep_alive(uint16_t port,
                                                const std::vector<std::pair<std::string, std::string>>& requests) {
  std::vector<HttpResponse> out;
  try {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    beast::error_code failed;
    stream.expires_after(kTimeout);
    stream.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                         [&](beast::error_code ec) { failed = ec; });
    run_all(ioc, failed);
    beast::flat_buffer buffer;
    for (const auto& [target, body] : requests) {
      http::request<http::string_body> req(http::verb::post, target, 11);
      req.set(http::field::host, "127.0.0.1");
      req.set(http::field::content_type, "application/json");
      req.keep_alive(true);
      req.body() = body;
      req.prepare_payload();
      http::response_parser<http::string_body> parser;
      parser.body_limit(64u << 20);
      ioc.restart();
      stream.expires_after(kTimeout);
      http::async_write(stream, req, [&](beast::error_code wec, size_t) {
        if (wec) return void(failed = wec);
        http::async_read(stream, buffer, parser, [&](beast::error_code rec, size_t) { failed = rec; });
      });
      run_all(ioc, failed);
      HttpResponse r;
      r.status = static_cast<int>(parser.get().result_int());
      r.body = parser.get().body();
      out.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    HttpResponse r;
    r.error = e.what();
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    const std::string event = body.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (event.rfind("data: ", 0) == 0) {
      events.push_back(event.substr(6));
    } else if (const size_t data = event.find("\ndata: "); event.rfind("event: ", 0) == 0 && data != std::string::npos) {
      events.push_back(event.substr(data + 7));  // a typed event: its data
    }
    if (end == std::string::npos) break;
    pos = end + 2;
  }
  return events;
}

std::string http_post_and_vanish(uint16_t port, const std::string& target, const std::string& body, size_t bytes) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  const std::string request = "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  std::string got;
  char buf[4096];
  std::function<void()> read_more = [&] {
    stream.expires_after(kTimeout);
    stream.async_read_some(asio::buffer(buf), [&](beast::error_code ec, size_t n) {
      got.append(buf, n);
      if (!ec && got.size() < bytes) read_more();
    });
  };
  stream.expires_after(kTimeout);
  stream.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), [&](beast::error_code ec) {
    if (ec) return;
    asio::async_write(stream, asio::buffer(request), [&](beast::error_code wec, size_t) {
      if (!wec) read_more();
    });
  });
  ioc.run();
  // Abrupt close: RST instead of FIN.
  beast::error_code ec;
  stream.socket().set_option(asio::socket_base::linger(true, 0), ec);
  stream.socket().close(ec);
  return got;
}

}  // namespace hearth::testing
