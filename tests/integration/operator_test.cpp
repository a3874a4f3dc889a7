// What an operator meets, with real processes and real HTTP: `hearth serve` behind API
// keys and CORS, with model aliases; its children's logs on its stderr, joined by request
// id between the frontend's access log and the engine; a live /metrics scrape that
// promtool accepts; flags refused before anything starts; `hearth clean`; every program's
// --version and log flags; and an engine that stops answering (SIGSTOP): 503 at once
// after the wait, a clean recovery after SIGCONT.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

#include <boost/json.hpp>

#include "common/process.h"
#include "common/subprocess.h"
#include "tests/integration/hearth_bin.h"
#include "tests/integration/http_client.h"
#include "tests/integration/instance.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kKey = "sk-operator-test-0123456789";
constexpr const char* kFileKey = "sk-from-a-file-abcdef";
const std::string kCompletion = R"({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0})";

std::map<std::string, std::string> bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

uint16_t port_of(const std::string& serving_line) {
  // "serving http://127.0.0.1:PORT/v1 (instance NAME)"
  const size_t colon = serving_line.rfind(':', serving_line.find("/v1"));
  return static_cast<uint16_t>(std::stoi(serving_line.substr(colon + 1)));
}

std::string find_program(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string path = std::string(dir) + "/" + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// One `hearth serve` for the suite: keys (one given, one from a file), one CORS origin,
// two model names.
class OperatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto model = shared_path("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(model)) {
      skip_ = "shared test file " + model.string() + " is absent (set HEARTH_SHARED to the folder holding models/)";
      return;
    }
    shm_ = new TempDir(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "");
    const auto key_file = shm_->path() / "keys";
    std::ofstream(key_file) << "# the operators' key\n\n" << kFileKey << "\n";
    serve_ = new ChildProcess({hearth_bin("hearth"), "serve", model.string(), "--port", "0", "--instance", "ops",
                               "--shm-dir", shm_->path().string(), "--slots", "8", "--ctx", "256", "--api-key", kKey,
                               "--api-key-file", key_file.string(), "--cors-origin", "https://app.example",
                               "--served-model-name", "stories", "--served-model-name", "tiny", "--log-level",
                               "info"});
    const auto line = serve_->read_line(60s);
    if (!line) {
      failure_ = "hearth serve did not start: " + serve_->err();
      return;
    }
    port_ = port_of(*line);
  }
  static void TearDownTestSuite() {
    if (serve_ != nullptr) {
      serve_->signal(SIGTERM);
      serve_->wait(30s);
    }
    delete serve_;
    delete shm_;
    serve_ = nullptr;
    shm_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failure_.empty()) << failure_;
  }

  static inline ChildProcess* serve_ = nullptr;
  static inline TempDir* shm_ = nullptr;
  static inline uint16_t port_ = 0;
  static inline std::string skip_, failure_;
};

TEST_F(OperatorTest, ApiKeysGuardTheApiWhileProbesStayOpen) {
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v1/models"}, {"POST", "/v1/completions"}, {"POST", "/tokenize"}, {"POST", "/detokenize"}}) {
    const auto none = http_request(port_, method, target, "{}");
    EXPECT_EQ(none.status, 401) << target << " " << none.body;
    EXPECT_EQ(none.headers.count("www-authenticate"), 1u) << target;
    const auto wrong = http_request(port_, method, target, "{}", "application/json", bearer("sk-operator-test-0123456788"));
    EXPECT_EQ(wrong.status, 401) << target;
    const json::value body = json::parse(wrong.body);
    EXPECT_EQ(body.at("error").at("code"), "invalid_api_key") << wrong.body;
    EXPECT_EQ(body.at("error").at("type"), "invalid_request_error") << wrong.body;
  }
  const auto shorter = http_request(port_, "GET", "/v1/models", "", "", bearer("sk-operator"));
  EXPECT_EQ(shorter.status, 401) << "a prefix of a key is not the key";
  const auto lower = http_request(port_, "GET", "/v1/models", "", "", {{"Authorization", std::string("bearer ") + kKey}});
  EXPECT_EQ(lower.status, 200) << "the scheme is case-insensitive";
  EXPECT_EQ(http_request(port_, "POST", "/v1/completions", kCompletion, "application/json", bearer(kKey)).status, 200);
  EXPECT_EQ(http_request(port_, "POST", "/v1/completions", kCompletion, "application/json", bearer(kFileKey)).status,
            200);
  for (const char* open : {"/health", "/ready", "/metrics"}) {
    EXPECT_EQ(http_request(port_, "GET", open).status, 200) << open;
  }
}

TEST_F(OperatorTest, CorsPreflightAndResponsesForAnAllowedOrigin) {
  // What a browser sends before a POST with an Authorization header.
  const auto preflight = http_request(port_, "OPTIONS", "/v1/chat/completions", "", "",
                                      {{"Origin", "https://app.example"},
                                       {"Access-Control-Request-Method", "POST"},
                                       {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(preflight.status, 204) << preflight.body;
  EXPECT_EQ(preflight.headers.at("access-control-allow-origin"), "https://app.example");
  EXPECT_NE(preflight.headers.at("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_EQ(preflight.headers.at("access-control-allow-headers"), "authorization, content-type");
  EXPECT_EQ(preflight.headers.count("access-control-max-age"), 1u);
  EXPECT_EQ(preflight.headers.count("content-length"), 0u) << "a 204 carries no Content-Length";
  // The request itself: readable by the page, its request id too.
  auto headers = bearer(kKey);
  headers["Origin"] = "https://app.example";
  const auto post = http_request(port_, "POST", "/v1/completions", kCompletion, "application/json", headers);
  EXPECT_EQ(post.status, 200);
  EXPECT_EQ(post.headers.at("access-control-allow-origin"), "https://app.example");
  EXPECT_NE(post.headers.at("access-control-expose-headers").find("x-request-id"), std::string::npos);
  // Another origin: no CORS headers, and its preflight is refused.
  const auto other = http_request(port_, "OPTIONS", "/v1/completions", "", "",
                                  {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(other.headers.count("access-control-allow-origin"), 0u);
  headers["Origin"] = "https://evil.example";
  const auto plain = http_request(port_, "POST", "/v1/completions", kCompletion, "application/json", headers);
  EXPECT_EQ(plain.headers.count("access-control-allow-origin"), 0u);
}

TEST_F(OperatorTest, ServedModelNamesAreTheIdsClientsUse) {
  const auto models = http_request(port_, "GET", "/v1/models", "", "", bearer(kKey));
  ASSERT_EQ(models.status, 200);
  const json::value list = json::parse(models.body);
  const auto& data = list.at("data").as_array();
  ASSERT_EQ(data.size(), 2u) << models.body;
  EXPECT_EQ(data[0].at("id"), "stories");
  EXPECT_EQ(data[1].at("id"), "tiny");
  for (const char* name : {"stories", "tiny"}) {
    const auto r = http_request(port_, "POST", "/v1/completions",
                                json::serialize(json::object{{"model", name}, {"prompt", "Once"}, {"max_tokens", 2}}),
                                "application/json", bearer(kKey));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body).at("model"), "stories") << "responses name the first";
  }
  const auto other = http_request(port_, "POST", "/v1/completions", R"({"model": "llama", "prompt": "Once"})",
                                  "application/json", bearer(kKey));
  EXPECT_EQ(other.status, 404) << "the model's own name is not served once names are given";
}

TEST_F(OperatorTest, ChildrenLogToServesStderrJoinedByRequestId) {
  auto headers = bearer(kKey);
  headers["x-request-id"] = "ops-trace-42";
  const auto r = http_request(port_, "POST", "/v1/completions", kCompletion, "application/json", headers);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.at("x-request-id"), "ops-trace-42");
  std::string log;
  for (auto deadline = Clock::now() + 5s; Clock::now() < deadline; std::this_thread::sleep_for(20ms)) {
    log = serve_->err();
    if (log.find("request ops-trace-42") != std::string::npos && log.find("request_id=ops-trace-42") != std::string::npos) {
      break;
    }
  }
  // Each process's lines, named.
  for (const char* who : {" loader: ", " engine[0]: ", " frontend: ", " hearth: "}) {
    EXPECT_NE(log.find(who), std::string::npos) << who << " is missing from serve's stderr:\n" << log;
  }
  // The frontend's access line and the engine's line for the same request.
  const std::regex access(
      R"(frontend: access 127\.0\.0\.1:\d+ "POST /v1/completions" 200 request_id=ops-trace-42 prompt_tokens=5 output_tokens=6 ttft_ms=[0-9.]+ duration_ms=[0-9.]+ finish=length)");
  EXPECT_TRUE(std::regex_search(log, access)) << log;
  EXPECT_NE(log.find("engine[0]: request ops-trace-42 (slot"), std::string::npos) << log;
  // Never the prompt (no --log-prompts).
  EXPECT_EQ(log.find("Once upon a time"), std::string::npos) << log;
}

TEST_F(OperatorTest, ALiveScrapePassesPromtool) {
  const std::string promtool = find_program("promtool");
  if (promtool.empty()) GTEST_SKIP() << "promtool is absent (Debian package prometheus)";
  ASSERT_EQ(http_request(port_, "POST", "/v1/completions", kCompletion, "application/json", bearer(kKey)).status, 200);
  const auto scrape = http_request(port_, "GET", "/metrics");
  ASSERT_EQ(scrape.status, 200);
  const auto file = shm_->path() / "scrape.txt";
  std::ofstream(file) << scrape.body;
  const auto checked = run_process({"/bin/sh", "-c", promtool + " check metrics < " + file.string()});
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;
  for (const char* name : {"hearth_prompt_tokens_total", "hearth_generation_tokens_total",
                           "hearth_time_per_output_token_seconds_bucket", "hearth_inter_token_latency_seconds_bucket",
                           "hearth_e2e_request_latency_seconds_bucket", "hearth_request_queue_time_seconds_bucket",
                           "hearth_num_requests_running", "hearth_num_requests_waiting", "hearth_kv_cache_usage_perc",
                           "hearth_num_preemptions_total", "hearth_prefix_cache_queries_total",
                           "hearth_prefix_cache_hits_total", "hearth_kv_adopted_total", "hearth_kv_adopt_rejected_total",
                           "hearth_request_success_total", "hearth_build_info",
                           "process_cpu_seconds_total"}) {
    EXPECT_NE(scrape.body.find(name), std::string::npos) << name;
  }
  EXPECT_NE(scrape.body.find("model_name=\"stories\""), std::string::npos);
  // Every hearth metric the shipped alerts, dashboard and autoscaler use is in the scrape.
  const auto deploy = std::filesystem::path(HEARTH_SOURCE_DIR) / "deploy";
  const std::regex metric_name(R"(hearth_[a-z0-9_]+)");
  int used = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(deploy)) {
    const auto ext = entry.path().extension();
    if (ext != ".yml" && ext != ".yaml" && ext != ".json") continue;
    if (entry.path().filename().string().find("_test") != std::string::npos) continue;  // rule tests name series freely
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator it(text.begin(), text.end(), metric_name), end; it != end; ++it) {
      std::string name = it->str();
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (name.ends_with(suffix)) name.resize(name.size() - std::strlen(suffix));
      }
      if (name == "hearth_build_info" || name.starts_with("hearth_tp_")) continue;
      ++used;
      EXPECT_NE(scrape.body.find("# TYPE " + name + " "), std::string::npos)
          << entry.path().filename() << " uses " << name << ", which hearth does not export";
    }
  }
  EXPECT_GT(used, 10) << "the deploy files were not found under " << deploy;
  // A scrape is not a request.
  const double before = metric_value(scrape.body, "hearth_http_requests_total").value_or(0);
  const double after = metric_value(http_request(port_, "GET", "/metrics").body, "hearth_http_requests_total").value_or(0);
  EXPECT_EQ(after, before);
}

TEST_F(OperatorTest, CleanRefusesWhileTheInstanceRunsAndNamesWhy) {
  const auto refused = run_process(
      {hearth_bin("hearth"), "clean", "--instance", "ops", "--shm-dir", shm_->path().string()});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("hearth.ops.weights is mapped by pid"), std::string::npos) << refused.err;
  EXPECT_TRUE(std::filesystem::exists(shm_->path() / "hearth.ops.weights")) << "nothing was removed";
  const auto dry = run_process(
      {hearth_bin("hearth"), "clean", "--instance", "nobody", "--shm-dir", shm_->path().string()});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("nothing to remove"), std::string::npos) << dry.out;
}

// Bad flags end `hearth serve` at once with a message naming them, before any process
// starts or any segment exists.
TEST(ServeFlagsTest, BadFlagsAreRefusedBeforeAnythingStarts) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir shm;
  TempDir dir;
  std::ofstream(dir.path() / "bad.yaml") << "port: 8080\nmax_queue: 10\nwarp-speed: 9\n";
  std::ofstream(dir.path() / "twice.toml") << "port = 8080\nport = 8081\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--port", "99999"}, "--port must be an integer in 0..65535"},
      {{"--max-queue", "-1"}, "--max-queue must be an integer"},
      {{"--kv-dtype", "f8"}, "--kv-dtype is one of f32|f16|bf16"},
      {{"--log-level", "loud"}, "--log-level is one of"},
      {{"--api-key-file", "/nonexistent/keys"}, "--api-key-file /nonexistent/keys: no such file"},
      {{"--api-key", "short"}, "8 to 512 printable characters"},
      {{"--cors-origin", "app.example"}, "--cors-origin app.example: an origin is"},
      {{"--chat-template", "nonesuch"}, "not a built-in name"},
      {{"--slots", "4", "--slots", "8"}, "--slots is given 2 times"},
      {{"--warp"}, "unknown flag --warp"},
      {{"--config", (dir.path() / "bad.yaml").string()}, "bad.yaml line 3: \"warp-speed\" is not a setting"},
      {{"--config", (dir.path() / "twice.toml").string()}, "twice.toml line 2: port is set twice"},
      {{"--metrics-auth"}, "--metrics-auth needs an API key"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = {hearth_bin("hearth"), "serve", model.string(), "--shm-dir", shm.path().string(),
                                     "--port", "0"};
    // --port given twice would be its own error: the case's --port replaces the default.
    if (flags[0] == "--port") argv.resize(argv.size() - 2);
    argv.insert(argv.end(), flags.begin(), flags.end());
    const auto t0 = Clock::now();
    const auto r = run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags[0] << ": " << r.err;
    EXPECT_LT(Clock::now() - t0, 5s) << flags[0];
  }
  EXPECT_TRUE(std::filesystem::is_empty(shm.path())) << "no segment may exist after refused flags";
  const auto none = run_process({hearth_bin("hearth"), "serve", "--port", "0"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("a model is required"), std::string::npos) << none.err;
}

// docs/configuration.md is what `hearth serve --flag-reference` prints, so it cannot drift.
TEST(ServeFlagsTest, TheReferenceInDocsIsTheParsersTable) {
  const auto r = run_process({hearth_bin("hearth"), "serve", "--flag-reference"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(std::filesystem::path(HEARTH_SOURCE_DIR) / "docs" / "configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md is missing";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(doc, r.out) << "regenerate it: build/bin/hearth serve --flag-reference > docs/configuration.md";
}

TEST(ProgramsTest, EveryProgramHasAVersionAndRefusesABadLogLevel) {
  for (const char* program : {"hearth-loader", "hearth-engine", "hearth-frontend"}) {
    const auto v = run_process({hearth_bin(program), "--version"});
    EXPECT_EQ(v.exit_code, 0) << program;
    EXPECT_TRUE(v.out.starts_with(std::string(program) + " 0.")) << v.out;
    const auto bad = run_process({hearth_bin(program), "--log-level", "loud"});
    EXPECT_EQ(bad.exit_code, 2) << program;
    EXPECT_NE(bad.err.find("\"loud\" is not a log level"), std::string::npos) << program << ": " << bad.err;
    const auto env = run_process({hearth_bin(program), "--help"}, {"HEARTH_LOG_LEVEL=loud"});
    EXPECT_EQ(env.exit_code, 0) << "--help still works";
  }
  const auto hearth = run_process({hearth_bin("hearth"), "--version"});
  EXPECT_EQ(hearth.exit_code, 0);
  EXPECT_TRUE(hearth.out.starts_with("hearth 0.")) << hearth.out;
  const auto env = run_process({hearth_bin("hearth"), "status"}, {"HEARTH_LOG_LEVEL=verbose"});
  EXPECT_EQ(env.exit_code, 2);
  EXPECT_NE(env.err.find("HEARTH_LOG_LEVEL: \"verbose\" is not a log level"), std::string::npos) << env.err;
}

// An engine that stops answering (SIGSTOP: alive, silent): requests in flight wait
// --engine-wait, then what arrives is answered 503 at once; after SIGCONT everything
// is served again and nothing holds a slot. The frontend logs JSON lines.
TEST(EngineStoppedTest, FastServiceUnavailableThenACleanRecovery) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance p("stopped");
  ASSERT_EQ(p.load(model), "");
  std::string failure;
  auto engine = p.engine({"--slots", "4", "--ctx", "256", "--threads", "1"}, {}, &failure);
  ASSERT_TRUE(engine) << failure;
  uint16_t port = 0;
  // No queue: a slot still held by the request that timed out would be a 429.
  auto frontend = p.frontend(port, {"--engine-wait", "500", "--log-format", "json", "--log-level", "info", "--max-queue", "0"}, {}, &failure);
  ASSERT_TRUE(frontend) << failure;
  ASSERT_EQ(http_request(port, "POST", "/v1/completions", kCompletion).status, 200);

  engine->signal(SIGSTOP);
  // Waiting: the heartbeat goes stale (3 s), then --engine-wait.
  const auto first = http_request(port, "POST", "/v1/completions", kCompletion);
  EXPECT_EQ(first.status, 503) << first.body;
  EXPECT_EQ(http_request(port, "GET", "/ready").status, 503);
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    const auto fast = http_request(port, "POST", "/v1/completions", kCompletion);
    EXPECT_EQ(fast.status, 503) << fast.body;
    EXPECT_EQ(fast.headers.count("retry-after"), 1u);
    EXPECT_LT(Clock::now() - t0, 400ms) << "known down: answered at once";
  }
  engine->signal(SIGCONT);
  bool ready = false;
  for (auto deadline = Clock::now() + 10s; !ready && Clock::now() < deadline; std::this_thread::sleep_for(20ms)) {
    ready = http_request(port, "GET", "/ready").status == 200;
  }
  ASSERT_TRUE(ready);
  // As many requests at once as there are slots: none is refused for slots the timed-out
  // request held.
  std::vector<std::future<HttpResponse>> burst;
  for (int i = 0; i < 4; ++i) {
    burst.push_back(std::async(std::launch::async, [&] { return http_request(port, "POST", "/v1/completions", kCompletion); }));
  }
  for (auto& b : burst) EXPECT_EQ(b.get().status, 200);
  const std::string m = http_request(port, "GET", "/metrics").body;
  EXPECT_GE(metric_value(m, "hearth_requests_rejected_total").value_or(0), 4) << m;
  // The frontend's log: one JSON object per line.
  frontend->signal(SIGTERM);
  frontend->wait(10s);
  std::istringstream lines(frontend->err());
  int objects = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    boost::system::error_code ec;
    const json::value v = json::parse(line, ec);
    ASSERT_FALSE(ec) << "not JSON: " << line;
    EXPECT_EQ(v.at("process"), "frontend") << line;
    EXPECT_TRUE(v.as_object().contains("time") && v.as_object().contains("level")) << line;
    ++objects;
  }
  EXPECT_GE(objects, 5);
}

// A TCP connection to 127.0.0.1:port that sends nothing; -1 on failure.
int idle_connection(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// What the server sends on `fd` until it closes it (or `timeout`).
std::string read_until_closed(int fd, std::chrono::milliseconds timeout) {
  std::string got;
  for (const auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return got + (n == 0 ? "<closed>" : "<error>");
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// Idle or slow clients cannot hold the server: past --max-connections a connection is
// answered 503 and closed, and a connection that sends nothing is closed after
// --read-timeout, freeing its place.
TEST(ConnectionLimitsTest, ACapOnConnectionsAndAReadTimeout) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance p("conns");
  ASSERT_EQ(p.load(model), "");
  std::string failure;
  auto engine = p.engine({"--slots", "4", "--ctx", "256", "--threads", "1"}, {}, &failure);
  ASSERT_TRUE(engine) << failure;
  uint16_t port = 0;
  auto frontend = p.frontend(port, {"--max-connections", "2", "--read-timeout", "1000"}, {}, &failure);
  ASSERT_TRUE(frontend) << failure;
  const int a = idle_connection(port), b = idle_connection(port);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  std::this_thread::sleep_for(100ms);  // both accepted
  const int c = idle_connection(port);
  ASSERT_GE(c, 0);
  const std::string refused = read_until_closed(c, 3s);
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 503")) << refused;
  EXPECT_NE(refused.find("too many open connections"), std::string::npos) << refused;
  EXPECT_TRUE(refused.ends_with("<closed>")) << refused;
  ::close(c);
  // The idle two are closed by the read timeout; then requests are served again.
  const auto t0 = Clock::now();
  EXPECT_TRUE(read_until_closed(a, 5s).ends_with("<closed>"));
  EXPECT_TRUE(read_until_closed(b, 5s).ends_with("<closed>"));
  EXPECT_GE(Clock::now() - t0, 700ms) << "not before the read timeout";
  ::close(a);
  ::close(b);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(http_request(port, "POST", "/v1/completions", kCompletion).status, 200);
  const std::string m = http_request(port, "GET", "/metrics").body;
  EXPECT_NE(m.find("hearth_requests_rejected_total{reason=\"connections\"} 1"), std::string::npos) << m;
}

}  // namespace
}  // namespace hearth::testing
