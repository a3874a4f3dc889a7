// What the frontend does while requests run long, with real processes and real HTTP: an
// engine whose steps each take 40 ms (HEARTH_DELAY_POINT, a test point), so that a
// 400-token stream would run for 16 s and more, and only two request slots.
//
// - a client that vanishes mid-stream has its sequence cancelled at the engine within a
//   few steps, and its slot and KV blocks come back;
// - with every slot busy and no queue (--max-queue 0), a request is refused at once with
//   429 and Retry-After; with a queue, a burst waits for slots and is served, and what
//   waits past --queue-timeout gets 429;
// - a stream whose engine dies after its first tokens ends with an error event and
//   [DONE] once --engine-wait has passed;
// - a draining frontend answers /ready with 503, and after --drain-timeout ends a stream
//   with an error event and [DONE] and a waiting request with 503, cancelling both;
// - a frontend stalled past the engine's bound, whose request the engine dropped, ends
//   that stream with an error once it runs again.
//
// The time bounds below are generous against the 16 s a request would take if the
// behaviour were missing; they measure nothing.
#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "common/test_point.h"
#include "tests/integration/instance.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

const Environment kSlowSteps = {"HEARTH_DELAY_POINT=engine.step.planned:40"};
const std::vector<std::string> kEngineFlags = {"--slots", "2", "--ctx", "512", "--threads", "1"};

std::string long_request(bool stream) {
  return json::serialize(json::object{
      {"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"temperature", 0}, {"stream", stream}});
}

class SlowEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto model = shared_path("models/stories260K/stories260K.gguf");
    HEARTH_REQUIRE_SHARED(model);
    if (!test_points_compiled()) GTEST_SKIP() << "this build has no test points (HEARTH_TEST_POINTS=OFF)";
    ASSERT_EQ(instance_.load(model), "");
    start_engine();
  }

  void start_engine() {
    std::string failure;
    engine_ = instance_.engine(kEngineFlags, kSlowSteps, &failure);
    ASSERT_TRUE(engine_) << failure;
  }

  std::unique_ptr<ChildProcess> frontend(uint16_t& port, const std::vector<std::string>& flags = {},
                                         const Environment& env = {}) {
    std::string failure;
    Environment all = env;
    all.push_back("HEARTH_LOG_LEVEL=info");
    auto f = instance_.frontend(port, flags, all, &failure);
    EXPECT_TRUE(f) << failure;
    return f;
  }

  // A long stream in the background, once its first 600 bytes (head and first events)
  // have arrived; an invalid future when they did not within 10 s.
  static std::future<HttpResponse> stream_some(uint16_t port) {
    auto received = std::make_shared<std::atomic<size_t>>(0);
    auto stream = std::async(std::launch::async, [port, received] {
      return http_request_streamed(port, "/v1/completions", long_request(true),
                                   [received](const std::string& raw) { received->store(raw.size()); });
    });
    for (auto deadline = Clock::now() + 10s; received->load() < 600 && Clock::now() < deadline;) {
      std::this_thread::sleep_for(1ms);
    }
    if (received->load() < 600) return {};
    return stream;
  }

  static double metric(uint16_t port, const std::string& name) {
    return metric_value(http_request(port, "GET", "/metrics").body, name).value_or(-1);
  }

  // Two long streams that hold both slots until each has read `bytes` of events, then
  // vanish; returned once both slots run (or after 10 s).
  std::vector<std::future<std::string>> hold_both_slots(uint16_t port, size_t bytes) {
    std::vector<std::future<std::string>> holders;
    for (int i = 0; i < 2; ++i) {
      holders.push_back(std::async(std::launch::async, [port, bytes] {
        return http_post_and_vanish(port, "/v1/completions", long_request(true), bytes);
      }));
    }
    for (auto deadline = Clock::now() + 10s; Clock::now() < deadline;) {
      const auto st = status_of(instance_.shm(), instance_.name());
      const auto& states = st.contains("broker") ? st.at("broker").at("slot_states").as_object() : json::object{};
      if (states.contains("RUNNING") && states.at("RUNNING").to_number<int>() == 2) break;
      std::this_thread::sleep_for(5ms);
    }
    return holders;
  }

  // Waits until the engine runs nothing and every slot is free (or `timeout`).
  bool idle(uint16_t port, std::chrono::milliseconds timeout) {
    for (const auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
      const std::string m = http_request(port, "GET", "/metrics").body;
      const auto st = status_of(instance_.shm(), instance_.name());
      const bool free = st.contains("broker") &&
                        st.at("broker").at("slot_states").as_object().size() == 1 &&
                        st.at("broker").at("slot_states").as_object().contains("FREE");
      if (metric_value(m, "hearth_kv_blocks_used") == 0 && metric_value(m, "hearth_engine_running") == 0 && free) {
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  Instance instance_{"slow"};
  std::unique_ptr<ChildProcess> engine_;
};

TEST_F(SlowEngineTest, AClientThatVanishesMidStreamIsCancelledAtTheEngine) {
  uint16_t port = 0;
  auto f = frontend(port);
  ASSERT_TRUE(f);
  const double cancelled = metric(port, "hearth_engine_cancelled_total");
  // A few tokens in (the head and the first events), the client goes away.
  const std::string got = http_post_and_vanish(port, "/v1/completions", long_request(true), 400);
  const auto vanished = Clock::now();
  ASSERT_NE(got.find("text/event-stream"), std::string::npos) << got;
  ASSERT_NE(got.find("data: "), std::string::npos) << "tokens were streaming: " << got;
  ASSERT_TRUE(idle(port, 3s)) << "the sequence still runs 3 s after its client left (it would run 16 s)";
  const auto took = Clock::now() - vanished;
  EXPECT_EQ(metric(port, "hearth_engine_cancelled_total") - cancelled, 1) << "the engine cancelled it";
  EXPECT_LT(took, 2s);
  std::printf("[slow] slot and blocks free %lld ms after the client left\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
}

TEST_F(SlowEngineTest, EverySlotBusyMeans429WithRetryAfterAtOnce) {
  uint16_t port = 0;
  auto f = frontend(port, {"--max-queue", "0"});
  ASSERT_TRUE(f);
  // Two long streams hold both slots: each reads a few dozen tokens' events (a second and
  // more at 40 ms a step) before it vanishes, so that the slots are surely both held when
  // the third request comes, however slowly a loaded machine polls their states.
  auto holders = hold_both_slots(port, 6000);
  const auto t0 = Clock::now();
  const auto refused = http_request(port, "POST", "/v1/completions", long_request(false));
  const auto took = Clock::now() - t0;
  EXPECT_EQ(refused.status, 429) << refused.body;
  ASSERT_EQ(refused.headers.count("retry-after"), 1u);
  EXPECT_EQ(refused.headers.at("retry-after"), "1");
  EXPECT_NE(refused.body.find("slots are busy"), std::string::npos) << refused.body;
  EXPECT_LT(took, 1s) << "shed at once, not queued";
  for (auto& h : holders) h.get();  // the holders vanish; their slots come back
  ASSERT_TRUE(idle(port, 3s));
  const auto served = http_request(port, "POST", "/v1/completions",
                                   R"({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})");
  EXPECT_EQ(served.status, 200) << served.body;
}

// Four times --slots short requests at once: they queue in the frontend and every one is
// served, none refused; then, with both slots held by long streams, a request waits its
// --queue-timeout and gets 429 with Retry-After, counted by reason.
TEST_F(SlowEngineTest, ABurstWaitsInTheQueueAndTooLongAWaitIs429) {
  uint16_t port = 0;
  auto f = frontend(port, {"--max-queue", "16", "--queue-timeout", "2000"});
  ASSERT_TRUE(f);
  const std::string short_request =
      R"({"prompt": "Once upon a time", "max_tokens": 3, "ignore_eos": true, "temperature": 0})";
  std::vector<std::future<HttpResponse>> burst;
  for (int i = 0; i < 8; ++i) {
    burst.push_back(std::async(std::launch::async, [&] { return http_request(port, "POST", "/v1/completions", short_request); }));
  }
  for (auto& r : burst) {
    const HttpResponse got = r.get();
    EXPECT_EQ(got.status, 200) << got.body;
  }
  const std::string m = http_request(port, "GET", "/metrics").body;
  EXPECT_EQ(metric_value(m, "hearth_requests_rejected_total"), 0) << m;
  EXPECT_EQ(metric_value(m, "hearth_request_queue_time_seconds_count"), 8) << m;
  EXPECT_EQ(metric_value(m, "hearth_frontend_queue_requests"), 0) << m;

  auto holders = hold_both_slots(port, 40000);  // ~8 s of events, past the queue timeout
  const auto t0 = Clock::now();
  const auto refused = http_request(port, "POST", "/v1/completions", short_request);
  const auto waited = Clock::now() - t0;
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.headers.count("retry-after"), 1u);
  EXPECT_NE(refused.body.find("stayed busy"), std::string::npos) << refused.body;
  EXPECT_GE(waited, 1800ms) << "it waited in the queue first";
  EXPECT_LT(waited, 5s);
  const std::string after = http_request(port, "GET", "/metrics").body;
  EXPECT_NE(after.find("hearth_requests_rejected_total{reason=\"queue_timeout\"} 1"), std::string::npos) << after;
  for (auto& h : holders) h.get();
  ASSERT_TRUE(idle(port, 3s));
}

TEST_F(SlowEngineTest, AStreamWhoseEngineDiesAfterItsFirstTokensEndsWithAnErrorEventAndDone) {
  uint16_t port = 0;
  auto f = frontend(port, {"--engine-wait", "300"});
  ASSERT_TRUE(f);
  auto stream = stream_some(port);
  ASSERT_TRUE(stream.valid()) << "the stream did not start";
  engine_->signal(SIGKILL);
  engine_->wait(5s);
  const HttpResponse r = stream.get();
  ASSERT_EQ(r.status, 200) << r.error;
  const auto events = sse_events(r.body);
  ASSERT_GE(events.size(), 3u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  const json::value error = json::parse(events[events.size() - 2]);
  ASSERT_TRUE(error.as_object().contains("error")) << events[events.size() - 2];
  EXPECT_NE(std::string(error.at("error").at("message").as_string()).find("no engine"), std::string::npos);
  EXPECT_TRUE(json::parse(events[0]).as_object().contains("choices")) << "text came first: " << events[0];
  EXPECT_EQ(http_request(port, "GET", "/ready").status, 503);
}

// A raw keep-alive connection that sends a request in two parts, so a drain can begin
// between them. It is surely accepted first (one whole request answered on it: a
// connection still in the listen queue would be reset when the drain closes the
// listener).
class SplitRequest {
 public:
  SplitRequest(uint16_t port, const std::string& first) : socket_(ioc_) {
    namespace http = boost::beast::http;
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    http::request<http::empty_body> health(http::verb::get, "/health", 11);
    health.set(http::field::host, "127.0.0.1");
    http::write(socket_, health);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> answer;
    http::read(socket_, buffer, answer);
    EXPECT_EQ(answer.result_int(), 200u);
    boost::asio::write(socket_, boost::asio::buffer(first));
  }
  // Sends the rest and returns the status line.
  std::string finish(const std::string& rest) {
    boost::asio::write(socket_, boost::asio::buffer(rest));
    boost::asio::streambuf buf;
    boost::system::error_code ec;
    boost::asio::read_until(socket_, buf, "\r\n", ec);
    if (ec) return "(" + ec.message() + ")";
    std::string line;
    std::istream in(&buf);
    std::getline(in, line);
    socket_.close(ec);  // an open connection would hold the drain until its deadline
    return line;
  }

 private:
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_;
};

TEST_F(SlowEngineTest, DrainAnswersReady503ThenEndsWhatIsLeftAfterTheTimeout) {
  uint16_t port = 0;
  // The drain is held 300 ms as it begins (a test point), so that the half-sent /ready
  // below is surely in the server's hands by then: bytes a client has written may still
  // sit in the kernel's backlog, where a drain would see an idle connection and close it.
  auto f = frontend(port, {"--drain-timeout", "600"}, {"HEARTH_DELAY_POINT=frontend.drain.begin:300"});
  ASSERT_TRUE(f);
  const double cancelled = metric(port, "hearth_engine_cancelled_total");
  auto stream = stream_some(port);
  ASSERT_TRUE(stream.valid()) << "the stream did not start";
  // The second slot: a non-streamed request, nothing sent back yet.
  auto plain = std::async(std::launch::async,
                          [&] { return http_request(port, "POST", "/v1/completions", long_request(false)); });
  for (auto deadline = Clock::now() + 10s; Clock::now() < deadline;) {
    const auto st = status_of(instance_.shm(), instance_.name());
    const auto& states = st.contains("broker") ? st.at("broker").at("slot_states").as_object() : json::object{};
    if (states.contains("RUNNING") && states.at("RUNNING").to_number<int>() == 2) break;
    std::this_thread::sleep_for(5ms);
  }
  SplitRequest ready(port, "GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  const auto signalled = Clock::now();
  f->signal(SIGTERM);
  // The frontend logs when its drain has begun (the server's own line, not the signal's).
  const std::string begun = "requests in flight, deadline in";
  for (auto deadline = Clock::now() + 10s; f->err().find(begun) == std::string::npos && Clock::now() < deadline;) {
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_NE(f->err().find(begun), std::string::npos) << f->err();
  const std::string ready_status = ready.finish("\r\n");
  EXPECT_NE(ready_status.find(" 503 "), std::string::npos) << "/ready while draining: " << ready_status << "\n" << f->err();

  const HttpResponse s = stream.get();
  const HttpResponse p = plain.get();
  const auto ended = Clock::now() - signalled;
  ASSERT_EQ(s.status, 200) << s.error;
  const auto events = sse_events(s.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(json::parse(events[events.size() - 2]).as_object().contains("error")) << events[events.size() - 2];
  EXPECT_EQ(p.status, 503) << p.body;
  EXPECT_EQ(p.headers.count("retry-after"), 1u);
  EXPECT_GE(ended, 500ms) << "requests in flight may run until the drain timeout (600 ms)";
  EXPECT_LT(ended, 5s);
  EXPECT_EQ(f->wait(10s), 0) << f->err();
  uint16_t next = 0;
  auto successor = frontend(next);
  ASSERT_TRUE(successor);
  ASSERT_TRUE(idle(next, 3s));
  EXPECT_EQ(metric(next, "hearth_engine_cancelled_total") - cancelled, 2) << "both were cancelled at the engine";
}

// A connection the frontend accepted before its drain, whose client has not written its
// first request yet, is still served when the request comes (with Connection: close),
// not closed as idle: its client cannot know a drain began.
TEST_F(SlowEngineTest, ADrainServesTheFirstRequestOfAConnectionAcceptedBeforeIt) {
  uint16_t port = 0;
  auto f = frontend(port, {"--drain-timeout", "5000"}, {"HEARTH_DELAY_POINT=frontend.drain.begin:300"});
  ASSERT_TRUE(f);
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket socket(ioc);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  // Accepting takes the server microseconds; 200 ms (and the drain's 300 ms hold) leave
  // it no chance to be still in the listen queue, which the drain would close with the
  // listener.
  std::this_thread::sleep_for(200ms);
  f->signal(SIGTERM);
  const std::string begun = "requests in flight, deadline in";
  for (auto deadline = Clock::now() + 10s; f->err().find(begun) == std::string::npos && Clock::now() < deadline;) {
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_NE(f->err().find(begun), std::string::npos) << f->err();
  std::this_thread::sleep_for(500ms);  // well into the drain, inside its 2 s grace for a first request
  const std::string request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  boost::system::error_code ec;
  boost::asio::write(socket, boost::asio::buffer(request), ec);
  ASSERT_FALSE(ec) << ec.message();
  boost::asio::streambuf buf;
  boost::asio::read_until(socket, buf, "\r\n\r\n", ec);
  ASSERT_FALSE(ec) << "the connection was closed unanswered: " << ec.message() << "\n" << f->err();
  const std::string head(boost::asio::buffers_begin(buf.data()), boost::asio::buffers_end(buf.data()));
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
  socket.close(ec);
  EXPECT_EQ(f->wait(10s), 0) << f->err();
}

// A frontend whose pump stalls past the engine's bound (5 s without a heartbeat) is judged
// gone: the engine drops its request and frees the slot. When the frontend comes back it
// must see that the slot is no longer its own and end the stream with an error, not wait
// on a slot another request may already hold (that hung a restart test until its drain
// deadline) nor cancel or release it.
TEST_F(SlowEngineTest, AFrontendJudgedGoneEndsTheRequestTheEngineDroppedWithAnError) {
  uint16_t port = 0;
  auto f = frontend(port, {}, {"HEARTH_DELAY_POINT=frontend.streamed:5600"});
  ASSERT_TRUE(f);
  auto stream = std::async(std::launch::async,
                           [port] { return http_request_streamed(port, "/v1/completions", long_request(true)); });
  if (stream.wait_for(30s) != std::future_status::ready) {
    f->signal(SIGKILL);  // lets the request end, so that the future can be destroyed
    FAIL() << "the stream did not end after its slot was taken\n" << f->err();
  }
  const HttpResponse r = stream.get();
  ASSERT_EQ(r.status, 200) << r.error;
  const auto events = sse_events(r.body);
  ASSERT_GE(events.size(), 2u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  const json::value error = json::parse(events[events.size() - 2]);
  ASSERT_TRUE(error.as_object().contains("error")) << events[events.size() - 2];
  EXPECT_NE(std::string(error.at("error").at("message").as_string()).find("dropped"), std::string::npos)
      << events[events.size() - 2];
  EXPECT_GE(metric(port, "hearth_engine_slots_reclaimed_total"), 1) << "the engine took the slot back";
  // The frontend serves on (its heartbeat is back), and nothing is left held.
  const HttpResponse next = http_request(port, "POST", "/v1/completions",
                                         json::serialize(json::object{{"prompt", "Once upon a time"}, {"max_tokens", 8}}));
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_TRUE(idle(port, 10s));
}

}  // namespace
}  // namespace hearth::testing
