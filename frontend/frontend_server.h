// FrontendServer: hearth's HTTP front door (Boost.Beast, HTTP/1.1 keep-alive, a few
// threads for many connections), speaking the OpenAI API.
//
// It reads the tokenizer, chat template and model name from the instance's weights
// segment (no model path needed, no model code linked), tokenizes and validates each
// request, hands it to the engine through the broker (one slot per choice), and streams
// the produced tokens back as text: Server-Sent Events for `stream: true`, one JSON
// body otherwise. A pump thread follows the slots of every request in flight; a client
// that disconnects has its slots cancelled at the engine's next step.
//
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,
// GET /ready, POST /tokenize, POST /detokenize, GET /metrics. Every response carries an
// x-request-id (the client's, when it sent a usable one) and generation bodies a
// system_fingerprint naming the build and the weights. run() blocks until stop()
// (callable from any thread, e.g. a signal handler thread).
//
// In front of the engine: API keys (Bearer, compared in constant time) on /v1/* and the
// tokenizer routes, CORS for the origins allowed, a bounded wait queue for requests that
// find every slot busy (429 with Retry-After once it is full or their wait is over), 503
// at once while no engine has served for longer than engine_wait, a cap on connections
// and a read timeout. Each request ends with one access-log line.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/pooling.h"
#include "common/status.h"

namespace hearth {

struct FrontendOptions {
  std::string instance = "default";
  std::filesystem::path shm_dir;  // empty: shm_dir_default()
  std::string host = "127.0.0.1";
  uint16_t port = 8080;            // 0: any free port (see port())
  int listen_fd = -1;              // an already listening socket (systemd socket activation)
  int threads = 2;
  size_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds engine_wait{10000};  // how long requests wait for an engine before 503
  bool lenient_fields = false;     // accept and ignore unknown request fields (logged once per name)
  std::string chat_template;       // --chat-template: a built-in name or a Jinja file; "": the model's
  std::string tool_call_parser;    // --tool-call-parser: hermes, llama3_json, mistral; "": from the template
  std::string reasoning_parser;    // --reasoning-parser: deepseek_r1, qwen3; "": the output is one text
  int reasoning_budget = -1;       // --reasoning-budget: reasoning tokens a choice may spend; -1: any, 0: no thinking
  Pooling pooling = Pooling::kNone;  // --pooling for /v1/embeddings; kNone: the model's own, else last
  std::vector<std::string> api_keys;   // Bearer keys accepted on /v1/* and the tokenizer routes; empty: open
  bool metrics_auth = false;           // /metrics wants a key too
  std::vector<std::string> cors_origins;  // origins browsers may call from ("*": any); empty: no CORS
  std::vector<std::string> served_model_names;  // the model's ids (first: the one responses name); empty: its own
  int max_queue = 256;                 // requests that may wait for a slot; 0: 429 at once when all are busy
  std::chrono::milliseconds queue_timeout{30000};  // how long one may wait there before 429
  int max_connections = 4096;          // open connections; more are answered 503 and closed
  std::chrono::milliseconds read_timeout{30000};  // to send a whole request, or to start the next on a kept-alive one
  bool log_prompts = false;            // the access log shows the prompt (never otherwise)
  bool webui = true;                   // the chat page at / (frontend/webui.h); --no-webui: 404
  bool allow_runtime_lora = false;     // POST /v1/load_lora_adapter and /v1/unload_lora_adapter answer
  std::string loader_program;          // what reads adapters for them (hearth-loader --load-lora); "": beside this one
};

class FrontendServer {
 public:
  static Result<std::unique_ptr<FrontendServer>> create(const FrontendOptions& options);
  ~FrontendServer();

  // The port it listens on (after create()).
  uint16_t port() const;
  // Serves until stop(), or until a drain has finished.
  Status run();
  // Stops at once: connections and requests in flight are dropped.
  void stop();
  // Stops gracefully: no new connections (they wait in the listening socket's queue for
  // another frontend when it is shared), idle keep-alive connections close, requests in
  // flight run to their end for up to `timeout`; what is left then ends with 503 (or an
  // error event on a stream) and its slots are cancelled. run() returns when nothing is
  // left. Callable from any thread, more than once (the first timeout holds).
  void drain(std::chrono::milliseconds timeout);
  // Whether the thread that follows requests ran within `max_age` (for the watchdog).
  bool healthy(std::chrono::milliseconds max_age) const;

  struct Impl;  // opaque; public so that the connection handlers can name it

 private:
  FrontendServer() = default;
  std::shared_ptr<Impl> impl_;
};

}  // namespace hearth
