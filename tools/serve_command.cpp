// `hearth serve`: one command that runs a whole instance: hearth-loader, hearth-engine and
// hearth-frontend as child processes, each started once the previous one is ready. A
// child that dies is started again (the loader's weights stay resident, so an engine
// comes back in milliseconds); SIGTERM / SIGINT stop the children, frontend first.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/args.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "tools/commands.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth serve --model PATH [options]

Runs hearth-loader, hearth-engine and hearth-frontend for one instance and keeps them
running. The OpenAI API is then at http://HOST:PORT/v1.

  --model PATH             GGUF file, Hugging Face directory or llama2.c checkpoint
  --host HOST              listen address (default 127.0.0.1)
  --port PORT              port (default 8080)
  --instance NAME          instance name (default "default"); instances run side by side
  --shm-dir DIR            shared-memory directory (default $HEARTH_SHM_DIR or /dev/shm)
  --tokenizer PATH         tokenizer for containers that keep it apart
  --quant int8|int4        quantize the weights when loading them
  --slots N, --ctx N, --kv-blocks N, --max-batch-size N, --max-batched-tokens N,
  --threads N              passed to hearth-engine
)";

std::string sibling(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

struct Child {
  std::string name;
  std::vector<std::string> argv;
  std::unique_ptr<ChildProcess> process;
  int restarts = 0;
  std::chrono::steady_clock::time_point started;
  std::string ready_line;
};

// Starts `c` and waits for its first stdout line (its ready line).
Status start(Child& c, std::chrono::seconds timeout) {
  c.process = std::make_unique<ChildProcess>(c.argv);
  c.started = std::chrono::steady_clock::now();
  const auto line = c.process->read_line(timeout);
  if (!line) {
    c.process->signal(SIGTERM);
    c.process->wait(std::chrono::seconds(5));
    return make_error(ErrorCode::kUnavailable, "{} did not become ready: {}", c.name, c.process->err());
  }
  HEARTH_LOG_INFO("{} ready: {}", c.name, *line);
  c.ready_line = *line;
  return Status::ok();
}

}  // namespace

int serve_command(const std::vector<std::string>& argv) {
  auto args = Args::parse(argv,
                          {"model", "host", "port", "instance", "shm-dir", "tokenizer", "quant", "slots", "ctx",
                           "kv-blocks", "max-batch-size", "max-batched-tokens", "threads"},
                          {"help"});
  if (!args.is_ok()) {
    std::fprintf(stderr, "hearth serve: %s\n\n%s", args.status().message().c_str(), kUsage);
    return 2;
  }
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args->get("model")) {
    std::fprintf(stderr, "hearth serve: --model is required\n\n%s", kUsage);
    return 2;
  }
  daemon_block_signals();
  const std::string instance = args->get("instance").value_or("default");
  std::vector<std::string> common = {"--instance", instance};
  if (auto d = args->get("shm-dir")) common.insert(common.end(), {"--shm-dir", *d});

  Child loader{"hearth-loader", {sibling("hearth-loader"), "--model", *args->get("model")}};
  if (auto t = args->get("tokenizer")) loader.argv.insert(loader.argv.end(), {"--tokenizer", *t});
  if (auto q = args->get("quant")) loader.argv.insert(loader.argv.end(), {"--quant", *q});
  Child engine{"hearth-engine", {sibling("hearth-engine"), "--wait-weights", "60"}};
  for (const char* flag : {"slots", "ctx", "kv-blocks", "max-batch-size", "max-batched-tokens", "threads"}) {
    if (auto v = args->get(flag)) engine.argv.insert(engine.argv.end(), {std::string("--") + flag, *v});
  }
  Child frontend{"hearth-frontend",
                 {sibling("hearth-frontend"), "--host", args->get("host").value_or("127.0.0.1"), "--port",
                  args->get("port").value_or("8080")}};
  std::vector<Child*> children = {&loader, &engine, &frontend};
  for (Child* c : children) c->argv.insert(c->argv.end(), common.begin(), common.end());

  for (Child* c : children) {
    if (Status st = start(*c, std::chrono::seconds(c == &loader ? 3600 : 120)); !st.is_ok()) {
      std::fprintf(stderr, "hearth serve: %s\n", st.to_string().c_str());
      for (Child* other : children) {
        if (other->process) other->process->signal(SIGTERM);
      }
      return 1;
    }
  }
  // The frontend says which port it got (--port 0 picks a free one).
  std::string port = args->get("port").value_or("8080");
  if (const size_t at = frontend.ready_line.find("\"port\":"); at != std::string::npos) {
    port = frontend.ready_line.substr(at + 7, frontend.ready_line.find_first_of(",}", at) - at - 7);
  }
  std::printf("serving http://%s:%s/v1 (instance %s)\n", args->get("host").value_or("127.0.0.1").c_str(),
              port.c_str(), instance.c_str());
  std::fflush(stdout);
  daemon_notify_ready("serving");

  // Supervise: restart what dies, stop everything on SIGTERM / SIGINT.
  while (true) {
    const int sig = daemon_wait_signal(std::chrono::milliseconds(200));
    if (sig == SIGTERM || sig == SIGINT) break;
    for (Child* c : children) {
      const auto status = c->process->wait(std::chrono::milliseconds(0));
      if (!status) continue;
      HEARTH_LOG_WARN("{} exited with status {}; starting it again", c->name, *status);
      if (std::chrono::steady_clock::now() - c->started < std::chrono::seconds(10) && ++c->restarts > 5) {
        std::fprintf(stderr, "hearth serve: %s keeps failing: %s\n", c->name.c_str(), c->process->err().c_str());
        for (Child* other : children) other->process->signal(SIGTERM);
        return 1;
      }
      if (Status st = start(*c, std::chrono::seconds(120)); !st.is_ok()) {
        HEARTH_LOG_ERROR("{}", st.to_string());
      }
    }
  }
  daemon_notify_stopping();
  for (Child* c : {&frontend, &engine, &loader}) {
    c->process->signal(SIGTERM);
    if (!c->process->wait(std::chrono::seconds(30))) c->process->signal(SIGKILL);
  }
  return 0;
}

}  // namespace hearth::cli
