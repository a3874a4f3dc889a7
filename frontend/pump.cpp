// The frontend's generation pump: one thread that gives queued requests their slots as
// they free up, follows every slot in flight, turns tokens into text for the sessions,
// and ends requests (done, failed, given up on).
#include <algorithm>
#include <random>

#include "common/test_point.h"
#include "common/utf8.h"
#include "frontend/session.h"

namespace hearth {

// Slots now when no request waits ahead of it; else (or when they are all busy) the
// queue, first come first served, while it has room.
Status FrontendServer::Impl::start(const std::shared_ptr<Generation>& g) {
  std::lock_guard lock(mutex);
  Status refused;
  bool started = false;
  if (queue.empty()) {
    auto claimed = claim_slots(*g);
    if (!claimed.is_ok()) {
      refused = claimed.status();
    } else {
      started = *claimed;
    }
  }
  if (started) {
    follow(g);
    return Status::ok();
  }
  if (refused.is_ok() && static_cast<int>(queue.size()) < options.max_queue) {
    queue.push_back(g);
    if (g->embeddings && !g->choices.empty()) follow(g);  // its inputs with slots run meanwhile
    return Status::ok();
  }
  if (refused.is_ok()) {
    ++rejected_queue_full;
    refused = options.max_queue == 0
                  ? make_error(ErrorCode::kResourceExhausted, "all {} request slots are busy; try again",
                               client->broker().n_slots())
                  : make_error(ErrorCode::kResourceExhausted,
                               "all {} request slots are busy and {} requests wait for them; try again",
                               client->broker().n_slots(), queue.size());
  }
  g->failed = true;
  g->samples_left = 0;
  if (give_up(*g)) follow(g);
  return refused;
}

void FrontendServer::Impl::follow(const std::shared_ptr<Generation>& g) {
  if (g->in_active) return;
  g->in_active = true;
  active.push_back(g);
}

Result<bool> FrontendServer::Impl::claim_slots(Generation& g) {
  const int32_t samples =
      g.embeddings ? static_cast<int32_t>(g.embeddings->inputs.size()) : g.request.best_of.value_or(g.request.n);
  const uint64_t seed = g.pending.spec.sampling.seed;  // sample 0's
  if (g.adapter.slot >= 0 && !adapters.holds(g.adapter)) {
    return make_error(ErrorCode::kNotFound, "model: the adapter \"{}\" was unloaded before this request got a slot",
                      g.adapter.name);
  }
  while (g.samples_left > 0) {
    uint32_t generation = 0;
    const int32_t index = samples - g.samples_left;
    if (g.embeddings) g.pending.prompt = g.embeddings->inputs[static_cast<size_t>(index)];
    g.pending.spec.sampling.seed = seed + static_cast<uint64_t>(index);
    auto slot = client->submit(g.pending, &generation);
    g.pending.spec.sampling.seed = seed;
    if (!slot.is_ok()) {
      if (slot.status().code() == ErrorCode::kResourceExhausted) return false;
      return slot.status();
    }
    HEARTH_TEST_POINT("frontend.submitted");  // queued; nothing follows it yet
    Generation::Choice c;
    c.slot = *slot;
    c.generation = generation;
    c.text.emplace(*tokenizer, g.request.stop, /*at_start=*/false);
    if (g.tool_format != ToolCallFormat::kNone) c.tools.emplace(g.tool_format);
    if (g.reasoning) c.reasoning.emplace(g.opens_reasoning);
    g.choices.push_back(std::move(c));
    --g.samples_left;
    g.submitted = std::chrono::steady_clock::now();
  }
  g.pending = SubmitRequest();
  return true;
}

// The queue's head gets slots as they free up; what waited too long, lost its client or
// its engine ends here.
void FrontendServer::Impl::pump_queue() {
  std::vector<std::pair<std::shared_ptr<Generation>, Status>> ended;
  {
    std::lock_guard lock(mutex);
    const auto now = std::chrono::steady_clock::now();
    bool slots_busy = false;
    for (auto it = queue.begin(); it != queue.end();) {
      std::shared_ptr<Generation> g = *it;
      Status why;
      if (g->failed) {  // ended while it waited for more slots (an embeddings request)
        it = queue.erase(it);
        continue;
      }
      if (g->client_gone.load(std::memory_order_acquire)) {
        why = make_error(ErrorCode::kUnavailable, "the client left");
      } else if (now - std::max(g->started, g->submitted) > options.queue_timeout) {
        ++rejected_queue_timeout;
        why = make_error(ErrorCode::kResourceExhausted,
                         "all {} request slots stayed busy for the {} ms this request may wait; try again",
                         client->broker().n_slots(), options.queue_timeout.count());
      } else if (engine_known_down()) {
        ++rejected_engine_down;
        why = make_error(ErrorCode::kUnavailable, "no engine has served this instance for more than {} ms; try again",
                         options.engine_wait.count());
      } else if (drain_expired()) {
        why = make_error(ErrorCode::kUnavailable, "this frontend shut down before the request started; try again");
      } else if (slots_busy) {
        ++it;  // waits behind the head (the rest is only checked for what has ended)
        continue;
      } else {
        auto claimed = claim_slots(*g);
        if (claimed.is_ok() && !*claimed) {
          slots_busy = true;
          if (g->embeddings && !g->choices.empty()) follow(g);
          ++it;
          continue;
        }
        if (claimed.is_ok()) {
          it = queue.erase(it);
          follow(g);
          continue;
        }
        why = claimed.status();
      }
      it = queue.erase(it);
      g->failed = true;
      g->samples_left = 0;
      if (give_up(*g)) follow(g);
      ended.emplace_back(std::move(g), std::move(why));
    }
  }
  for (auto& [g, why] : ended) {
    auto session = g->session.lock();
    if (!session || g->client_gone.load(std::memory_order_acquire)) continue;
    session->post_response(api_status_of(why), dialect_error_body(g->request.endpoint, why),
                           why.code() == ErrorCode::kResourceExhausted || why.code() == ErrorCode::kUnavailable ? "1"
                                                                                                                 : "");
  }
}

// ---------------------------------------------------------------- pump

namespace {

// A tool call's id: Mistral templates want nine letters and digits, others call_<hex>.
std::string tool_call_id(ToolCallFormat format) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  if (format != ToolCallFormat::kMistral) return fmt::format("call_{:016x}{:08x}", rng(), rng() & 0xffffffffu);
  constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id += kAlnum[rng() % kAlnum.size()];
  return id;
}

// The text of a token for logprobs (its bytes, shown lossily when not valid UTF-8).
ApiTokenLogprob token_logprob(const Tokenizer& t, const ProducedToken& p, int32_t top) {
  ApiTokenLogprob out;
  const std::string_view bytes = t.token_bytes(p.id);
  out.token = utf8_sanitize(bytes);
  out.bytes.assign(bytes.begin(), bytes.end());
  out.logprob = p.logprob;
  for (int32_t k = 0; k < top && p.top_ids[k] >= 0; ++k) {
    const std::string_view b = t.token_bytes(p.top_ids[k]);
    out.top.emplace_back(utf8_sanitize(b), p.top_logprobs[k]);
    out.top_bytes.emplace_back(b.begin(), b.end());
  }
  return out;
}

std::string finish_reason_of(FinishReason f) { return f == FinishReason::kLength ? "length" : "stop"; }

// One round of the pump over one generation: it reads each choice's new tokens from its
// slot, turns them into text (stream chunks, or the body kept for the end), finishes the
// choices that ended, and ends the request when all have.
class Round {
 public:
  Round(FrontendServer::Impl& server, Generation& g)
      : s_(server),
        g_(g),
        session_(g.session.lock()),
        gone_(g.client_gone.load(std::memory_order_acquire)),
        stream_(g.request.stream),
        echo_(g.request.echo && g.request.endpoint == ApiEndpoint::kCompletions),
        failure_(g.failure) {}

  // Follows choice `index`; false while its slot still runs.
  bool follow(size_t index);
  // Ends what may not wait any longer (its engine gone too long, the drain's deadline
  // passed) and hands this round's stream bytes to the connection.
  void settle(bool all_done);
  // Every choice is done: the last stream chunks, or the whole body.
  void complete();

 private:
  using Choice = Generation::Choice;
  ApiUsage usage() const;
  void emit(Choice& c, int32_t index, std::string piece, std::vector<ApiTokenLogprob> logprobs);
  void emit_parts(Choice& c, int32_t index, std::string thought, std::string piece,
                  std::vector<ApiTokenLogprob> logprobs);
  void take_calls(Choice& c, std::vector<ToolCall>& calls);
  void taken(Choice& c);
  void observe_tokens(Choice& c, int32_t fresh);
  void push_token(Choice& c, int32_t index, const ProducedToken& t);
  void finish(Choice& c, int32_t index);
  void end_with_error(const Status& st, std::string_view retry_after);

  FrontendServer::Impl& s_;
  Generation& g_;
  std::shared_ptr<Session> session_;
  const bool gone_;
  const bool stream_;
  const bool echo_;
  std::string out_;  // stream bytes produced this round
  Status& failure_;  // the generation's: a choice's failure holds until its end
  std::vector<ProducedToken> fresh_;
};

ApiUsage Round::usage() const {
  ApiUsage u;
  u.prompt_tokens = g_.prompt_tokens;
  u.cached_tokens = g_.cached_tokens;
  for (const auto& c : g_.choices) {
    u.completion_tokens += c.consumed;
    u.reasoning_tokens += c.reasoning_tokens;
  }
  return u;
}

void Round::take_calls(Choice& c, std::vector<ToolCall>& calls) {
  for (ToolCall& call : calls) {
    c.calls.push_back({tool_call_id(g_.tool_format), std::move(call.name), std::move(call.arguments)});
  }
}

// One piece of a choice's text (a token's, or what was held at its end): its reasoning
// apart when there is a reasoning parser, the rest through the tool-call parser when there
// is one, then one stream chunk for it (OpenAI and vLLM send a chunk per token), and one
// for the calls it completed.
void Round::emit(Choice& c, int32_t index, std::string piece, std::vector<ApiTokenLogprob> logprobs) {
  if (!c.reasoning) return emit_parts(c, index, {}, std::move(piece), std::move(logprobs));
  ReasoningSplitter::Split split = c.reasoning->push(piece);
  emit_parts(c, index, std::move(split.reasoning), std::move(split.content), std::move(logprobs));
}

void Round::emit_parts(Choice& c, int32_t index, std::string thought, std::string piece,
                       std::vector<ApiTokenLogprob> logprobs) {
  std::vector<ToolCall> calls;
  std::string content = c.tools ? c.tools->push(piece, calls) : std::move(piece);
  c.content += content;
  c.reasoning_text += thought;
  take_calls(c, calls);
  if (!stream_) {
    for (auto& l : logprobs) c.logprobs.push_back(std::move(l));
    return;
  }
  if (gone_ || !failure_.is_ok()) return;
  if (g_.events) {  // Messages and Responses: typed events
    g_.events->set_usage(usage());
    if (!thought.empty()) out_ += g_.events->reasoning(thought);
    if (!content.empty()) out_ += g_.events->text(content);
    if (c.calls.size() > c.calls_sent) {
      out_ += g_.events->tool_calls({c.calls.begin() + static_cast<long>(c.calls_sent), c.calls.end()});
      c.calls_sent = c.calls.size();
    }
    return;
  }
  if (!thought.empty()) {
    out_ += api_stream_reasoning_chunk(g_.request, g_.head, index, thought, !c.announced);
    c.announced = true;
  }
  if (!content.empty() || !logprobs.empty()) {
    const auto base = static_cast<int32_t>((echo_ ? g_.echo_text.size() : 0) + c.content.size() - content.size());
    if (echo_ && !c.announced) content = g_.echo_text + content;
    const ApiUsage u = usage();
    out_ += api_stream_chunk(g_.request, g_.head, index, content, "", logprobs, !c.announced, base,
                             g_.request.continuous_usage_stats ? &u : nullptr);
    c.announced = true;
  }
  if (c.calls.size() > c.calls_sent) {
    const std::vector<ApiToolCall> fresh(c.calls.begin() + static_cast<long>(c.calls_sent), c.calls.end());
    out_ += api_stream_tool_calls_chunk(g_.request, g_.head, index, fresh, static_cast<int32_t>(c.calls_sent),
                                        !c.announced);
    c.announced = true;
    c.calls_sent = c.calls.size();
  }
}

// The slot is not ours any more: an engine that judged this frontend gone (its heartbeat
// stalled past hearth-engine's bound) freed it. Never touch it again.
void Round::taken(Choice& c) {
  HEARTH_LOG_WARN("slot {} was taken from this frontend while its request ran", c.slot);
  c.slot_held = false;
  c.done = true;
  if (failure_.is_ok()) {
    failure_ = make_error(ErrorCode::kUnavailable, "the engine dropped this request (it judged this frontend gone); try again");
  }
}

void Round::push_token(Choice& c, int32_t index, const ProducedToken& t) {
  ++c.consumed;
  if (!g_.first_token_seen) {
    g_.first_token_seen = true;
    g_.first_token_at = std::chrono::steady_clock::now();
    const double ttft = std::chrono::duration<double>(g_.first_token_at - g_.started).count();
    s_.time_to_first_token.observe(ttft);
    g_.ttft_us.store(static_cast<int64_t>(ttft * 1e6), std::memory_order_relaxed);
    s_.prompt_tokens_total.fetch_add(static_cast<uint64_t>(g_.prompt_tokens) * g_.choices.size(),
                                     std::memory_order_relaxed);
  }
  std::string piece = c.text->push(t.id);
  ++s_.tokens_total;
  g_.output_tokens.fetch_add(1, std::memory_order_relaxed);
  c.logprob_sum += t.logprob;
  std::vector<ApiTokenLogprob> logprobs;
  if (g_.request.logprobs >= 0) logprobs.push_back(token_logprob(*s_.tokenizer, t, g_.request.logprobs));
  if (c.text->stopped()) {  // a stop string: the rest of this choice is not wanted
    s_.client->cancel(c.slot);
    c.done = true;
    c.finish_reason = "stop";
  }
  emit(c, index, std::move(piece), std::move(logprobs));
  // The thinking budget, where the engine cannot close the reasoning (the tags are not
  // tokens of the vocabulary): a choice still reasoning past it is ended there.
  if (c.reasoning && c.reasoning->in_reasoning() && ++c.reasoning_tokens > g_.reasoning_budget &&
      g_.reasoning_budget >= 0 && !c.done && !g_.budget_in_engine) {
    s_.client->cancel(c.slot);
    c.done = true;
    c.finish_reason = "length";
  }
}

// The gap since this choice's previous tokens, shared by the `fresh` tokens of this round
// (the pump sees a step's tokens together).
void Round::observe_tokens(Choice& c, int32_t fresh) {
  if (fresh <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (c.consumed > fresh) {
    const double gap = std::chrono::duration<double>(now - c.last_token).count() / fresh;
    for (int32_t k = 0; k < fresh; ++k) s_.inter_token_latency.observe(gap);
  }
  c.last_token = now;
}

bool Round::follow(size_t i) {
  Choice& c = g_.choices[i];
  const auto index = static_cast<int32_t>(i);
  if (!c.slot_held) return false;
  BrokerClient& client = *s_.client;
  const SlotProgress p = client.progress(c.slot);
  if (!p.held_by(c.generation)) {
    taken(c);
    return false;
  }
  // This round's tokens (and a terminal slot's finish and error, read with `p`) are
  // copied, then the claim checked again: a slot freed and claimed anew while they were
  // read may hold another request's tokens, or a new claim's cleared fields.
  fresh_.clear();
  for (int32_t k = c.consumed; k < p.n_produced && !c.done; ++k) fresh_.push_back(client.token(c.slot, k));
  if (g_.embeddings && p.state == SlotState::kDone) client.embedding(c.slot, s_.embedding_dim(), c.embedding);
  std::atomic_thread_fence(std::memory_order_acquire);  // the copies before the claim's second look
  if ((!fresh_.empty() || p.terminal()) && !client.holds(c.slot, c.generation)) {
    taken(c);
    return false;
  }
  if (gone_ && !p.terminal() && !c.done) {
    client.cancel(c.slot);
    c.done = true;
  }
  if (!g_.queue_time_seen && p.queue_ns != 0) {
    g_.queue_time_seen = true;
    s_.queue_time.observe(std::chrono::duration<double>(g_.submitted - g_.started).count() +
                          static_cast<double>(p.queue_ns) * 1e-9);
  }
  g_.cached_tokens = std::max(g_.cached_tokens, p.cached_tokens);
  const int32_t consumed_before = c.consumed;
  for (size_t k = 0; k < fresh_.size() && !c.done; ++k) push_token(c, index, fresh_[k]);
  observe_tokens(c, c.consumed - consumed_before);
  if (p.terminal()) {
    if (p.state == SlotState::kFailed) failure_ = Status(p.error_code, p.error);
    if (p.state == SlotState::kCancelled && !c.done && !gone_ && !g_.failed && failure_.is_ok()) {
      // Not asked for: the engine dropped it, judging this frontend gone (see taken()).
      failure_ = make_error(ErrorCode::kUnavailable, "the engine dropped this request (it judged this frontend gone); try again");
    }
    if (!c.done) {
      c.finish_reason = finish_reason_of(p.finish);
      c.done = true;
      emit(c, index, c.text->finish(), {});
    }
    client.release_from(c.slot, p.state);
    c.slot_held = false;
  }
  if (c.done && !c.finish_sent && !c.finish_reason.empty()) finish(c, index);
  return !p.terminal();
}

// A choice's end: what the reasoning and tool-call parsers held, its finish_reason chunk,
// the count.
void Round::finish(Choice& c, int32_t index) {
  if (c.reasoning) {
    ReasoningSplitter::Split rest = c.reasoning->finish();
    emit_parts(c, index, std::move(rest.reasoning), std::move(rest.content), {});
  }
  if (c.tools) {  // what the parser held: content, or calls the output ended in
    std::vector<ToolCall> calls;
    std::string rest = c.tools->finish(calls);
    c.tools.reset();
    take_calls(c, calls);
    emit(c, index, std::move(rest), {});
  }
  if (!c.calls.empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
  if (stream_ && !gone_ && failure_.is_ok() && !g_.events) {
    const ApiUsage u = usage();
    const ApiUsage* with = g_.request.continuous_usage_stats ? &u : nullptr;
    if (!c.announced) {
      out_ += api_stream_chunk(g_.request, g_.head, index, echo_ ? g_.echo_text : "", "", {}, true, 0, with);
      c.announced = true;
    }
    out_ += api_stream_chunk(g_.request, g_.head, index, "", c.finish_reason, {}, false, 0, with);
  }
  c.finish_sent = true;
  if (!gone_ && !g_.embeddings) s_.count_finish(c.finish_reason);
}

// Ends the response with an error: an HTTP status while nothing was streamed yet, else
// an error event (after the text that was ready) and [DONE].
void Round::end_with_error(const Status& st, std::string_view retry_after) {
  if (!session_ || gone_) return;
  if (stream_ && g_.stream_started) {
    session_->post_stream(std::move(out_) + (g_.events ? g_.events->error(st)
                                                       : api_stream_error(st) + std::string(kApiStreamDone)),
                          true);
  } else {
    session_->post_response(api_status_of(st), dialect_error_body(g_.request.endpoint, st), retry_after);
  }
  out_.clear();
}

void Round::settle(bool all_done) {
  if (!out_.empty()) g_.stream_started = true;
  // A request whose engine is gone for too long ends with 503. It waits --engine-wait from
  // the later of its arrival and the engine's going away, so a restarted engine in time
  // resumes it and the client sees only a pause.
  const auto now = std::chrono::steady_clock::now();
  if (!all_done && !g_.failed && s_.engine_known_down(now) && now - g_.started > s_.options.engine_wait) {
    s_.give_up(g_);
    end_with_error(make_error(ErrorCode::kUnavailable, "no engine answered within {} ms; try again",
                              s_.options.engine_wait.count()),
                   "1");
    g_.failed = true;
    g_.samples_left = 0;
  }
  // A draining frontend whose deadline passed ends what is left, with an error the client
  // can retry on (another frontend, or this one's successor, is taking requests).
  if (!all_done && !g_.failed && s_.drain_expired()) {
    s_.give_up(g_);
    end_with_error(make_error(ErrorCode::kUnavailable, "this frontend shut down before the request finished; try again"),
                   "1");
    g_.failed = true;
    g_.samples_left = 0;
  }
  if (stream_ && !gone_ && !out_.empty() && session_ && !g_.failed) {
    session_->post_stream(std::move(out_), false);
    out_.clear();
    HEARTH_TEST_POINT("frontend.streamed");  // part of a stream handed to the connection
  }
}

void Round::complete() {
  g_.finished = true;
  if (gone_ && !g_.failed) {
    for (size_t i = 0; i < g_.choices.size(); ++i) s_.count_finish("abort");
  }
  if (gone_ || g_.failed || !session_) return;
  if (!failure_.is_ok()) return end_with_error(failure_, "");
  s_.request_duration.observe(seconds_since(g_.started));
  if (g_.embeddings) {
    s_.prompt_tokens_total.fetch_add(static_cast<uint64_t>(g_.prompt_tokens), std::memory_order_relaxed);
    std::vector<std::vector<float>> vectors;
    for (const auto& c : g_.choices) vectors.push_back(embedding_finish(c.embedding, g_.embeddings->dimensions));
    g_.finish_reasons = "stop";
    return session_->post_response(
        200, embeddings_response_body(vectors, g_.embeddings->base64, g_.head.model, g_.prompt_tokens));
  }
  int32_t longest = 0;
  for (const auto& c : g_.choices) {
    longest = std::max(longest, c.consumed);
    if (!g_.finish_reasons.empty()) g_.finish_reasons += ',';
    g_.finish_reasons += c.finish_reason;
  }
  if (longest > 1) s_.time_per_output_token.observe(seconds_since(g_.first_token_at) / (longest - 1));
  const ApiUsage u = usage();
  if (g_.request.endpoint == ApiEndpoint::kMessages || g_.request.endpoint == ApiEndpoint::kResponses) {
    // One choice (these APIs have no n): its text, calls and how it ended.
    const Choice& c = g_.choices.front();
    const DialectResult r{c.content, c.reasoning_text, c.calls, c.finish_reason, c.text->stop_found(), u};
    if (stream_) return session_->post_stream(g_.events->finish(r), true);
    return session_->post_response(200, dialect_response_body(g_.request, g_.head, r));
  }
  if (stream_) {
    std::string tail;
    if (g_.request.include_usage) tail += api_stream_usage_chunk(g_.request, g_.head, u);
    tail += kApiStreamDone;
    session_->post_stream(std::move(tail), true);
    return;
  }
  // best_of: the n choices with the highest mean log-probability per token.
  std::vector<size_t> order(g_.choices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (g_.choices.size() > static_cast<size_t>(g_.request.n)) {
    auto mean = [&](size_t i) { return g_.choices[i].logprob_sum / std::max(1, g_.choices[i].consumed); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mean(a) > mean(b); });
    order.resize(static_cast<size_t>(g_.request.n));
  }
  std::vector<ApiChoice> choices;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& c = g_.choices[order[k]];
    ApiChoice a;
    a.index = static_cast<int32_t>(k);
    a.text = echo_ ? g_.echo_text + c.content : c.content;
    a.text_offset_base = echo_ ? static_cast<int32_t>(g_.echo_text.size()) : 0;
    a.finish_reason = c.finish_reason;
    if (g_.reasoning) a.reasoning = c.reasoning_text;
    a.logprobs = c.logprobs;
    a.tool_calls = c.calls;
    choices.push_back(std::move(a));
  }
  session_->post_response(200, api_response_body(g_.request, g_.head, choices, u));
}

}  // namespace

void FrontendServer::Impl::advance(Generation& g) {
  Round round(*this, g);
  for (size_t i = 0; i < g.choices.size(); ++i) round.follow(i);
  // An embeddings request with a failed input fails whole: the inputs still running or
  // waiting for slots are not worth their compute.
  if (g.embeddings && !g.failure.is_ok()) {
    g.samples_left = 0;
    give_up(g);
  }
  bool all_done = g.samples_left == 0;  // an embeddings request may still wait for slots
  for (const auto& c : g.choices) {
    if (c.slot_held) all_done = false;
  }
  round.settle(all_done);
  if (all_done) round.complete();
}

void FrontendServer::Impl::pump_loop() {
  while (!stopping.load(std::memory_order_acquire)) {
    const auto round = std::chrono::steady_clock::now();
    pump_beat_ns.store(round.time_since_epoch().count(), std::memory_order_relaxed);
    const bool up = probe_engine();
    engine_up.store(up, std::memory_order_relaxed);
    if (up) {
      engine_down_since_ns.store(0, std::memory_order_relaxed);
    } else if (engine_down_since_ns.load(std::memory_order_relaxed) == 0) {
      engine_down_since_ns.store(std::max<int64_t>(1, round.time_since_epoch().count()), std::memory_order_relaxed);
    }
    const uint32_t seen = client->news();
    client->heartbeat();
    pump_queue();
    std::vector<std::shared_ptr<Generation>> work;
    {
      std::lock_guard lock(mutex);
      work.assign(active.begin(), active.end());
    }
    for (auto& g : work) advance(*g);
    {
      std::lock_guard lock(mutex);
      active.remove_if([](const std::shared_ptr<Generation>& g) {
        for (const auto& c : g->choices) {
          if (c.slot_held) return false;
        }
        g->in_active = false;  // an embeddings request still queued comes back with its next slot
        return true;
      });
    }
    client->wait(seen, std::chrono::milliseconds(20));
  }
}

}  // namespace hearth
