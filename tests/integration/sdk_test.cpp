// The client SDKs users reach for, against hearth serve on stories260K with the built-in
// chatml template: the OpenAI Node SDK's chat.completions.parse with a zod schema
// (streamed and not) and a forced tool call, and the Vercel AI SDK's generateObject and
// streamObject (tests/integration/node/sdk_check.mjs). Skips, saying why, without node or
// without the npm packages (setup.sh installs them where npm is).
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "tests/integration/instance.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path kNodeDir = std::filesystem::path(HEARTH_TEST_NODE_DIR);

TEST(SdkTest, OpenAiAndVercelAiSdksGetValidObjectsAndToolCalls) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const auto which = run_process({"/bin/sh", "-c", "command -v node"});
  if (which.exit_code != 0 || which.out.empty()) GTEST_SKIP() << "node is not installed";
  const std::string node = which.out.substr(0, which.out.find('\n'));
  if (!std::filesystem::exists(kNodeDir / "node_modules" / "openai")) {
    GTEST_SKIP() << "the SDKs are not installed: npm ci --prefix " << kNodeDir.string();
  }
  TempDir shm(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "");
  ChildProcess serve({hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", "sdk",
                      "--shm-dir", shm.path().string(), "--ctx", "512", "--slots", "16", "--chat-template", "chatml"});
  const auto line = serve.read_line(60s);
  ASSERT_TRUE(line.has_value()) << serve.err();
  const size_t v1 = line->find("/v1");
  ASSERT_NE(v1, std::string::npos) << *line;
  const std::string url = line->substr(line->find("http://"), v1 + 3 - line->find("http://"));
  const auto r = run_process({node, (kNodeDir / "sdk_check.mjs").string()}, {"HEARTH_URL=" + url});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* check : {"openai.parse", "openai.stream.parse", "openai.tools.required", "ai.generateObject",
                            "ai.streamObject"}) {
    EXPECT_NE(r.out.find(std::string("{\"check\":\"") + check + "\",\"ok\":true"), std::string::npos)
        << check << ":\n" << r.out;
  }
}

}  // namespace
}  // namespace hearth::testing
