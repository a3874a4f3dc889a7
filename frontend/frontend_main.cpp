// hearth-frontend: the OpenAI-compatible HTTP server of an instance. Reads the tokenizer
// and chat template from the weights segment and talks to the engine through the broker.
// Under systemd it takes its listening socket from socket activation.
#include <signal.h>
#include <systemd/sd-daemon.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "common/api_keys.h"
#include "frontend/reasoning.h"
#include "common/args.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/program.h"
#include "frontend/frontend_server.h"

namespace {

constexpr const char* kUsage = R"(usage: hearth-frontend [options]

Serves the OpenAI API for an instance (start hearth-loader and hearth-engine first).

  --instance NAME     instance (default "default")
  --shm-dir DIR       shared-memory directory (default $HEARTH_SHM_DIR or /dev/shm)
  --host HOST         address to listen on (default 127.0.0.1)
  --port PORT         port (default 8080; 0 picks a free one)
  --threads N         HTTP threads (default 2)
  --max-body BYTES    largest request body (default 1048576)
  --engine-wait MS    how long a request waits for an engine before 503 (default 10000)
  --drain-timeout MS  on SIGTERM/SIGINT, how long requests in flight may still run (default 30000)
  --listen-fd N       serve on this inherited listening socket instead of --host/--port
  --lenient-fields    accept and ignore request fields no OpenAI schema has (logged once per
                      name) instead of answering 400; fields hearth does not implement are
                      refused either way
  --chat-template NAME|FILE
                      chat template: a built-in (chatml, llama2, llama3, mistral, zephyr) or a
                      Jinja file (default: the model's; without one, chat requests get 400)
  --tool-call-parser hermes|llama3_json|mistral
                      how the model writes tool calls (default: read from the template)
  --reasoning-parser deepseek_r1|qwen3|none
                      return a thinking model's <think> reasoning apart from its answer
                      (reasoning_content, thinking blocks, reasoning items; default none)
  --pooling last|mean|cls
                      how /v1/embeddings pools a text's final hidden states (default: the
                      model's own, from GGUF pooling_type or sentence-transformers'
                      1_Pooling, else last)
  --reasoning-budget N
                      reasoning tokens a choice may spend: then </think> is put in and the
                      answer follows (ended instead where the think tags are not single
                      tokens; -1: no limit, the default; 0: ask the template not to think)
  --served-model-name NAME
                      the model's id in /v1/models and responses (repeatable: aliases clients
                      may name; default: the model's own name and the instance's)
  --api-key KEY       accept only requests with Authorization: Bearer KEY on /v1/* and the
                      tokenizer routes (repeatable; also $HEARTH_API_KEY, comma-separated)
  --api-key-file FILE keys, one per line (repeatable)
  --metrics-auth      /metrics wants a key too (/health and /ready stay open)
  --cors-origin ORIGIN
                      browsers on ORIGIN may call the API (repeatable; * for any)
  --max-queue N       requests that wait for a slot when all are busy (default 256; 0: 429 at once)
  --queue-timeout MS  how long one waits there before 429 (default 30000)
  --max-connections N open connections at most; more are answered 503 (default 4096)
  --read-timeout MS   how long a client may take to send a request, or to start the next one on
                      a kept-alive connection (default 30000)
  --log-prompts       the access log shows each request's body (by default it never does)
  --no-webui          no chat page at / (it is served by default, without a key)
  --allow-runtime-lora
                      POST /v1/load_lora_adapter {"lora_name","lora_path"} loads a LoRA adapter
                      into the instance's adapter segment and /v1/unload_lora_adapter
                      {"lora_name"} unloads one once its requests finish (API-key guarded;
                      off by default). Requests select an adapter by naming it as their model
  --log-level LEVEL   trace, debug, info, warn, error or off (default info; $HEARTH_LOG_LEVEL)
  --log-format FMT    text or json, one object per line (default text; $HEARTH_LOG_FORMAT)
  --version           print the version and exit

Prints {"event":"listening","port":N} on stdout once it accepts connections. With systemd
socket activation (one socket passed), that socket is used instead of --host/--port.
Several frontends may serve one instance at once, on one shared socket or on the same
port (SO_REUSEPORT). SIGTERM or SIGINT drains: no new connections, requests in flight
finish (or end with 503 after --drain-timeout), then it exits; a second signal exits at
once.
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth-frontend: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

// The server's options from the command line (and a socket systemd passed); the drain
// timeout beside them.
hearth::Result<hearth::FrontendOptions> frontend_options(const hearth::Args& args, std::chrono::milliseconds* drain_timeout) {
  using namespace hearth;
  FrontendOptions o;
  o.instance = args.get("instance").value_or("default");
  o.shm_dir = args.get("shm-dir").value_or("");
  o.host = args.get("host").value_or("127.0.0.1");
  auto port = args.get_int("port", 0, 65535);
  auto threads = args.get_int("threads", 1, 256);
  auto body = args.get_int("max-body", 1024, 1ll << 30);
  auto wait = args.get_int("engine-wait", 0, 3600000);
  auto drain = args.get_int("drain-timeout", 0, 3600000);
  auto listen_fd = args.get_int("listen-fd", 0, 1 << 20);
  auto max_queue = args.get_int("max-queue", 0, 1 << 20);
  auto queue_timeout = args.get_int("queue-timeout", 0, 3600000);
  auto max_connections = args.get_int("max-connections", 1, 1 << 20);
  auto read_timeout = args.get_int("read-timeout", 100, 3600000);
  for (const Status* st : {&port.status(), &threads.status(), &body.status(), &wait.status(), &drain.status(),
                           &listen_fd.status(), &max_queue.status(), &queue_timeout.status(),
                           &max_connections.status(), &read_timeout.status()}) {
    if (!st->is_ok()) return *st;
  }
  auto access = access_flags(args);
  if (!access.is_ok()) return access.status();
  o.api_keys = std::move(access->api_keys);
  o.metrics_auth = access->metrics_auth;
  o.cors_origins = std::move(access->cors_origins);
  o.served_model_names = args.get_all("served-model-name");
  o.max_queue = static_cast<int>(max_queue->value_or(256));
  o.queue_timeout = std::chrono::milliseconds(queue_timeout->value_or(30000));
  o.max_connections = static_cast<int>(max_connections->value_or(4096));
  o.read_timeout = std::chrono::milliseconds(read_timeout->value_or(30000));
  o.log_prompts = args.has("log-prompts");
  o.webui = !args.has("no-webui");
  o.allow_runtime_lora = args.has("allow-runtime-lora");
  o.port = static_cast<uint16_t>(port->value_or(8080));
  o.threads = static_cast<int>(threads->value_or(2));
  o.max_body_bytes = static_cast<size_t>(body->value_or(1 << 20));
  o.engine_wait = std::chrono::milliseconds(wait->value_or(10000));
  o.lenient_fields = args.has("lenient-fields");
  o.chat_template = args.get("chat-template").value_or("");
  o.tool_call_parser = args.get("tool-call-parser").value_or("");
  o.reasoning_parser = args.get("reasoning-parser").value_or("");
  if (Status st = reasoning_format_from_name(o.reasoning_parser).status(); !st.is_ok()) return st;
  if (const auto pooling = args.get("pooling")) {
    const auto p = pooling_from_name(*pooling);
    if (!p) return make_error(ErrorCode::kInvalidArgument, "--pooling must be last, mean or cls, not \"{}\"", *pooling);
    o.pooling = *p;
  }
  auto budget = args.get_int("reasoning-budget", -1, 1 << 30);
  if (!budget.is_ok()) return budget.status();
  o.reasoning_budget = static_cast<int>(budget->value_or(-1));
  *drain_timeout = std::chrono::milliseconds(drain->value_or(30000));
  if (*listen_fd) {
    o.listen_fd = static_cast<int>(**listen_fd);
  } else if (const int n = sd_listen_fds(1); n == 1) {
    o.listen_fd = SD_LISTEN_FDS_START;
  } else if (n > 1) {
    return make_error(ErrorCode::kInvalidArgument, "systemd passed {} sockets; the frontend takes exactly one", n);
  }
  return o;
}

int main(int argc, char** argv) {
  using namespace hearth;
  daemon_block_signals();
  const Status logging = log_init("frontend");
  auto args = Args::parse({argv + 1, argv + argc},
                          with_program_flags({"instance", "shm-dir", "host", "port", "threads", "max-body",
                                              "engine-wait", "drain-timeout", "listen-fd", "chat-template",
                                              "tool-call-parser", "reasoning-parser", "reasoning-budget", "pooling",
                                              "served-model-name", "api-key", "api-key-file",
                                              "cors-origin", "max-queue", "queue-timeout", "max-connections",
                                              "read-timeout"},
                                             kProgramValueFlags),
                          with_program_flags({"help", "lenient-fields", "metrics-auth", "log-prompts", "no-webui",
                                              "allow-runtime-lora"},
                                             kProgramBoolFlags));
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (auto exit = handle_program_flags(*args, "hearth-frontend", logging)) return *exit;
  std::chrono::milliseconds drain_timeout{};
  auto options = frontend_options(*args, &drain_timeout);
  if (!options.is_ok()) return usage_error(options.status().message());
  const FrontendOptions& o = *options;
  auto server = FrontendServer::create(o);
  if (!server.is_ok()) {
    std::fprintf(stderr, "hearth-frontend: %s\n", server.status().to_string().c_str());
    return 1;
  }
  FrontendServer& frontend = **server;
  std::atomic<bool> done{false};
  // Signals, and the watchdog: pinged only while the thread that follows requests runs,
  // so a wedged frontend is restarted by systemd.
  std::thread signals([&frontend, &done, drain_timeout] {
    const auto interval = daemon_watchdog_interval(std::chrono::milliseconds(1000));
    bool draining = false;
    while (!done.load()) {
      const int sig = daemon_wait_signal(std::min(interval, std::chrono::milliseconds(200)));
      if (frontend.healthy(std::max(interval, std::chrono::milliseconds(1000)))) daemon_notify_watchdog();
      if (sig != SIGTERM && sig != SIGINT) continue;
      if (!draining) {
        draining = true;
        HEARTH_LOG_INFO("signal {}: draining for up to {} ms", sig, drain_timeout.count());
        daemon_notify_stopping();
        frontend.drain(drain_timeout);
      } else {
        HEARTH_LOG_WARN("second signal: stopping now");
        frontend.stop();
        return;
      }
    }
  });
  const std::string listening = boost::json::serialize(boost::json::object{{"event", "listening"}, {"port", frontend.port()}});
  HEARTH_LOG_INFO("listening on port {}", frontend.port());
  std::printf("%s\n", listening.c_str());
  std::fflush(stdout);
  daemon_notify_ready(listening);
  const Status st = frontend.run();
  done.store(true);
  signals.join();
  if (!st.is_ok()) {
    std::fprintf(stderr, "hearth-frontend: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
