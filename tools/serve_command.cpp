// `hearth serve`: one command that runs a whole instance: hearth-loader, hearth-engine (one
// per tensor-parallel rank, --tp) and hearth-frontend as child processes, each started
// once the previous one is ready. A
// child that dies is started again (the loader's weights stay resident, so an engine
// comes back in milliseconds); SIGTERM / SIGINT stop the children, frontend first.
//
// The listening socket belongs to this process (bound here, or taken from systemd socket
// activation) and is handed to each frontend, so connections queue in the kernel while
// a frontend restarts. SIGHUP replaces the frontend without refusing or failing a
// request: a new one starts on the same socket, then the old one drains.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/builtin_templates.h"
#include "chat/tool_calls.h"
#include "common/api_keys.h"
#include "common/args.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/version.h"
#include "common/subprocess.h"
#include "ipc/fd_store.h"
#include "ipc/segment.h"
#include "loader/device_slabs.h"
#include "tools/commands.h"
#include "tools/serve_flags.h"

namespace hearth::cli {
namespace {

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
  std::vector<int> pass_fds;
  Environment env;
};

// The socket the frontends serve on: systemd's, or a new one bound to host:port.
// Returned with FD_CLOEXEC, so only the frontends (to which it is passed) inherit it.
Result<int> listening_socket(const std::string& host, const std::string& port) {
  if (const int n = sd_listen_fds(1); n == 1) {
    ::fcntl(SD_LISTEN_FDS_START, F_SETFD, FD_CLOEXEC);
    return SD_LISTEN_FDS_START;
  } else if (n > 1) {
    return make_error(ErrorCode::kInvalidArgument, "systemd passed {} sockets; hearth serve takes exactly one", n);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return make_error(ErrorCode::kInvalidArgument, "cannot listen on {}:{}: {}", host, port, ::gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return make_error(ErrorCode::kIo, "cannot listen on {}:{}: {} (another server on that port? pick one with --port)",
                    host, port, why);
}

uint16_t local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return 0;
}

// Starts `c` and waits for its first stdout line (its ready line), calling `meanwhile`
// (when given) every 200 ms while it waits, and giving up when that returns false.
Status start(Child& c, std::chrono::seconds timeout, const std::function<bool()>& meanwhile = nullptr) {
  using namespace std::chrono_literals;
  c.process = std::make_unique<ChildProcess>(c.argv, c.env, c.pass_fds, /*inherit_stderr=*/true);
  c.started = std::chrono::steady_clock::now();
  const auto deadline = c.started + timeout;
  std::optional<std::string> line;
  for (auto now = c.started; now < deadline; now = std::chrono::steady_clock::now()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const auto slice = meanwhile ? std::min<std::chrono::milliseconds>(200ms, left) : left;
    line = c.process->read_line(slice);
    if (line || c.process->stdout_closed() || (meanwhile && !meanwhile())) break;
  }
  if (!line) {
    c.process->signal(SIGTERM);
    c.process->wait(std::chrono::seconds(5));
    return make_error(ErrorCode::kUnavailable, "{} did not become ready (its log is above)", c.name);
  }
  HEARTH_LOG_INFO("{} ready: {}", c.name, *line);
  c.ready_line = *line;
  return Status::ok();
}

}  // namespace

int serve_command(const std::vector<std::string>& argv) {
  auto usage_error = [](const std::string& message) {
    std::fprintf(stderr, "hearth serve: %s\n\nRun `hearth serve --help` for the flags.\n", message.c_str());
    return 2;
  };
  auto args = parse_serve_args(argv);
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(serve_usage().c_str(), stdout);
    return 0;
  }
  if (args->has("flag-reference")) {
    std::fputs(serve_flag_reference().c_str(), stdout);
    return 0;
  }
  if (args->has("version")) {
    std::printf("%s\n", version_line("hearth").c_str());
    return 0;
  }
  if (Status st = log_configure(args->get("log-level").value_or(""), args->get("log-format").value_or(""));
      !st.is_ok()) {
    return usage_error(st.message());
  }
  if (!args->get("model")) return usage_error("a model is required: hearth serve MODEL (or --model PATH)");
  // What serve checks beyond the table, also before anything starts.
  const std::string instance = args->get("instance").value_or("default");
  if (Status st = instance_name_check(instance); !st.is_ok()) return usage_error(st.message());
  const int tp = static_cast<int>(args->get_int("tp", 1, 16)->value_or(1));
  std::vector<int> devices;
  if (auto d = args->get("device")) {
    auto list = device_list_from_name(*d, tp);
    if (!list.is_ok()) return usage_error(list.status().message());
    devices = *list;
  }
  std::string chat_template;
  if (auto t = args->get("chat-template")) {
    // A file is named by its absolute path: the frontend may start in another directory.
    const bool builtin = builtin_chat_template(*t).has_value();
    if (!builtin && !std::filesystem::is_regular_file(*t)) {
      return usage_error(fmt::format("--chat-template {}: no such file, and not a built-in name", *t));
    }
    chat_template = builtin ? *t : std::filesystem::absolute(*t).string();
  }
  auto access = access_flags(*args);
  if (!access.is_ok()) return usage_error(access.status().message());
  const std::string host = args->get("host").value_or("127.0.0.1");
  const int64_t drain_timeout_ms = args->get_int("drain-timeout", 0, 3600000)->value_or(30000);
  const std::filesystem::path shm_dir = args->get("shm-dir").value_or(shm_dir_default().string());

  daemon_block_signals();
  daemon_watch_children();
  // Flags for the children, from the table: each flag given goes to the processes it names,
  // with the value serve resolved where it did (a template file by its absolute path).
  const std::map<std::string_view, std::string> resolved = {{"chat-template", chat_template}};
  auto pass = [&](Child& c, unsigned target) {
    for (const ServeFlag& f : serve_flags()) {
      if ((f.targets & target) == 0) continue;
      const std::string name = std::string("--") + std::string(f.child_name.empty() ? f.name : f.child_name);
      if (f.kind == FlagKind::kBool) {
        if (args->has(std::string(f.name))) c.argv.push_back(name);
        continue;
      }
      for (const std::string& v : args->get_all(std::string(f.name))) {
        const auto r = resolved.find(f.name);
        c.argv.insert(c.argv.end(), {name, r != resolved.end() ? r->second : v});
      }
    }
  };

  Child loader{"hearth-loader", {sibling("hearth-loader"), "--model", *args->get("model")}};
  pass(loader, kToLoader);
  loader.argv.insert(loader.argv.end(), {"--tp", std::to_string(tp)});
  std::unique_ptr<FdHolder> holder;
  if (auto d = args->get("device")) {
    loader.argv.insert(loader.argv.end(), {"--device", *d});
    auto held = FdHolder::start(fd_holder_path(shm_dir, instance));
    if (!held.is_ok()) {
      std::fprintf(stderr, "hearth serve: %s\n", held.status().to_string().c_str());
      return 1;
    }
    holder = std::move(*held);
    loader.env.push_back(fmt::format("{}={}", kFdHolderEnv, holder->path().string()));
  }
  // Ranks 1..tp-1 start before rank 0, which is ready once they have joined its group.
  std::vector<std::unique_ptr<Child>> ranks;
  for (int r = tp - 1; r >= 0; --r) {
    auto engine = std::make_unique<Child>(
        Child{tp == 1 ? "hearth-engine" : fmt::format("hearth-engine rank {}", r), {sibling("hearth-engine"), "--wait-weights", "60"}});
    pass(*engine, kToEngine);
    if (tp > 1) {
      engine->argv.insert(engine->argv.end(), {"--rank", std::to_string(r), "--tp", std::to_string(tp), "--cpus", "auto"});
    }
    if (!devices.empty()) engine->argv.insert(engine->argv.end(), {"--backend", fmt::format("cuda:{}", devices[r])});
    // The holder keeps each rank's resident KV cache on the GPU across engine restarts, as
    // it keeps the loader's weights.
    if (holder) engine->env.push_back(fmt::format("{}={}", kFdHolderEnv, holder->path().string()));
    ranks.push_back(std::move(engine));
  }
  auto listen_fd = listening_socket(host, args->get("port").value_or("8080"));
  if (!listen_fd.is_ok()) {
    std::fprintf(stderr, "hearth serve: %s\n", listen_fd.status().message().c_str());
    return 1;
  }
  Child frontend{"hearth-frontend", {sibling("hearth-frontend"), "--listen-fd", "3"}};
  frontend.pass_fds = {*listen_fd};
  pass(frontend, kToFrontend);
  // The keys go in the environment, not in argv (which any user may read in /proc).
  frontend.env.push_back(fmt::format("{}={}", kApiKeyEnv, fmt::join(access->api_keys, ",")));
  std::vector<Child*> children = {&loader};
  for (auto& r : ranks) children.push_back(r.get());
  children.push_back(&frontend);

  for (Child* c : children) {
    if (Status st = start(*c, std::chrono::seconds(c == &loader ? 3600 : 120)); !st.is_ok()) {
      std::fprintf(stderr, "hearth serve: %s\n", st.to_string().c_str());
      for (Child* other : children) {
        if (other->process) other->process->signal(SIGTERM);
      }
      return 1;
    }
  }
  // --port 0 picks a free port: say which.
  std::printf("serving http://%s:%u/v1 (instance %s)\n", host.c_str(), local_port(*listen_fd), instance.c_str());
  std::fflush(stdout);
  daemon_notify_ready("serving");

  // Replaced frontends, draining; killed if they outlive their drain by far.
  struct Draining {
    std::unique_ptr<ChildProcess> process;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<Draining> draining;
  const auto drain_bound = std::chrono::milliseconds(drain_timeout_ms) + std::chrono::seconds(10);

  // Starts `c` again if it has exited; false when it keeps failing.
  std::function<bool(Child&)> revive = [&](Child& c) {
    const auto status = c.process->wait(std::chrono::milliseconds(0));
    if (!status) return true;
    HEARTH_LOG_WARN("{} exited with status {}; starting it again", c.name, *status);
    // Six quick failures in a row (each within 10 s of its start) end the server.
    const bool quick = std::chrono::steady_clock::now() - c.started < std::chrono::seconds(10);
    c.restarts = quick ? c.restarts + 1 : 0;
    if (c.restarts > 5) {
      std::fprintf(stderr, "hearth serve: %s keeps failing (its log is above)\n", c.name.c_str());
      return false;
    }
    // Rank 0 is ready once every other rank has joined its group, so while it starts,
    // ranks that died with it (or after it) are started again: they are ready at once.
    bool others_ok = true;
    std::function<bool()> meanwhile;
    if (ranks.size() > 1 && &c == ranks.back().get()) {
      meanwhile = [&] {
        for (size_t r = 0; r + 1 < ranks.size() && others_ok; ++r) others_ok = revive(*ranks[r]);
        return others_ok;
      };
    }
    if (Status st = start(c, std::chrono::seconds(120), meanwhile); !st.is_ok()) {
      HEARTH_LOG_ERROR("{}", st.to_string());
    }
    return others_ok;
  };

  // Supervise: restart what dies, replace the frontend on SIGHUP, stop on SIGTERM / SIGINT.
  while (true) {
    const int sig = daemon_wait_signal(std::chrono::milliseconds(200));
    if (sig == SIGTERM || sig == SIGINT) break;
    if (sig == SIGHUP) {
      HEARTH_LOG_INFO("SIGHUP: starting a new frontend, then draining the old one");
      std::unique_ptr<ChildProcess> old = std::move(frontend.process);
      const auto old_started = frontend.started;
      if (Status st = start(frontend, std::chrono::seconds(120)); !st.is_ok()) {
        HEARTH_LOG_ERROR("the new frontend did not start, keeping the old one: {}", st.to_string());
        frontend.process = std::move(old);
        frontend.started = old_started;
      } else {
        old->signal(SIGTERM);
        draining.push_back({std::move(old), std::chrono::steady_clock::now() + drain_bound});
      }
    }
    std::erase_if(draining, [](Draining& d) {
      if (d.process->wait(std::chrono::milliseconds(0))) return true;
      if (std::chrono::steady_clock::now() < d.deadline) return false;
      HEARTH_LOG_WARN("a replaced frontend did not finish draining; killing it");
      d.process->signal(SIGKILL);
      d.process->wait(std::chrono::seconds(5));
      return true;
    });
    for (Child* c : children) {
      if (!revive(*c)) {
        for (Child* other : children) other->process->signal(SIGTERM);
        return 1;
      }
    }
  }
  daemon_notify_stopping();
  // Frontends drain first (the engine must be there to finish their requests).
  for (auto& d : draining) d.process->signal(SIGTERM);
  frontend.process->signal(SIGTERM);
  ::close(*listen_fd);  // new connections are refused from here on, not left waiting
  for (auto& d : draining) {
    if (!d.process->wait(drain_bound)) d.process->signal(SIGKILL);
  }
  if (!frontend.process->wait(drain_bound)) frontend.process->signal(SIGKILL);
  for (auto& r : ranks) r->process->signal(SIGTERM);
  for (auto& r : ranks) {
    if (!r->process->wait(std::chrono::seconds(30))) r->process->signal(SIGKILL);
  }
  loader.process->signal(SIGTERM);
  if (!loader.process->wait(std::chrono::seconds(30))) loader.process->signal(SIGKILL);
  if (args->has("remove-on-exit")) {
    std::vector<std::string> removed;
    if (Status st = remove_instance(shm_dir, instance, /*dry_run=*/false, &removed); !st.is_ok()) {
      std::fprintf(stderr, "hearth serve: --remove-on-exit: %s\n", st.to_string().c_str());
      return 1;
    }
    HEARTH_LOG_INFO("removed {} files of instance {} (--remove-on-exit)", removed.size(), instance);
  }
  return 0;
}

}  // namespace hearth::cli
