// The frontend's /metrics page: its own counters and histograms, the engine's figures
// from the broker header, and the tensor-parallel group's from the tp segment.
#include <mutex>

#include "common/version.h"
#include "frontend/server_state.h"
#include "ipc/tp_segment.h"

namespace hearth {

namespace {

// The tensor-parallel group of the instance, read from its tp segment at each scrape
// (rank 0 may have replaced it since the last one); nothing when there is none.
void render_tp_metrics(std::string& out, const FrontendOptions& o) {
  const auto dir = o.shm_dir.empty() ? shm_dir_default() : o.shm_dir;
  auto tp = TpSegment::attach(segment_path(dir, o.instance, "tp"), /*writable=*/false);
  if (!tp.is_ok()) return;
  const TpHeader& h = tp->header();
  const uint64_t epoch = h.epoch.load(std::memory_order_acquire);
  const bool up = h.group_state.load(std::memory_order_acquire) == static_cast<uint32_t>(TpGroupState::kActive);
  render_metric(out, "hearth_tp_ranks", "gauge", "Ranks of the tensor-parallel engine group", h.tp_size);
  render_metric(out, "hearth_tp_group_up", "gauge", "1 while every rank of the group is in its current epoch",
                up ? 1 : 0);
  render_metric(out, "hearth_tp_group_epoch", "gauge", "Epoch of the engine group (bumped by every formation)", epoch);
  render_metric(out, "hearth_tp_group_restarts_total", "counter",
                "Times the engine group formed again after it broke or rank 0 restarted", h.restarts.load());
  struct Family {
    const char* name;
    const char* type;
    const char* help;
  };
  const Family families[] = {
      {"hearth_tp_rank_up", "gauge", "1 when the rank runs and has joined the group's current epoch"},
      {"hearth_tp_rank_steps_total", "counter", "Forward steps the rank ran"},
      {"hearth_tp_rank_step_seconds_total", "counter", "Time the rank spent in forward steps, collectives included"},
      {"hearth_tp_rank_last_step_seconds", "gauge", "The rank's latest forward step"},
  };
  for (const Family& f : families) {
    render_metric_header(out, f.name, f.type, f.help);
    for (int r = 0; r < tp->tp_size(); ++r) {
      const TpRankEntry& e = tp->rank(r);
      double v = 0;
      if (f.name == families[0].name) {
        const int32_t pid = e.pid.load(std::memory_order_relaxed);
        v = up && e.epoch.load() == epoch && e.state.load() == static_cast<uint32_t>(TpRankState::kJoined) &&
                    pid != 0 && process_alive(pid, e.start_time.load())
                ? 1
                : 0;
      } else if (f.name == families[1].name) {
        v = static_cast<double>(e.steps.load(std::memory_order_relaxed));
      } else if (f.name == families[2].name) {
        v = static_cast<double>(e.step_ns.load(std::memory_order_relaxed)) / 1e9;
      } else {
        v = static_cast<double>(e.last_step_ns.load(std::memory_order_relaxed)) / 1e9;
      }
      out += fmt::format("{}{{rank=\"{}\"}} {}\n", f.name, r, v);
    }
  }
}

}  // namespace

// Names follow vLLM's where the meaning is the same (prompt and generation tokens, TTFT,
// time per output token, inter-token latency, end-to-end and queue time, running and
// waiting requests, KV-cache usage, preemptions, finished requests by reason), with a
// model_name label; the rest are hearth's own.
// This frontend's own counters: HTTP answers, rejections, tokens, finished choices.
void FrontendServer::Impl::render_counters(std::string& out) {
  FrontendServer::Impl& s = *this;
  const std::string& m = s.model_label;
  render_metric_header(out, "hearth_http_requests_total", "counter",
                       "HTTP requests answered, by route and status (probes and scrapes not counted)");
  {
    std::lock_guard lock(s.responses_mu);
    for (const auto& [key, n] : s.responses) {
      out += fmt::format("hearth_http_requests_total{{{},code=\"{}\"}} {}\n", metric_label("route", key.first),
                         key.second, n);
    }
  }
  render_metric(out, "hearth_http_errors_total", "counter", "HTTP requests answered with an error status",
                static_cast<double>(s.errors_total.load()));
  render_metric_header(out, "hearth_requests_rejected_total", "counter",
                       "Generation requests turned away before they ran, by reason");
  const std::pair<const char*, const std::atomic<uint64_t>*> rejected[] = {
      {"queue_full", &s.rejected_queue_full},
      {"queue_timeout", &s.rejected_queue_timeout},
      {"engine_down", &s.rejected_engine_down},
      {"connections", &s.rejected_connections}};
  for (const auto& [reason, n] : rejected) {
    out += fmt::format("hearth_requests_rejected_total{{reason=\"{}\"}} {}\n", reason, n->load());
  }
  render_metric(out, "hearth_prompt_tokens_total", "counter", "Prompt tokens prefilled (once per choice)",
                static_cast<double>(s.prompt_tokens_total.load()), m);
  render_metric(out, "hearth_generation_tokens_total", "counter", "Tokens generated and sent to clients",
                static_cast<double>(s.tokens_total.load()), m);
  render_metric_header(out, "hearth_request_success_total", "counter",
                       "Choices that finished, by finish reason (abort: the client left)");
  const char* reasons[] = {"stop", "length", "tool_calls", "abort"};
  for (size_t i = 0; i < std::size(reasons); ++i) {
    out += fmt::format("hearth_request_success_total{{{},finished_reason=\"{}\"}} {}\n", m, reasons[i],
                       s.finished_by_reason[i].load());
  }
}

// The resident LoRA adapters: loaded, each one's requests, and (as vLLM's
// vllm:lora_requests_info) the adapters this frontend's requests run and wait with.
void FrontendServer::Impl::render_lora(std::string& out) {
  if (!adapters.present()) return;
  const std::vector<LoraSlotInfo> loaded = adapters.list();
  render_metric(out, "hearth_lora_adapters_loaded", "gauge", "LoRA adapters resident in the instance's adapter segment",
                static_cast<double>(loaded.size()), model_label);
  render_metric_header(out, "hearth_lora_requests_total", "counter", "Requests admitted for each LoRA adapter");
  {
    std::lock_guard lock(adapter_counts_mu);
    for (const auto& [name, n] : adapter_requests) {
      out += fmt::format("hearth_lora_requests_total{{{}}} {}\n", metric_label("adapter", name), n);
    }
  }
  std::set<std::string> running, waiting;
  {
    std::lock_guard lock(mutex);
    for (const auto& g : active) {
      if (g->adapter.slot >= 0 && !g->finished) running.insert(g->adapter.name);
    }
    for (const auto& g : queue) {
      if (g->adapter.slot >= 0) waiting.insert(g->adapter.name);
    }
  }
  render_metric_header(out, "hearth_lora_requests_info", "gauge",
                       "The adapters this frontend's requests run with and wait for a slot with (the value: when, in "
                       "Unix seconds)");
  out += fmt::format("hearth_lora_requests_info{{{},{},{}}} {}\n", metric_label("max_lora", std::to_string(adapters.capacity())),
                     metric_label("running_lora_adapters", fmt::format("{}", fmt::join(running, ","))),
                     metric_label("waiting_lora_adapters", fmt::format("{}", fmt::join(waiting, ","))), unix_seconds());
}

// The engine's figures, from the broker header it keeps current.
void FrontendServer::Impl::render_engine(std::string& out) {
  FrontendServer::Impl& s = *this;
  const BrokerHeader& h = s.client->broker().header();
  const std::string& m = s.model_label;
  size_t queued = 0;
  {
    std::lock_guard lock(s.mutex);
    queued = s.queue.size();
  }
  render_metric(out, "hearth_num_requests_running", "gauge", "Sequences the engine runs",
                static_cast<double>(h.stat_running.load()), m);
  render_metric(out, "hearth_num_requests_waiting", "gauge",
                "Sequences waiting for the engine, and requests in this frontend's queue waiting for a slot",
                static_cast<double>(h.stat_waiting.load() + queued), m);
  render_metric(out, "hearth_frontend_queue_requests", "gauge", "Requests in this frontend's queue waiting for a slot",
                static_cast<double>(queued));
  const double blocks = h.stat_kv_blocks_total.load();
  render_metric(out, "hearth_kv_cache_usage_perc", "gauge", "KV-cache usage, 0 to 1 (1: every block in use)",
                blocks > 0 ? h.stat_kv_blocks_used.load() / blocks : 0.0, m);
  render_metric(out, "hearth_num_preemptions_total", "counter",
                "Running sequences sent back to waiting for lack of KV-cache blocks",
                static_cast<double>(h.stat_preemptions.load()), m);
  render_metric(out, "hearth_prefix_cache_queries_total", "counter",
                "Prompt tokens looked up in the prefix cache (each request's first admission)",
                static_cast<double>(h.stat_prefix_queries.load()), m);
  render_metric(out, "hearth_prefix_cache_hits_total", "counter",
                "Prompt tokens found in the prefix cache: hits / queries is the hit ratio",
                static_cast<double>(h.stat_prefix_hits.load()), m);
  render_metric(out, "hearth_kv_adopted_total", "counter",
                "Requests a restarted engine resumed from the resident KV cache, without computing them again",
                static_cast<double>(h.stat_kv_adopted.load()), m);
  render_metric(out, "hearth_kv_adopt_rejected_total", "counter",
                "Resumed requests whose adopted KV cache failed its check and were computed again",
                static_cast<double>(h.stat_kv_adopt_rejected.load()), m);
  render_metric(out, "hearth_spec_decode_num_drafts_total", "counter",
                "Speculative decoding: sequence steps that drafted tokens", static_cast<double>(h.stat_spec_drafts.load()), m);
  render_metric(out, "hearth_spec_decode_num_draft_tokens_total", "counter", "Speculative decoding: tokens drafted",
                static_cast<double>(h.stat_spec_draft_tokens.load()), m);
  render_metric(out, "hearth_spec_decode_num_accepted_tokens_total", "counter",
                "Speculative decoding: drafted tokens kept (each one a token without a step of its own)",
                static_cast<double>(h.stat_spec_accepted.load()), m);
  render_metric_header(out, "hearth_spec_decode_num_accepted_tokens_per_pos_total", "counter",
                       "Speculative decoding: drafted tokens kept at each draft position (0: the first)");
  for (size_t i = 0; i < kSpecPositions; ++i) {
    out += fmt::format("hearth_spec_decode_num_accepted_tokens_per_pos_total{{{}{}position=\"{}\"}} {}\n", m,
                       m.empty() ? "" : ",", i, h.stat_spec_accepted_at[i].load());
  }
  render_metric(out, "hearth_engine_up", "gauge", "1 when an engine heartbeat is fresh", s.engine_ready() ? 1 : 0);
  render_metric(out, "hearth_engine_running", "gauge", "Sequences the engine runs", h.stat_running.load());
  render_metric(out, "hearth_engine_waiting", "gauge", "Sequences waiting for the engine", h.stat_waiting.load());
  render_metric(out, "hearth_kv_blocks_used", "gauge", "KV cache blocks in use", h.stat_kv_blocks_used.load());
  render_metric(out, "hearth_kv_blocks_capacity", "gauge", "KV cache blocks", h.stat_kv_blocks_total.load());
  render_metric(out, "hearth_engine_steps_total", "counter", "Engine steps", static_cast<double>(h.stat_steps.load()));
  render_metric(out, "hearth_engine_cancelled_total", "counter",
                "Sequences the engine stopped early: cancelled, or their frontend was gone",
                static_cast<double>(h.stat_cancelled.load()));
  render_metric(out, "hearth_engine_slots_reclaimed_total", "counter",
                "Request slots of gone frontends the engine returned to the free list",
                static_cast<double>(h.stat_reclaimed.load()));
}

std::string FrontendServer::Impl::render_metrics() {
  FrontendServer::Impl& s = *this;
  const std::string& m = s.model_label;
  std::string out;
  render_counters(out);
  render_engine(out);
  render_lora(out);
  render_tp_metrics(out, s.options);
  s.time_to_first_token.render(out, "hearth_time_to_first_token_seconds",
                               "From a generation request's arrival to its first token", m);
  s.time_per_output_token.render(out, "hearth_time_per_output_token_seconds",
                                 "Per request: from its first token to its last, over the tokens after the first", m);
  s.inter_token_latency.render(out, "hearth_inter_token_latency_seconds", "Between successive tokens of a choice", m);
  s.request_duration.render(out, "hearth_e2e_request_latency_seconds",
                            "From a generation request's arrival to its last token, for requests that completed", m);
  s.queue_time.render(out, "hearth_request_queue_time_seconds",
                      "From a generation request's arrival until the engine admitted it (the frontend's queue "
                      "included)",
                      m);
  render_metric(out, "hearth_build_info", "gauge", "The build serving: version and source commit", 1,
                metric_label("version", hearth_version()) + "," + metric_label("commit", hearth_commit()));
  render_process_metrics(out);
  return out;
}

}  // namespace hearth
