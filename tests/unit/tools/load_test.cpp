// hearth bench's parts without a server: URL parsing, the event-stream splitter and chunk
// reader, percentiles and level summaries, the JSON round trip, synthetic workloads, and
// the PNG plot read back with libpng.
#include <gtest/gtest.h>
#include <png.h>

#include <set>
#include <sstream>

#include <boost/json.hpp>

#include "loader/model.h"
#include "tests/test_util.h"
#include "tools/load_client.h"
#include "tools/load_report.h"
#include "tools/load_workload.h"
#include "tools/png_plot.h"

namespace hearth::cli {
namespace {

namespace json = boost::json;
using testing::TempDir;

TEST(LoadEndpointTest, UrlsAreParsedAndBadOnesRefusedByName) {
  auto e = parse_endpoint("http://127.0.0.1:8080/v1");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, "8080");
  EXPECT_EQ(e->prefix, "/v1");
  e = parse_endpoint("http://localhost");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->port, "80");
  EXPECT_EQ(e->prefix, "/v1");
  e = parse_endpoint("http://[::1]:9000/api/v1/");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, "9000");
  EXPECT_EQ(e->prefix, "/api/v1");
  EXPECT_EQ(parse_endpoint("https://example.com").status().code(), ErrorCode::kUnsupported);
  for (const char* bad : {"127.0.0.1:8080", "http://", "http://host:0", "http://host:99999", "http://host:x1",
                          "http://[::1", "http://:80"}) {
    EXPECT_EQ(parse_endpoint(bad).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(SseSplitterTest, EventsComeOutWhateverTheCuts) {
  const std::string stream =
      ": keep-alive comment\n\ndata: {\"a\":1}\n\nevent: x\r\ndata: first\r\ndata: second\r\n\r\ndata:[DONE]\n\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "first\nsecond", "[DONE]"};
  for (size_t cut = 1; cut <= stream.size(); ++cut) {
    SseSplitter sse;
    std::vector<std::string> events;
    for (size_t i = 0; i < stream.size(); i += cut) sse.feed(std::string_view(stream).substr(i, cut), events);
    EXPECT_EQ(events, expected) << "pieces of " << cut;
  }
}

TEST(ReadChunkTest, TextUsageErrorsAndTheEndAreTold) {
  EXPECT_TRUE(read_chunk("[DONE]").done);
  auto c = read_chunk(R"({"choices":[{"index":0,"text":"Once"}]})");
  EXPECT_TRUE(c.has_content);
  EXPECT_TRUE(c.error.empty());
  EXPECT_FALSE(read_chunk(R"({"choices":[{"index":0,"text":""}]})").has_content);
  EXPECT_TRUE(read_chunk(R"({"choices":[{"delta":{"content":"Hi"}}]})").has_content);
  EXPECT_FALSE(read_chunk(R"({"choices":[{"delta":{"role":"assistant"}}]})").has_content);
  EXPECT_TRUE(read_chunk(R"({"choices":[{"delta":{"tool_calls":[{"index":0}]}}]})").has_content);
  c = read_chunk(R"({"choices":[],"usage":{"prompt_tokens":65,"completion_tokens":32,
                    "prompt_tokens_details":{"cached_tokens":48}}})");
  EXPECT_FALSE(c.has_content);
  EXPECT_EQ(c.prompt_tokens, 65);
  EXPECT_EQ(c.completion_tokens, 32);
  EXPECT_EQ(c.cached_tokens, 48);
  c = read_chunk(R"({"error":{"message":"the engine stopped","type":"server_error"}})");
  EXPECT_EQ(c.error, "the engine stopped");
  EXPECT_FALSE(c.malformed);
  EXPECT_TRUE(read_chunk("not json").malformed);
  EXPECT_TRUE(read_chunk("[1,2]").malformed);
  EXPECT_TRUE(read_chunk(R"({"object":"x"})").malformed);
}

TEST(PercentilesTest, InterpolateBetweenNearestRanksAsNumpyDoes) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100, unsorted
  const Percentiles p = percentiles(v);
  EXPECT_EQ(p.n, 100u);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  EXPECT_DOUBLE_EQ(p.p50, 50.5);
  EXPECT_DOUBLE_EQ(p.p90, 90.1);
  EXPECT_DOUBLE_EQ(p.p99, 99.01);
  EXPECT_DOUBLE_EQ(p.max, 100);
  EXPECT_EQ(percentiles({}).n, 0u);
  EXPECT_DOUBLE_EQ(percentiles({7}).p99, 7);
}

RequestRecord record(double ttft, double end, int64_t out, std::vector<double> gaps) {
  RequestRecord r;
  r.first_token_s = ttft;
  r.end_s = end;
  r.output_tokens = out;
  r.content_events = out;
  r.prompt_tokens = 65;
  r.cached_tokens = 48;
  r.token_gaps_s = std::move(gaps);
  r.http_status = 200;
  return r;
}

TEST(SummarizeTest, ThroughputLatencyAndErrorsOfALevel) {
  LevelRun run;
  run.level = {LoadLevel::Kind::kUsers, 4};
  run.wall_s = 2.0;
  run.records.push_back(record(0.1, 1.1, 11, {0.1, 0.1}));
  run.records.push_back(record(0.3, 0.8, 6, {0.2}));
  RequestRecord refused;
  refused.http_status = 429;
  refused.error = "HTTP 429";
  refused.error_detail = "the server is full";
  run.records.push_back(refused);
  RequestRecord lost;
  lost.error = "reset";
  run.records.push_back(lost);
  const LevelSummary s = summarize(run);
  EXPECT_EQ(s.kind, "users");
  EXPECT_EQ(s.requests, 4u);
  EXPECT_EQ(s.completed, 2u);
  EXPECT_DOUBLE_EQ(s.error_ratio(), 0.5);
  EXPECT_EQ(s.errors.at("HTTP 429"), 1u);
  EXPECT_EQ(s.errors.at("reset"), 1u);
  EXPECT_EQ(s.first_error, "HTTP 429: the server is full");
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1.0);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 8.5);
  EXPECT_DOUBLE_EQ(s.mean_prompt_tokens, 65);
  EXPECT_DOUBLE_EQ(s.mean_cached_tokens, 48);
  EXPECT_DOUBLE_EQ(s.mean_output_tokens, 8.5);
  EXPECT_EQ(s.ttft_ms.n, 2u);
  EXPECT_NEAR(s.ttft_ms.p50, 200, 1e-9);
  // TPOT: (1.1 - 0.1) / 10 and (0.8 - 0.3) / 5, both 100 ms.
  EXPECT_NEAR(s.tpot_ms.p50, 100, 1e-9);
  EXPECT_NEAR(s.tpot_ms.p99, 100, 1e-9);
  EXPECT_EQ(s.itl_ms.n, 3u);
  EXPECT_NEAR(s.itl_ms.max, 200, 1e-9);
  EXPECT_NEAR(s.e2e_s.max, 1.1, 1e-12);

  const std::string table = format_table({s});
  EXPECT_NE(table.find("| users |"), std::string::npos) << table;
  EXPECT_NE(table.find("50.0% (1 HTTP 429, 1 reset)"), std::string::npos) << table;
  EXPECT_NE(table.find("65 (48 cached) / 8"), std::string::npos) << table;

  // The JSON a run writes reads back to the same summary.
  auto back = level_from_json(json::parse(json::serialize(level_json(s))));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->kind, s.kind);
  EXPECT_EQ(back->requests, s.requests);
  EXPECT_EQ(back->completed, s.completed);
  EXPECT_EQ(back->errors, s.errors);
  EXPECT_EQ(back->first_error, s.first_error);
  EXPECT_DOUBLE_EQ(back->output_tokens_per_s, s.output_tokens_per_s);
  EXPECT_EQ(back->itl_ms.n, s.itl_ms.n);
  // Boost.JSON's parser may differ from the printed double in the last bit.
  EXPECT_NEAR(back->e2e_s.p50, s.e2e_s.p50, 1e-12);
  EXPECT_NEAR(back->ttft_ms.p99, s.ttft_ms.p99, 1e-9);
  EXPECT_FALSE(level_from_json(json::parse(R"({"kind":"users"})")).is_ok());
  EXPECT_FALSE(level_from_json(json::parse("[]")).is_ok());

  const std::string both = format_comparison({{"hearth", {s}}, {"peer", {s}}});
  EXPECT_NE(both.find("| hearth "), std::string::npos) << both;
  EXPECT_NE(both.find("| peer "), std::string::npos) << both;
}

TEST(WorkloadTest, SyntheticPromptsShareTheirPrefixAndDifferAfterIt) {
  WorkloadSpec spec;
  spec.model = "m";
  spec.input_tokens = 40;
  spec.shared_prefix = 0.5;
  spec.num_prompts = 20;
  auto prompts = synthetic_prompts(spec, nullptr);
  ASSERT_TRUE(prompts.is_ok()) << prompts.status().to_string();
  ASSERT_EQ(prompts->size(), 20u);
  auto words = [](const std::string& s) {
    std::vector<std::string> w;
    std::istringstream in(s);
    for (std::string x; in >> x;) w.push_back(x);
    return w;
  };
  const auto first = words(prompts->front());
  std::set<std::string> distinct;
  for (const std::string& p : *prompts) {
    const auto w = words(p);
    EXPECT_EQ(w.size(), 40u);
    EXPECT_TRUE(std::equal(w.begin(), w.begin() + 20, first.begin())) << p;
    distinct.insert(p);
  }
  EXPECT_EQ(distinct.size(), 20u);

  // With a tokenizer, each prompt is exactly input_tokens tokens.
  const auto model = testing::shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  auto loaded = model_open(model, {});
  ASSERT_TRUE(loaded.is_ok());
  auto tokenizer = tokenizer_load(loaded->tokenizer);
  ASSERT_TRUE(tokenizer.is_ok());
  for (double shared : {0.0, 0.75, 1.0}) {
    spec.shared_prefix = shared;
    spec.input_tokens = 64;
    prompts = synthetic_prompts(spec, tokenizer->get());
    ASSERT_TRUE(prompts.is_ok()) << prompts.status().to_string();
    std::vector<TokenId> head;
    std::set<std::vector<TokenId>> openings;  // each prompt's first 8 tokens
    for (const std::string& p : *prompts) {
      auto ids = (*tokenizer)->encode(p, {.add_special = false, .parse_special = false});
      ASSERT_TRUE(ids.is_ok());
      EXPECT_EQ(ids->size(), 64u) << p;
      const size_t n = static_cast<size_t>(shared * 64) - (shared > 0 ? 1 : 0);  // the boundary token may merge
      if (head.empty()) head.assign(ids->begin(), ids->begin() + static_cast<long>(n));
      EXPECT_TRUE(std::equal(head.begin(), head.end(), ids->begin())) << p;
      openings.emplace(ids->begin(), ids->begin() + 8);
    }
    // Nothing shared: the prompts differ from their first tokens on.
    if (shared == 0.0) {
      EXPECT_EQ(openings.size(), prompts->size());
    } else {
      EXPECT_EQ(openings.size(), 1u);
    }
  }
}

TEST(WorkloadTest, PromptFilesTakeTextJsonAndMessagesAndRefuseWhatTheyCannotUse) {
  WorkloadSpec spec;
  spec.model = "m";
  spec.output_tokens = 9;
  spec.ignore_eos = true;
  auto bodies = bodies_from_prompts(spec, "plain words\n\n\"a JSON string\"\n{\"prompt\": \"p\", \"max_tokens\": 3}\r\n");
  ASSERT_TRUE(bodies.is_ok()) << bodies.status().to_string();
  ASSERT_EQ(bodies->size(), 3u);
  const json::object b0 = json::parse((*bodies)[0]).as_object();
  EXPECT_EQ(b0.at("prompt").as_string(), "plain words");
  EXPECT_EQ(b0.at("max_tokens").as_int64(), 9);
  EXPECT_TRUE(b0.at("stream").as_bool());
  EXPECT_TRUE(b0.at("ignore_eos").as_bool());
  EXPECT_TRUE(b0.at("stream_options").at("include_usage").as_bool());
  EXPECT_EQ(json::parse((*bodies)[1]).at("prompt").as_string(), "a JSON string");
  EXPECT_EQ(json::parse((*bodies)[2]).at("max_tokens").as_int64(), 3);

  spec.extra = json::parse(R"({"logit_bias": {"13": -100}, "max_tokens": 5})").as_object();
  const json::object extra = json::parse(request_body(spec, "x")).as_object();
  EXPECT_EQ(extra.at("logit_bias").at("13").as_int64(), -100);
  EXPECT_EQ(extra.at("max_tokens").as_int64(), 5);  // --extra-body wins
  spec.extra.clear();
  EXPECT_FALSE(bodies_from_prompts(spec, "{\"prompt\": \"p\", \"temperature\": 1}").is_ok());
  EXPECT_FALSE(bodies_from_prompts(spec, "{\"prompt\": 5}").is_ok());
  EXPECT_FALSE(bodies_from_prompts(spec, "{\"prompt\": \"p\", \"max_tokens\": 0}").is_ok());
  EXPECT_FALSE(bodies_from_prompts(spec, "{broken").is_ok());
  EXPECT_FALSE(bodies_from_prompts(spec, "\n  \n").is_ok());
  EXPECT_FALSE(bodies_from_prompts(spec, R"({"messages": [{"role": "user", "content": "hi"}]})").is_ok());
  spec.chat = true;
  bodies = bodies_from_prompts(spec, R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(bodies.is_ok()) << bodies.status().to_string();
  EXPECT_EQ(json::parse(bodies->front()).at("messages").at(0).at("content").as_string(), "hi");
  EXPECT_FALSE(json::parse(bodies->front()).as_object().contains("prompt"));
}

TEST(PngPlotTest, APlotReadsBackWithLibpng) {
  EXPECT_EQ(nice_ticks(9.3), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0.04), (std::vector<double>{0, 0.01, 0.02, 0.03, 0.04}));
  EXPECT_EQ(nice_ticks(0).size(), 2u);

  Canvas glyphs(40, 10);
  glyphs.text(0, 0, "A", Canvas::kBlack);
  EXPECT_EQ(glyphs.at(0, 0), Canvas::kWhite);  // 'A' is round at the top: 0x0E
  EXPECT_EQ(glyphs.at(1, 0), Canvas::kBlack);
  EXPECT_EQ(glyphs.at(0, 4), Canvas::kBlack);  // its bar
  EXPECT_EQ(glyphs.at(4, 4), Canvas::kBlack);

  std::vector<NamedRun> runs(2);
  runs[0].name = "hearth";
  runs[1].name = "peer";
  for (double users : {1.0, 4.0, 16.0}) {
    for (NamedRun& r : runs) {
      LevelSummary l;
      l.load = users;
      l.ttft_ms = percentiles({users * 10, users * 20});
      l.tpot_ms = percentiles({users});
      l.e2e_s = percentiles({users / 10});
      l.output_tokens_per_s = users * 100;
      r.levels.push_back(l);
    }
  }
  const Canvas c = plot_panels("hearth bench", load_panels(runs));
  TempDir dir;
  const auto path = dir.path() / "plot.png";
  ASSERT_TRUE(write_png(path, c).is_ok());

  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  ASSERT_NE(png_image_begin_read_from_file(&image, path.c_str()), 0) << image.message;
  EXPECT_EQ(static_cast<int>(image.width), c.width());
  EXPECT_EQ(static_cast<int>(image.height), c.height());
  image.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> rgb(PNG_IMAGE_SIZE(image));
  ASSERT_NE(png_image_finish_read(&image, nullptr, rgb.data(), 0, nullptr), 0) << image.message;
  // Every pixel is its palette colour; both runs' colours are drawn.
  std::set<int> colours;
  for (int y = 0; y < c.height(); ++y) {
    for (int x = 0; x < c.width(); ++x) {
      const Rgb want = kPalette[c.at(x, y)];
      const uint8_t* got = &rgb[(static_cast<size_t>(y) * c.width() + x) * 3];
      ASSERT_TRUE(got[0] == want.r && got[1] == want.g && got[2] == want.b) << x << "," << y;
      colours.insert(c.at(x, y));
    }
  }
  EXPECT_TRUE(colours.contains(Canvas::kFirstSeriesColour));
  EXPECT_TRUE(colours.contains(Canvas::kFirstSeriesColour + 1));
  EXPECT_FALSE(write_png(dir.path() / "no" / "such" / "dir.png", c).is_ok());
}

}  // namespace
}  // namespace hearth::cli
