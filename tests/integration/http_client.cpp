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

HttpResponse http_request(uint16_t port, const std::string& method, const std::string& target,
                          const std::string& body, const std::string& content_type) {
  HttpResponse out;
  try {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(120));
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    http::read(stream, buffer, parser);
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
                                   const std::function<void(const std::string&)>& on_data) {
  HttpResponse out;
  std::string raw;
  try {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(120));
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    const std::string request = "POST " + target +
                                " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    asio::write(stream, asio::buffer(request));
    char buf[8192];
    while (true) {
      beast::error_code ec;
      stream.expires_after(std::chrono::seconds(120));
      const size_t n = stream.read_some(asio::buffer(buf), ec);
      if (n > 0) {
        raw.append(buf, n);
        if (on_data) on_data(raw);
      }
      if (ec == asio::error::eof) break;
      if (ec) {
        out.error = "read: " + ec.message();
        break;
      }
    }
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
    stream.expires_after(std::chrono::seconds(120));
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    beast::flat_buffer buffer;
    for (const auto& [target, body] : requests) {
      http::request<http::string_body> req(http::verb::post, target, 11);
      req.set(http::field::host, "127.0.0.1");
      req.set(http::field::content_type, "application/json");
      req.keep_alive(true);
      req.body() = body;
      req.prepare_payload();
      http::write(stream, req);
      http::response_parser<http::string_body> parser;
      parser.body_limit(64u << 20);
      http::read(stream, buffer, parser);
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
    if (event.rfind("data: ", 0) == 0) events.push_back(event.substr(6));
    if (end == std::string::npos) break;
    pos = end + 2;
  }
  return events;
}

std::string http_post_and_vanish(uint16_t port, const std::string& target, const std::string& body, size_t bytes) {
  asio::io_context ioc;
  tcp::socket socket(ioc);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  const std::string request = "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  asio::write(socket, asio::buffer(request));
  std::string got;
  char buf[4096];
  while (got.size() < bytes) {
    boost::system::error_code ec;
    const size_t n = socket.read_some(asio::buffer(buf), ec);
    if (ec) break;
    got.append(buf, n);
  }
  // Abrupt close: RST instead of FIN.
  socket.set_option(asio::socket_base::linger(true, 0));
  socket.close();
  return got;
}

}  // namespace hearth::testing
