// `hearth quantize` and `hearth eval` as a user runs them: real processes, real files.
#include <gtest/gtest.h>

#include <fstream>

#include <boost/json.hpp>

#include "tests/integration/hearth_bin.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

ProcessResult hearth(const std::string& command, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {hearth_bin("hearth"), command};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_process(argv);
}

// Text the model writes itself (sampled), as calibration and evaluation text.
std::string sampled_text(const std::string& model, int first_seed, int n) {
  std::string text;
  for (int seed = first_seed; seed < first_seed + n; ++seed) {
    const auto r = hearth("generate", {"--model", model, "--prompt", "Once upon a time", "--temperature", "1",
                                       "--seed", std::to_string(seed), "--max-tokens", "400", "--ignore-eos"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    text += r.out + "\n";
  }
  return text;
}

TEST(CliQuantizeTest, QuantizeThenEvaluateAgainstTheFloatModel) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir dir;
  const auto calibration = dir.path() / "calibration.txt";
  const auto eval_text = dir.path() / "eval.txt";
  std::ofstream(calibration) << sampled_text(model.string(), 1, 4);
  std::ofstream(eval_text) << sampled_text(model.string(), 500, 3);
  const auto out = dir.path() / "q.gguf";

  const auto q = hearth("quantize", {model.string(), "--out", out.string(), "--bits", "8", "--group-size", "32",
                                     "--calibration", calibration.string(), "--samples", "8", "--seq-len", "128",
                                     "--skip-indivisible"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.err.find("layer 5/5"), std::string::npos) << q.err;
  EXPECT_NE(q.err.find("blk.0.ffn_down.weight kept unquantized"), std::string::npos) << q.err;
  EXPECT_NE(q.err.find("peak RSS"), std::string::npos) << q.err;

  const auto e = hearth("eval", {out.string(), "--text", eval_text.string(), "--reference", model.string(), "--ctx",
                                 "128", "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto v = boost::json::parse(e.out).as_object();
  EXPECT_GT(v.at("chunks").as_int64(), 2);
  const auto& kl = v.at("kl_divergence").as_object();
  EXPECT_LT(kl.at("mean").as_double(), 0.01);  // 8-bit: nearly the float model
  EXPECT_LE(kl.at("low").as_double(), kl.at("mean").as_double());
  EXPECT_GT(v.at("top1_agreement").as_object().at("mean").as_double(), 0.9);
  const double ppl = v.at("perplexity").as_object().at("mean").as_double();
  const double ref_ppl = v.at("reference_perplexity").as_object().at("mean").as_double();
  EXPECT_NEAR(ppl, ref_ppl, 0.05 * ref_ppl);

  // The quantized file serves: greedy text still starts the story.
  const auto g = hearth("generate", {"--model", out.string(), "--prompt", "Once upon a time", "--max-tokens", "12"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("Once upon a time, there was a little", 0), 0u) << g.out;
}

TEST(CliQuantizeTest, BadInputGetsAClearErrorAndWritesNothing) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir dir;
  const auto short_text = dir.path() / "short.txt";
  std::ofstream(short_text) << "Once upon a time there was a cat.";
  const auto out = (dir.path() / "q.gguf").string();
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string words;
  };
  const Case cases[] = {
      {{model.string(), "--out", out, "--calibration", short_text.string(), "--skip-indivisible"}, 1, "lower --samples"},
      {{model.string(), "--out", out, "--method", "rtn", "--group-size", "32"}, 1, "--skip-indivisible"},
      {{model.string(), "--out", out, "--method", "rtn", "--group-size", "48"}, 2, "multiple of 32"},
      {{model.string(), "--out", out, "--method", "rtn", "--asym", "--skip-indivisible"}, 1, "--asym"},
      {{model.string(), "--out", out, "--act-order", "--method", "rtn", "--skip-indivisible"}, 1, "--method gptq"},
      {{model.string(), "--out", out, "--bits", "3", "--method", "rtn"}, 2, "--bits"},
      {{model.string(), "--out", out}, 2, "--calibration"},
      {{model.string(), "--out", (dir.path() / "dir").string(), "--method", "rtn"}, 1, "Hugging Face model directory"},
      {{model.string(), "--out", out, "--method", "rtn", "--calibration", short_text.string()}, 2, "no calibration"},
      {{(dir.path() / "absent.gguf").string(), "--out", out, "--method", "rtn"}, 1, "absent.gguf"},
  };
  for (const Case& c : cases) {
    const auto r = hearth("quantize", c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.words << ": " << r.err;
    EXPECT_NE(r.err.find(c.words), std::string::npos) << r.err;
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) left.push_back(e.path().filename());
    EXPECT_EQ(left, std::vector<std::string>{"short.txt"}) << c.words << ": output left behind";
  }
  // eval: a text shorter than one chunk.
  const auto e = hearth("eval", {model.string(), "--text", short_text.string(), "--ctx", "128"});
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_NE(e.err.find("fewer than one chunk"), std::string::npos) << e.err;
}

}  // namespace
}  // namespace hearth::testing
