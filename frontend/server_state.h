// The frontend's shared state, for its rooms: the HTTP session (session.cpp), admission
// (admission.cpp, a pure function), the generation pump (pump.cpp), the metrics page
// (metrics_page.cpp) and the server's start, accept loop and drain (frontend_server.cpp).
// Internal to frontend/.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "chat/tool_calls.h"
#include "common/log.h"
#include "common/process.h"
#include "frontend/adapters.h"
#include "frontend/admission.h"
#include "frontend/dialects.h"
#include "frontend/embeddings.h"
#include "frontend/frontend_server.h"
#include "frontend/metrics.h"
#include "frontend/openai.h"
#include "frontend/prompt.h"
#include "frontend/reasoning.h"
#include "frontend/text_stream.h"
#include "ipc/broker_client.h"
#include "ipc/weights_segment.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

int64_t unix_seconds();
// `prefix` and 16 random hex digits.
std::string random_id(std::string_view prefix);
double seconds_since(std::chrono::steady_clock::time_point t);

class Session;

// Counts a load or unload thread for the server's lifetime (FrontendServer::run waits
// until none is left).
struct AdminWorker;

// One HTTP request being generated: its choices (one broker slot each) and what has been
// sent. Only the pump thread touches it after submission, except `client_gone`.
struct Generation {
  struct Choice {
    uint32_t slot = 0;
    uint32_t generation = 0;  // the slot's claim count when we took it
    bool slot_held = true;
    int32_t consumed = 0;
    std::optional<TextStream> text;
    std::string finish_reason;
    std::chrono::steady_clock::time_point last_token;  // when the pump last saw its tokens
    bool done = false;       // no more text will come for it
    bool announced = false;  // the first stream chunk (with the role) went out
    bool finish_sent = false;  // the stream chunk with its finish_reason went out
    std::vector<ApiTokenLogprob> logprobs;
    std::optional<ReasoningSplitter> reasoning;  // with a reasoning parser
    std::string reasoning_text;            // the reasoning so far (bodies keep it whole)
    int32_t reasoning_tokens = 0;          // tokens produced inside it
    std::optional<ToolCallParser> tools;  // when the model may call tools
    std::string content;                  // the text that is not tool calls
    std::vector<ApiToolCall> calls;
    size_t calls_sent = 0;                // streamed so far
    double logprob_sum = 0.0;             // best_of ranks choices by their mean
    std::vector<float> embedding;         // an embedding's pooled vector, read when its slot is done
  };
  // An embeddings request: one choice per input, each submitted with its own prompt.
  struct Embeddings {
    std::vector<std::vector<int32_t>> inputs;
    int32_t dimensions = 0;  // values kept of each vector
    bool base64 = false;
  };
  ApiRequest request;
  AdapterRef adapter;  // the resident LoRA adapter its model names (slot -1: the base model)
  ApiResponseHead head;
  std::unique_ptr<EventStream> events;  // a streamed kMessages / kResponses request: its typed events
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  bool reasoning = false;        // split the reasoning from the answer (--reasoning-parser)
  bool opens_reasoning = false;  // the prompt ends inside the reasoning
  int32_t reasoning_budget = -1;  // reasoning tokens a choice may spend; -1: no limit
  bool budget_in_engine = false;  // the engine closes the reasoning at the budget (RequestSpec::reasoning_budget)
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // of those, found in the engine's prefix cache (the most any choice found)
  std::string echo_text;
  std::vector<Choice> choices;
  std::optional<Embeddings> embeddings;
  bool in_active = false;  // in the server's `active` list (an embeddings request may also still be queued)
  std::weak_ptr<Session> session;
  std::atomic<bool> client_gone{false};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // Waiting in the frontend's queue for slots: the submission still to make, how many
  // samples have yet to get a slot, and since when it waits (for the queue time).
  SubmitRequest pending;  // its spec's seed is sample 0's; sample i draws with seed + i
  int32_t samples_left = 0;
  std::chrono::steady_clock::time_point submitted;  // when its latest slot was claimed
  bool queue_time_seen = false;
  std::chrono::steady_clock::time_point first_token_at;
  // For the access log: the pump writes them, a session may read them while it runs.
  std::atomic<int64_t> ttft_us{-1};
  std::atomic<int32_t> output_tokens{0};
  std::string finish_reasons;  // the choices', comma-separated
  bool first_token_seen = false;
  bool stream_started = false;  // stream bytes were sent (so the status is 200)
  bool finished = false;
  bool failed = false;
  Status failure;  // why a choice failed (the pump's): the whole request ends with it
};

struct FrontendServer::Impl : std::enable_shared_from_this<FrontendServer::Impl> {
  FrontendOptions options;
  std::optional<AttachedWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<PromptBuilder> prompts;
  ReasoningFormat reasoning = ReasoningFormat::kNone;  // --reasoning-parser
  // The think tags' ids where each is one token of the vocabulary (-1 otherwise): then a
  // thinking budget is the engine's, which closes the reasoning and lets the answer follow.
  int32_t think_open_id = -1, think_close_id = -1;
  ModelFacts facts;  // what admission checks requests against (frontend/admission.h)
  FrontendAdapters adapters;  // the instance's resident LoRA adapters (frontend/adapters.h)
  std::filesystem::path shm_dir;  // where the instance's segments are
  std::atomic<int> admin_workers{0};  // load/unload threads running (run() waits for them)
  std::mutex adapter_counts_mu;  // guards `adapter_requests`
  std::map<std::string, uint64_t> adapter_requests;  // adapter name -> requests admitted
  std::string model_id;
  std::string system_fingerprint;
  std::optional<BrokerClient> client;
  asio::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::atomic<bool> stopping{false};
  // Draining (after drain()): no new connections; requests in flight finish until
  // `drain_deadline`, then end with an error; run() returns once nothing is left.
  std::atomic<bool> draining{false};
  std::atomic<int64_t> drain_deadline_ns{0};  // steady clock
  std::optional<asio::steady_timer> drain_timer;
  std::mutex sessions_mutex;  // guards `sessions`
  std::vector<std::weak_ptr<Session>> sessions;
  std::atomic<int> open_sessions{0};
  std::atomic<int64_t> pump_beat_ns{0};  // steady clock of the pump's last round
  std::atomic<bool> engine_up{false};
  // Steady-clock ns since when no engine is up (0 while one is; set by the pump): requests
  // in flight wait engine_wait from then, and one arriving later than that gets 503 at once.
  std::atomic<int64_t> engine_down_since_ns{0};
  std::mutex mutex;  // guards `active` and `queue`
  std::list<std::shared_ptr<Generation>> active;  // followed by the pump (Generation::in_active)
  std::deque<std::shared_ptr<Generation>> queue;  // waiting for slots, first come first served
  std::thread pump;
  std::string model_label;               // model_name="..." for /metrics
  // Counters for /metrics.
  std::atomic<uint64_t> errors_total{0}, tokens_total{0}, prompt_tokens_total{0};
  std::atomic<uint64_t> rejected_queue_full{0}, rejected_queue_timeout{0}, rejected_engine_down{0},
      rejected_connections{0};
  std::array<std::atomic<uint64_t>, 4> finished_by_reason{};  // stop, length, tool_calls, abort
  LatencyHistogram time_to_first_token, request_duration, queue_time;
  LatencyHistogram time_per_output_token{kTokenLatencyBounds}, inter_token_latency{kTokenLatencyBounds};
  std::mutex responses_mu;  // guards `responses`
  std::map<std::pair<std::string, int>, uint64_t> responses;  // (route, HTTP status) -> count
  void count_response(std::string_view route, int status) {
    std::lock_guard lock(responses_mu);
    ++responses[{std::string(route), status}];
  }
  void count_finish(std::string_view reason) {
    static constexpr std::string_view kReasons[] = {"stop", "length", "tool_calls", "abort"};
    for (size_t i = 0; i < std::size(kReasons); ++i) {
      if (kReasons[i] == reason) finished_by_reason[i].fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Whether no engine has served for longer than engine_wait (a restart would be done by now).
  bool engine_known_down(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const {
    const int64_t since = engine_down_since_ns.load(std::memory_order_relaxed);
    return since != 0 && now.time_since_epoch().count() - since > std::chrono::nanoseconds(options.engine_wait).count();
  }
  // The model a request names: the base model (slot -1) or a loaded adapter; kNotFound
  // naming what is served otherwise.
  Result<AdapterRef> resolve_model(const ApiRequest& request) const;
  // Whether the engine serves the adapter segment this frontend reads (it published its
  // nonce in the broker when it started).
  bool engine_serves_adapters() const {
    return client->broker().header().engine_lora_nonce.load(std::memory_order_acquire) == adapters.nonce();
  }
  // Whether a request that names adapter slot `slot` under load id `id` waits in this
  // frontend's queue for a broker slot.
  bool adapter_queued(uint32_t slot, uint64_t id);
  // The slots a queued generation still needs, claimed in order; false when every slot is
  // busy (it stays queued), and the error when a submission failed otherwise.
  Result<bool> claim_slots(Generation& g);
  // An admitted request: its slots now, or a place in the queue; the error (429 when the
  // queue is full, or a failed submission) otherwise.
  Status start(const std::shared_ptr<Generation>& g);
  // Puts a generation in `active` (once): the pump follows its slots. Under `mutex`.
  void follow(const std::shared_ptr<Generation>& g);
  // Values in the model's embeddings (its hidden size).
  size_t embedding_dim() const { return static_cast<size_t>(weights->config.dim); }
  void pump_queue();
  // A request given up on: its slots the engine has not taken go back at once (so they
  // never look busy to the next client), the others are cancelled and go back when the
  // engine lets go of them. False when none is still held.
  bool give_up(Generation& g) {
    bool held = false;
    for (auto& c : g.choices) {
      if (!c.slot_held) continue;
      if (!client->holds(c.slot, c.generation)) {  // taken from us (see advance): not ours to touch
        c.slot_held = false;
        c.done = true;
        continue;
      }
      if (client->withdraw(c.slot)) {
        c.slot_held = false;
        c.done = true;
      } else {
        client->cancel(c.slot);
        held = true;
      }
    }
    return held;
  }

  Status load(const FrontendOptions& o);
  Status listen(const FrontendOptions& o);
  void accept();
  void pump_loop();
  void advance(Generation& g);
  std::string render_metrics();  // frontend/metrics_page.cpp
  void render_counters(std::string& out);
  void render_engine(std::string& out);
  void render_lora(std::string& out);
  // --lenient-fields: says once per field name that requests carry it and it is ignored.
  void note_ignored_field(const std::string& name) {
    std::lock_guard lock(ignored_mu);
    if (ignored_fields.size() < 256 && ignored_fields.insert(name).second) {
      HEARTH_LOG_WARN("requests carry the unknown field {}; ignored (--lenient-fields)", name);
    }
  }
  std::mutex ignored_mu;
  std::set<std::string> ignored_fields;

  // Whether an engine serves the instance, as the pump last saw it (every round).
  bool engine_ready() const { return engine_up.load(std::memory_order_relaxed); }
  // An engine is up when its heartbeat is fresh and its process runs (a killed engine is
  // noticed at once, a wedged one within the heartbeat bound).
  bool probe_engine() const {
    if (!client->engine_alive(std::chrono::milliseconds(3000))) return false;
    const BrokerHeader& h = client->broker().header();
    const int32_t pid = h.engine_pid.load(std::memory_order_relaxed);
    return pid > 0 && process_alive(pid, h.engine_start_time.load(std::memory_order_relaxed));
  }
  bool drain_expired() const {
    return draining.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now().time_since_epoch().count() > drain_deadline_ns.load();
  }
  size_t active_count() {
    std::lock_guard lock(mutex);
    return active.size();
  }
  void begin_drain(std::chrono::milliseconds timeout);
  void watch_drain();
  void release_handlers();
};

struct AdminWorker {
  explicit AdminWorker(FrontendServer::Impl& s) : server(s) { server.admin_workers.fetch_add(1); }
  ~AdminWorker() { server.admin_workers.fetch_sub(1); }
  AdminWorker(const AdminWorker&) = delete;
  AdminWorker& operator=(const AdminWorker&) = delete;
  FrontendServer::Impl& server;
};

}  // namespace hearth
