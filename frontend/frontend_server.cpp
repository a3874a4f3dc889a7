#include "frontend/frontend_server.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <random>

#include "common/test_point.h"
#include "frontend/session.h"
#include "ipc/weights_segment.h"
#include "tokenizer/source_codec.h"

namespace hearth {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}", prefix, rng());
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// ---------------------------------------------------------------- server

Status FrontendServer::Impl::load(const FrontendOptions& o) {
  options = o;
  HEARTH_RETURN_IF_ERROR(instance_name_check(o.instance));
  const auto dir = o.shm_dir.empty() ? shm_dir_default() : o.shm_dir;
  shm_dir = dir;
  if (options.loader_program.empty()) {
    std::error_code ec;
    options.loader_program = (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "hearth-loader").string();
  }
  HEARTH_ASSIGN_OR_RETURN(AttachedWeights w, weights_attach(segment_path(dir, o.instance, "weights")));
  HEARTH_ASSIGN_OR_RETURN(TokenizerSource source, tokenizer_source_decode(w.tokenizer_blob));
  HEARTH_ASSIGN_OR_RETURN(tokenizer, tokenizer_load(std::move(source)));
  HEARTH_ASSIGN_OR_RETURN(PromptBuilder pb, PromptBuilder::create(*tokenizer, w.chat_template,
                                                                   {o.chat_template, o.tool_call_parser}));
  prompts.emplace(std::move(pb));
  HEARTH_ASSIGN_OR_RETURN(reasoning, reasoning_format_from_name(o.reasoning_parser));
  for (auto [tag, id] : {std::pair{kThinkOpen, &think_open_id}, std::pair{kThinkClose, &think_close_id}}) {
    auto ids = tokenizer->encode(tag, EncodeOptions{false, true});
    if (ids.is_ok() && ids->size() == 1) *id = ids->front();
  }
  if (prompts->has_chat_template()) {
    HEARTH_LOG_INFO("chat template: {}; tool calls: {}", prompts->template_origin(),
                    tool_call_format_name(prompts->tool_format()));
  } else {
    HEARTH_LOG_INFO("no chat template: /v1/chat/completions answers 400 (start with --chat-template to serve chat)");
  }
  for (TokenId id = 0; id < tokenizer->vocab_size(); ++id) {
    const std::string_view b = tokenizer->token_bytes(id);
    if (b.size() == 1) facts.single_bytes.set(static_cast<uint8_t>(b[0]));
  }
  // --served-model-name: those names only; else the model's own and the instance's.
  std::vector<std::string>& model_names = facts.model_names;
  model_names = o.served_model_names;
  if (model_names.empty()) {
    model_names.push_back(w.model_name.empty() ? o.instance : w.model_name);
    if (model_names.front() != o.instance) model_names.push_back(o.instance);
  }
  for (const std::string& name : model_names) {
    if (name.empty() || name.size() > 256) {
      return make_error(ErrorCode::kInvalidArgument, "a served model name must have 1 to 256 characters");
    }
  }
  model_id = model_names.front();
  model_label = metric_label("model_name", model_id);
  system_fingerprint = fmt::format("fp_hearth_{}", w.header->fingerprint.hex().substr(0, 12));
  HEARTH_ASSIGN_OR_RETURN(BrokerClient c, BrokerClient::connect(segment_path(dir, o.instance, "broker")));
  facts.context = static_cast<int32_t>(c.broker().slot_tokens());
  facts.vocab_size = tokenizer->vocab_size();
  facts.stop_ids.assign(tokenizer->stop_ids().begin(), tokenizer->stop_ids().end());
  facts.n_slots = c.broker().n_slots();
  facts.grammar_bytes = c.grammar_capacity();
  facts.tool_format = prompts->tool_format();
  client.emplace(std::move(c));
  HEARTH_RETURN_IF_ERROR(adapters.attach(segment_path(dir, o.instance, "lora"), w.header->fingerprint));
  if (adapters.present()) {
    std::vector<std::string> loaded;
    for (const LoraSlotInfo& a : adapters.list()) {
      loaded.push_back(a.name);
      if (std::find(model_names.begin(), model_names.end(), a.name) != model_names.end()) {
        HEARTH_LOG_WARN("adapter {} has a name this frontend serves the base model under: requests naming it get "
                        "the base model (unload it and load it under another name, or change --served-model-name)",
                        a.name);
      }
    }
    HEARTH_LOG_INFO("LoRA adapters: {} of {} slots loaded{}; run-time loading {}", loaded.size(), adapters.capacity(),
                    loaded.empty() ? "" : fmt::format(" ({})", fmt::join(loaded, ", ")),
                    o.allow_runtime_lora ? "allowed" : "off (--allow-runtime-lora)");
  }
  if (o.allow_runtime_lora && o.api_keys.empty()) {
    HEARTH_LOG_WARN("--allow-runtime-lora without --api-key: anyone who reaches this port may make the loader read "
                    "adapters from any path it can read; give keys, or keep the port private");
  }
  engine_up.store(probe_engine());
  weights.emplace(std::move(w));
  HEARTH_RETURN_IF_ERROR(listen(o));
  if (!o.api_keys.empty()) HEARTH_LOG_INFO("{} API key(s): /v1/* and the tokenizer routes want one", o.api_keys.size());
  return Status::ok();
}

Result<AdapterRef> FrontendServer::Impl::resolve_model(const ApiRequest& request) const {
  Status base = admit_model(request, facts);
  if (base.is_ok()) return AdapterRef{};
  if (auto adapter = adapters.find(request.model)) {
    if (!engine_serves_adapters()) {
      return make_error(ErrorCode::kUnavailable, "model: adapter \"{}\" is loaded, but the engine serving this "
                        "instance started without the adapter segment (or with one since replaced): restart "
                        "hearth-engine", request.model);
    }
    return *std::move(adapter);
  }
  std::vector<std::string> names;
  for (const LoraSlotInfo& a : adapters.list()) {
    if (!a.unloading) names.push_back(a.name);
  }
  if (names.empty()) return base;
  return make_error(ErrorCode::kNotFound, "{}, and the adapters \"{}\")", base.message().substr(0, base.message().size() - 1),
                    fmt::join(names, "\", \""));
}

bool FrontendServer::Impl::adapter_queued(uint32_t slot, uint64_t id) {
  std::lock_guard lock(mutex);
  return std::any_of(queue.begin(), queue.end(), [&](const std::shared_ptr<Generation>& g) {
    return g->adapter.slot == static_cast<int32_t>(slot) && g->adapter.id == id && g->samples_left > 0;
  });
}

// The listening socket: one handed over (systemd, `hearth serve`), or one of its own.
Status FrontendServer::Impl::listen(const FrontendOptions& o) {
  try {
    if (o.listen_fd >= 0) {
      // A socket handed over (systemd, `hearth serve`): it must be a listening TCP socket.
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int type = 0, listening = 0;
      socklen_t type_len = sizeof(type), listening_len = sizeof(listening);
      if (::getsockname(o.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
          (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) ||
          ::getsockopt(o.listen_fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM ||
          ::getsockopt(o.listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &listening_len) != 0 || !listening) {
        return make_error(ErrorCode::kInvalidArgument, "file descriptor {} is not a listening TCP socket",
                          o.listen_fd);
      }
      ::fcntl(o.listen_fd, F_SETFD, FD_CLOEXEC);  // not for the processes this one starts
      acceptor.emplace(ioc, addr.ss_family == AF_INET ? tcp::v4() : tcp::v6(), o.listen_fd);
    } else {
      const auto address = asio::ip::make_address(o.host);
      acceptor.emplace(ioc);
      const tcp::endpoint endpoint(address, o.port);
      acceptor->open(endpoint.protocol());
      acceptor->set_option(asio::socket_base::reuse_address(true));
      // Several frontends may listen on one port, so a new one can start before the old
      // one drains (connections queued at the old one when it closes are lost, though:
      // pass one shared socket, by systemd or `hearth serve`, for restarts that lose none).
      const int one = 1;
      ::setsockopt(acceptor->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
      acceptor->bind(endpoint);
      acceptor->listen(asio::socket_base::max_listen_connections);
    }
  } catch (const boost::system::system_error& e) {
    return make_error(ErrorCode::kIo, "cannot listen on {}:{}: {}", o.host, o.port, e.what());
  }
  beast::error_code ec;
  const auto local = acceptor->local_endpoint(ec);
  if (!ec && !local.address().is_loopback() && o.api_keys.empty()) {
    HEARTH_LOG_WARN("listening on {} without an API key: anyone who can reach it may use the model "
                    "(--api-key, --api-key-file or HEARTH_API_KEY)",
                    local.address().to_string());
  }
  return Status::ok();
}

void FrontendServer::Impl::accept() {
  acceptor->async_accept(asio::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->stopping.load()) return;
    if (!ec && self->open_sessions.load() >= self->options.max_connections) {
      // Over the cap: a short answer and close, without a session (a full server must not
      // spend memory on clients it cannot serve).
      ++self->rejected_connections;
      static constexpr std::string_view kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nServer: hearth\r\nContent-Type: application/json\r\nRetry-After: "
          "1\r\nConnection: close\r\nContent-Length: 115\r\n\r\n"
          "{\"error\":{\"message\":\"too many open connections; try again\",\"type\":\"server_error\",\"param\":null,"
          "\"code\":\"overloaded\"}}";
      ::send(socket.native_handle(), kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      beast::error_code ignored;
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
      if (!self->draining.load()) self->accept();
      return;
    }
    // A connection accepted as a drain began is still served (and then closed).
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      auto session = std::make_shared<Session>(std::move(socket), self);
      {
        std::lock_guard lock(self->sessions_mutex);
        std::erase_if(self->sessions, [](const std::weak_ptr<Session>& w) { return w.expired(); });
        self->sessions.push_back(session);
      }
      session->start();
    }
    if (!self->draining.load()) self->accept();
  });
}

// Runs on the io_context: stop accepting (connections then queue in the kernel for the
// next frontend, when the listening socket is shared), close idle connections, and
// watch until every request has ended.
void FrontendServer::Impl::begin_drain(std::chrono::milliseconds timeout) {
  HEARTH_TEST_POINT("frontend.drain.begin");
  if (draining.exchange(true)) return;
  drain_deadline_ns.store((std::chrono::steady_clock::now() + timeout).time_since_epoch().count());
  HEARTH_LOG_INFO("draining: {} requests in flight, deadline in {} ms", active_count(), timeout.count());
  beast::error_code ec;
  acceptor->close(ec);
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(sessions_mutex);
    for (auto& w : sessions) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->post_drain();
  drain_timer.emplace(ioc);
  watch_drain();
}

void FrontendServer::Impl::watch_drain() {
  const bool idle = active_count() == 0 && open_sessions.load() == 0;
  // Past the deadline the pump ends what is left; give those answers a moment to go out.
  const bool overdue = std::chrono::steady_clock::now().time_since_epoch().count() >
                       drain_deadline_ns.load() + std::chrono::nanoseconds(std::chrono::seconds(2)).count();
  if (idle || overdue) {
    if (overdue) HEARTH_LOG_WARN("drain deadline passed with {} connections open", open_sessions.load());
    ioc.stop();
    return;
  }
  drain_timer->expires_after(std::chrono::milliseconds(10));
  drain_timer->async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->watch_drain();
  });
}

Result<std::unique_ptr<FrontendServer>> FrontendServer::create(const FrontendOptions& options) {
  auto impl = std::make_shared<Impl>();
  HEARTH_RETURN_IF_ERROR(impl->load(options));
  std::unique_ptr<FrontendServer> server(new FrontendServer());
  server->impl_ = std::move(impl);
  return server;
}

FrontendServer::~FrontendServer() {
  if (impl_ && impl_->pump.joinable()) {
    impl_->stopping.store(true);
    impl_->pump.join();
  }
}

uint16_t FrontendServer::port() const { return impl_->acceptor->local_endpoint().port(); }

Status FrontendServer::run() {
  Impl& m = *impl_;
  m.pump = std::thread([&m] { m.pump_loop(); });
  m.accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, m.options.threads); ++i) threads.emplace_back([&m] { m.ioc.run(); });
  m.ioc.run();
  for (auto& t : threads) t.join();
  m.stopping.store(true);
  if (m.pump.joinable()) m.pump.join();
  m.client->leave();  // at once, whatever happens below
  // Adapter loads and unloads see `stopping` within 20 ms; a load's hearth-loader child
  // within its own time limit. Their answers go nowhere now.
  for (int i = 0; i < 13000 && m.admin_workers.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  m.release_handlers();  // and what they posted
  return Status::ok();
}

// The io_context is stopped and its threads are gone, but handlers still queued in it
// (a cancelled accept, reads of connections left open) hold shared pointers to the
// server, which holds the io_context: a cycle nothing would break. Close what is left
// and run those handlers, so that they complete with errors and let go.
void FrontendServer::Impl::release_handlers() {
  beast::error_code ec;
  acceptor->close(ec);
  if (drain_timer) drain_timer->cancel();
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(sessions_mutex);
    for (auto& w : sessions) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
    sessions.clear();
  }
  for (auto& s : live) s->close();
  live.clear();
  {
    std::lock_guard lock(mutex);
    active.clear();
  }
  ioc.restart();
  for (int round = 0; round < 1000 && ioc.poll() > 0; ++round) {
  }
}

void FrontendServer::drain(std::chrono::milliseconds timeout) {
  asio::post(impl_->ioc, [impl = impl_, timeout] { impl->begin_drain(timeout); });
}

bool FrontendServer::healthy(std::chrono::milliseconds max_age) const {
  const int64_t beat = impl_->pump_beat_ns.load(std::memory_order_relaxed);
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  return beat != 0 && now - beat <= std::chrono::nanoseconds(max_age).count();
}

void FrontendServer::stop() {
  impl_->stopping.store(true);
  asio::post(impl_->ioc, [impl = impl_] {
    beast::error_code ec;
    impl->acceptor->close(ec);
    impl->ioc.stop();
  });
}

}  // namespace hearth
