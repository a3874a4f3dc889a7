// `hearth serve` as a user runs it: one command, two instances side by side, a crashed
// child started again, SIGTERM stopping everything.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include <boost/json.hpp>

#include "common/process.h"
#include "tests/integration/hearth_bin.h"
#include "tests/integration/http_client.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
namespace json = boost::json;

uint16_t port_of(const std::string& serving_line) {
  // "serving http://127.0.0.1:PORT/v1 (instance NAME)"
  const size_t colon = serving_line.rfind(':', serving_line.find("/v1"));
  return static_cast<uint16_t>(std::stoi(serving_line.substr(colon + 1)));
}

std::string complete(uint16_t port) {
  const auto r = http_request(port, "POST", "/v1/completions",
                              R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})");
  if (r.status != 200) return "HTTP " + std::to_string(r.status) + " " + r.error + r.body;
  return std::string(json::parse(r.body).at("choices").at(0).at("text").as_string());
}

// The pid of the child of `parent` whose argv[0] ends with `name`, or -1.
int child_pid(int parent, const std::string& name) {
  const auto pids = children_of(parent, name);
  return pids.empty() ? -1 : pids.front();
}

TEST(HearthServeTest, TwoInstancesSideBySideAndCrashedChildrenComeBack) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir shm(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "");
  auto serve = [&](const std::string& instance) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", instance, "--shm-dir",
        shm.path().string(), "--ctx", "256", "--slots", "16", "--chat-template", plain_chat_template()});
  };
  auto a = serve("alpha");
  auto b = serve("beta");
  const auto line_a = a->read_line(60s), line_b = b->read_line(60s);
  ASSERT_TRUE(line_a && line_b) << a->err() << b->err();
  const uint16_t port_a = port_of(*line_a), port_b = port_of(*line_b);
  EXPECT_NE(port_a, port_b);
  const std::string expected = ", there was a little girl named Lily. She";
  EXPECT_EQ(complete(port_a), expected);
  EXPECT_EQ(complete(port_b), expected);

  // Kill alpha's engine: serve starts another, which serves again; beta never notices.
  const int engine = child_pid(a->pid(), "hearth-engine");
  ASSERT_GT(engine, 0);
  ::kill(engine, SIGKILL);
  EXPECT_EQ(complete(port_b), expected);
  std::string after;
  for (int i = 0; i < 100; ++i) {
    after = complete(port_a);
    if (after == expected) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(after, expected) << a->err();
  const int engine2 = child_pid(a->pid(), "hearth-engine");
  EXPECT_GT(engine2, 0);
  EXPECT_NE(engine2, engine);

  // SIGTERM: serve stops its children and exits.
  const int frontend = child_pid(b->pid(), "hearth-frontend");
  b->signal(SIGTERM);
  EXPECT_EQ(b->wait(30s), 0) << b->err();
  EXPECT_FALSE(process_alive(frontend));
  EXPECT_EQ(http_request(port_b, "GET", "/health").status, 0) << "nothing listens any more";
  EXPECT_EQ(complete(port_a), expected);
}

}  // namespace
}  // namespace hearth::testing
