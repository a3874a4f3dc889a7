// `hearth bench` against `hearth serve`, as a user runs them: closed-loop levels with more
// users than the engine has slots, an open-loop level, a shared prefix the server's
// cache finds, a server that refuses every request, and --compare over the runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include <boost/json.hpp>

#include "common/mapped_file.h"
#include "tests/integration/hearth_bin.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
namespace json = boost::json;

json::object read_json(const std::filesystem::path& path) {
  auto text = read_small_file(path, 1 << 24);
  EXPECT_TRUE(text.is_ok()) << path;
  return text.is_ok() ? json::parse(*text).as_object() : json::object{};
}

class BenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = shared_path("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(model_)) GTEST_SKIP() << "shared model absent: " << model_;
    // Four slots: the 8-user level queues at the server, which must not fail a request.
    serve_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        hearth_bin("hearth"), "serve", "--model", model_.string(), "--port", "0", "--instance", "benchtest",
        "--shm-dir", shm_.path().string(), "--ctx", "256", "--slots", "4"});
    const auto line = serve_->read_line(60s);
    ASSERT_TRUE(line) << serve_->err();
    // "serving http://127.0.0.1:PORT/v1 (instance NAME)"
    const size_t start = line->find("http://");
    ASSERT_NE(start, std::string::npos) << *line;
    url_ = line->substr(start, line->find(' ', start) - start);
  }

  ProcessResult bench(std::vector<std::string> args) {
    args.insert(args.begin(), {hearth_bin("hearth"), "bench", "--url", url_});
    return run_process(args);
  }

  std::filesystem::path model_;
  TempDir shm_{::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : ""};
  TempDir out_;
  std::unique_ptr<ChildProcess> serve_;
  std::string url_;
};

TEST_F(BenchTest, LevelsAgainstHearthServeReportEveryRequestAndNoError) {
  const auto json_path = out_.path() / "users.json", png_path = out_.path() / "users.png";
  const ProcessResult r = bench({"--users", "1,8", "--duration", "2", "--input-tokens", "24", "--output-tokens", "8",
                                 "--ignore-eos", "--tokenizer", model_.string(), "--name", "hearth", "--json",
                                 json_path.string(), "--plot", png_path.string(), "--strict"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("| users | req/s"), std::string::npos) << r.out;
  const json::object run = read_json(json_path);
  EXPECT_EQ(run.at("name").as_string(), "hearth");
  EXPECT_FALSE(run.at("workload").at("model").as_string().empty());  // from GET /v1/models
  const json::array& levels = run.at("levels").as_array();
  ASSERT_EQ(levels.size(), 2u);
  for (const json::value& v : levels) {
    const json::object& l = v.as_object();
    SCOPED_TRACE(json::serialize(l));
    EXPECT_EQ(l.at("kind").as_string(), "users");
    EXPECT_GT(l.at("completed").as_int64(), 0);
    EXPECT_EQ(l.at("completed").as_int64(), l.at("requests").as_int64());
    EXPECT_TRUE(l.at("errors").as_object().empty());
    // 24 tokens of prompt and the BOS the server adds; exactly 8 out (EOS ignored).
    EXPECT_DOUBLE_EQ(l.at("mean_prompt_tokens").to_number<double>(), 25);
    EXPECT_DOUBLE_EQ(l.at("mean_output_tokens").to_number<double>(), 8);
    const json::object& ttft = l.at("ttft_ms").as_object();
    EXPECT_GT(ttft.at("p50").to_number<double>(), 0);
    EXPECT_LE(ttft.at("p50").to_number<double>(), ttft.at("p99").to_number<double>());
    EXPECT_LT(ttft.at("p50").to_number<double>(), l.at("e2e_s").at("p50").to_number<double>() * 1e3);
    // A gap between each two events that carry text: 7 per request, fewer where a token
    // adds no text of its own (it then arrives with the next one).
    const int64_t gaps = l.at("itl_ms").at("n").as_int64(), completed = l.at("completed").as_int64();
    EXPECT_LE(gaps, 7 * completed);
    EXPECT_GE(gaps, 6 * completed);
    EXPECT_GT(l.at("requests_per_s").to_number<double>(), 0);
  }
  EXPECT_EQ(levels[1].at("load").to_number<double>(), 8);
  EXPECT_EQ(levels[1].at("peak_in_flight").as_int64(), 8);
  auto png = read_small_file(png_path, 1 << 24);
  ASSERT_TRUE(png.is_ok());
  EXPECT_EQ(png->substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));

  // Open loop, with three quarters of each prompt shared: the server's prefix cache
  // finds the shared blocks (16 tokens each) and usage says so.
  const auto rate_path = out_.path() / "rate.json";
  const ProcessResult o = bench({"--rate", "20", "--duration", "2", "--input-tokens", "64", "--shared-prefix", "0.75",
                                 "--output-tokens", "4", "--ignore-eos", "--tokenizer", model_.string(), "--name", "shared",
                                 "--json", rate_path.string(), "--strict"});
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const json::object rate_run = read_json(rate_path);
  const json::object& rate = rate_run.at("levels").at(0).as_object();
  SCOPED_TRACE(json::serialize(rate));
  EXPECT_EQ(rate.at("kind").as_string(), "rate");
  EXPECT_GT(rate.at("completed").as_int64(), 10);  // 40 expected arrivals
  EXPECT_TRUE(rate.at("errors").as_object().empty());
  EXPECT_GE(rate.at("mean_cached_tokens").to_number<double>(), 32);

  // Side by side: two closed-loop runs (the second the first under another name).
  json::object renamed = run;
  renamed["name"] = "again";
  const auto again_path = out_.path() / "again.json";
  std::ofstream(again_path) << json::serialize(renamed);
  const ProcessResult c = run_process({hearth_bin("hearth"), "bench", "--compare", json_path.string(),
                                       again_path.string(), "--plot", (out_.path() / "both.png").string()});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("| hearth "), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("| again "), std::string::npos) << c.out;
  EXPECT_TRUE(std::filesystem::exists(out_.path() / "both.png"));
  // Users against a rate share no axis; one name twice gives two columns nobody can tell apart.
  const ProcessResult mixed = run_process({hearth_bin("hearth"), "bench", "--compare", json_path.string(),
                                           rate_path.string()});
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_NE(mixed.err.find("compare closed-loop runs (--users) with each other"), std::string::npos) << mixed.err;
  const ProcessResult twice = run_process({hearth_bin("hearth"), "bench", "--compare", json_path.string(),
                                           json_path.string()});
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_NE(twice.err.find("two runs are named \"hearth\""), std::string::npos) << twice.err;
}

TEST_F(BenchTest, RefusedRequestsAreCountedByStatusAndFailAStrictRun) {
  // No chat template for this base model: every chat request is refused with 400.
  const auto json_path = out_.path() / "refused.json";
  const ProcessResult r = bench({"--api", "chat", "--users", "2", "--duration", "1", "--json", json_path.string(),
                                 "--strict"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json::object refused = read_json(json_path);
  const json::object& level = refused.at("levels").at(0).as_object();
  EXPECT_EQ(level.at("completed").as_int64(), 0);
  EXPECT_GT(level.at("errors").at("HTTP 400").as_int64(), 0);
  EXPECT_NE(level.at("first_error").as_string().find("HTTP 400: "), std::string::npos);
  EXPECT_NE(r.out.find("100.0% ("), std::string::npos) << r.out;

  // Nothing listening: an actionable error before any level.
  const ProcessResult none = run_process({hearth_bin("hearth"), "bench", "--url", "http://127.0.0.1:1/v1"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("Connection refused"), std::string::npos) << none.err;
  const ProcessResult bad = run_process({hearth_bin("hearth"), "bench", "--users", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--users: \"0\""), std::string::npos) << bad.err;
  // A flag the mode would not use is refused, not dropped.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused_flags = {
      {{"--prompts", "p.txt", "--input-tokens", "8"}, "--input-tokens has no effect with --prompts"},
      {{"--compare", "a.json", "--users", "4"}, "--users has no effect with --compare"},
      {{"--users", "4", "--max-in-flight", "8"}, "--max-in-flight has no effect with closed-loop users"},
      {{"--timeout", "1e9"}, "--timeout: from 0 to 86400 seconds"},
  };
  for (const auto& [flags, message] : refused_flags) {
    std::vector<std::string> argv = {hearth_bin("hearth"), "bench"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const ProcessResult f = run_process(argv);
    EXPECT_EQ(f.exit_code, 2) << message;
    EXPECT_NE(f.err.find(message), std::string::npos) << f.err;
  }
}

}  // namespace
}  // namespace hearth::testing
