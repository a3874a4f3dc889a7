// The client SDKs users reach for, against hearth serve on stories260K with the built-in
// chatml template: the OpenAI Node SDK's chat.completions.parse with a zod schema
// (streamed and not) and a forced tool call, and the Vercel AI SDK's generateObject and
// streamObject (tests/integration/node/sdk_check.mjs); the Responses, Messages and
// embeddings APIs through the OpenAI, Anthropic and Vercel AI SDKs (dialects_check.mjs); the chat page in
// headless Chromium (webui_check.mjs). Skips, saying why,
// without node or without the npm packages (setup.sh installs them where npm is).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "tests/integration/instance.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path kNodeDir = std::filesystem::path(HEARTH_TEST_NODE_DIR);

// Runs `script` with node against hearth serve on stories260K (built-in chatml template,
// `serve_flags` more) and checks that every name in `checks` passed; skips, saying why,
// without the model, node or the npm packages.
void run_node_checks(const std::string& script, const std::vector<std::string>& serve_flags,
                     std::vector<std::string> env, const std::vector<std::string>& checks) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const auto which = run_process({"/bin/sh", "-c", "command -v node"});
  if (which.exit_code != 0 || which.out.empty()) GTEST_SKIP() << "node is not installed";
  const std::string node = which.out.substr(0, which.out.find('\n'));
  for (const char* package : {"openai", "@anthropic-ai/sdk", "@ai-sdk/anthropic", "@ai-sdk/openai"}) {
    if (!std::filesystem::exists(kNodeDir / "node_modules" / package)) {
      GTEST_SKIP() << "the SDKs are not installed (" << package << "): npm ci --prefix " << kNodeDir.string();
    }
  }
  TempDir shm(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "");
  std::vector<std::string> argv = {hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0",
                                   "--instance", "sdk", "--shm-dir", shm.path().string(), "--ctx", "512",
                                   "--slots", "16", "--chat-template", "chatml"};
  argv.insert(argv.end(), serve_flags.begin(), serve_flags.end());
  ChildProcess serve(argv);
  const auto line = serve.read_line(60s);
  ASSERT_TRUE(line.has_value()) << serve.err();
  const size_t v1 = line->find("/v1");
  ASSERT_NE(v1, std::string::npos) << *line;
  const std::string url = line->substr(line->find("http://"), v1 + 3 - line->find("http://"));
  std::vector<std::string> script_env = {"HEARTH_URL=" + url, "HEARTH_ROOT=" + url.substr(0, url.size() - 3)};
  script_env.insert(script_env.end(), env.begin(), env.end());
  const auto r = run_process({node, (kNodeDir / script).string()}, script_env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& check : checks) {
    EXPECT_NE(r.out.find("{\"check\":\"" + check + "\",\"ok\":true"), std::string::npos) << check << ":\n" << r.out;
  }
}

TEST(SdkTest, OpenAiAndVercelAiSdksGetValidObjectsAndToolCalls) {
  run_node_checks("sdk_check.mjs", {}, {},
                  {"openai.parse", "openai.stream.parse", "openai.tools.required", "ai.generateObject",
                   "ai.streamObject"});
}

// The chat page at / in headless Chromium (Debian's chromium), on a server with an API key:
// it asks for the key, loads with no console error, streams an answer, shows the figures
// of /metrics and keeps the conversation across a reload. A screenshot of it goes where
// $HEARTH_WEBUI_SCREENSHOT says, when set.
TEST(SdkTest, TheChatPageWorksInHeadlessChromium) {
  const auto which = run_process({"/bin/sh", "-c", "command -v chromium"});
  if (which.exit_code != 0 || which.out.empty()) GTEST_SKIP() << "chromium is not installed (apt-get install chromium)";
  std::vector<std::string> env = {"CHROMIUM=" + which.out.substr(0, which.out.find('\n')), "HEARTH_KEY=webui-test-key"};
  if (const char* shot = std::getenv("HEARTH_WEBUI_SCREENSHOT")) env.push_back(std::string("HEARTH_SCREENSHOT=") + shot);
  run_node_checks("webui_check.mjs", {"--api-key", "webui-test-key"}, env,
                  {"webui.loads", "webui.chat", "webui.metrics", "webui.kept", "webui.console"});
}

// The Responses, Messages and embeddings routes through the OpenAI, Anthropic and Vercel
// AI SDKs, unchanged, on a server with an API key (the Anthropic SDK sends it as x-api-key).
TEST(SdkTest, ResponsesMessagesAndEmbeddingsThroughTheOfficialClients) {
  run_node_checks("dialects_check.mjs", {"--api-key", "sdk-test-key"}, {"HEARTH_KEY=sdk-test-key"},
                  {"openai.responses.create", "openai.responses.stream", "openai.responses.parse",
                   "openai.responses.tools", "openai.responses.refused", "anthropic.messages.create",
                   "anthropic.messages.stop_sequences", "anthropic.messages.stream", "anthropic.messages.tools",
                   "anthropic.messages.countTokens", "anthropic.errors", "ai.anthropic.generateText",
                   "ai.anthropic.streamText", "ai.anthropic.tools", "ai.openai.responses.generateText",
                   "ai.openai.responses.streamText", "ai.openai.responses.tools", "openai.embeddings.create",
                   "ai.openai.embedMany"});
}

}  // namespace
}  // namespace hearth::testing
