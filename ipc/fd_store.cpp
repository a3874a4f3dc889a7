#include "ipc/fd_store.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>

#include "common/json.h"
#include "common/log.h"
#include "ipc/json_message.h"
#include "ipc/segment.h"

namespace hearth {
namespace {

namespace json = boost::json;
using std::chrono::milliseconds;

constexpr milliseconds kHolderTimeout{2000};

// systemd's FDNAME: 1 to 255 characters, none of them ':' or a control character.
Status check_store_name(std::string_view name) {
  const bool ok = !name.empty() && name.size() <= 255 &&
                  std::none_of(name.begin(), name.end(), [](char c) {
                    return c == ':' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                  });
  if (!ok) return make_error(ErrorCode::kInvalidArgument, "\"{}\" is not a name an fd store keeps", name.substr(0, 64));
  return Status::ok();
}

class SystemdStore final : public FdStore {
 public:
  SystemdStore() {
    char** names = nullptr;
    const int n = sd_listen_fds_with_names(1, &names);
    for (int i = 0; i < n; ++i) {
      const int fd = SD_LISTEN_FDS_START + i;
      std::string name = names != nullptr && names[i] != nullptr ? names[i] : "";
      listened_.push_back({std::move(name), UniqueFd(fd)});
    }
    if (names != nullptr) {
      for (int i = 0; i < n; ++i) std::free(names[i]);
      std::free(names);
    }
  }
  std::string_view kind() const override { return "systemd"; }
  Status keep(const std::string& name, int fd) override {
    HEARTH_RETURN_IF_ERROR(check_store_name(name));
    const std::string message = "FDSTORE=1\nFDNAME=" + name;
    const int r = sd_pid_notify_with_fds(0, 0, message.c_str(), &fd, 1);
    if (r <= 0) return make_error(ErrorCode::kIo, "systemd's fd store refused {}: {}", name, r < 0 ? std::strerror(-r) : "no $NOTIFY_SOCKET");
    return Status::ok();
  }
  Status forget(const std::string& name) override {
    HEARTH_RETURN_IF_ERROR(check_store_name(name));
    const std::string message = "FDSTOREREMOVE=1\nFDNAME=" + name;
    if (const int r = sd_notify(0, message.c_str()); r < 0) {
      return make_error(ErrorCode::kIo, "systemd's fd store: removing {}: {}", name, std::strerror(-r));
    }
    return Status::ok();
  }
  Result<std::vector<KeptFd>> kept(std::string_view prefix) override {
    std::vector<KeptFd> out;
    for (KeptFd& k : listened_) {
      if (k.fd && k.name.starts_with(prefix)) out.push_back(std::move(k));
    }
    std::erase_if(listened_, [](const KeptFd& k) { return !k.fd; });
    return out;
  }

 private:
  std::vector<KeptFd> listened_;
};

class HolderStore final : public FdStore {
 public:
  explicit HolderStore(std::filesystem::path path) : path_(std::move(path)) {}
  std::string_view kind() const override { return "hearth serve"; }
  Status keep(const std::string& name, int fd) override {
    HEARTH_RETURN_IF_ERROR(check_store_name(name));
    const int fds[] = {fd};
    return ask(json::object{{"op", "keep"}, {"name", name}}, fds).status();
  }
  Status forget(const std::string& name) override {
    return ask(json::object{{"op", "forget"}, {"name", name}}, {}).status();
  }
  Result<std::vector<KeptFd>> kept(std::string_view prefix) override {
    HEARTH_ASSIGN_OR_RETURN(JsonReply answer, ask(json::object{{"op", "list"}}, {}));
    const json::array* names = json_find_array(answer.body, "names");
    if (names == nullptr || names->size() != answer.fds.size()) {
      return make_error(ErrorCode::kFormat, "the fd holder at {} sent {} descriptors with a malformed list",
                        path_.string(), answer.fds.size());
    }
    std::vector<KeptFd> out;
    for (size_t i = 0; i < names->size(); ++i) {
      if (!(*names)[i].is_string()) return make_error(ErrorCode::kFormat, "the fd holder's names are not strings");
      std::string name((*names)[i].as_string());
      if (name.starts_with(prefix)) out.push_back({std::move(name), std::move(answer.fds[i])});
    }
    return out;
  }

 private:
  Result<JsonReply> ask(const json::object& request, std::span<const int> fds) {
    HEARTH_ASSIGN_OR_RETURN(UniqueFd socket, unix_connect(path_));
    return json_call(socket.get(), path_, request, fds, kHolderTimeout);
  }

  std::filesystem::path path_;
};

}  // namespace

std::vector<std::unique_ptr<FdStore>> fd_stores_from_environment() {
  std::vector<std::unique_ptr<FdStore>> out;
  if (const char* s = std::getenv("NOTIFY_SOCKET"); s != nullptr && *s != '\0') {
    out.push_back(std::make_unique<SystemdStore>());
  }
  if (const char* s = std::getenv(kFdHolderEnv.data()); s != nullptr && *s != '\0') {
    out.push_back(fd_holder_store(s));
  }
  return out;
}

std::unique_ptr<FdStore> fd_holder_store(const std::filesystem::path& path) {
  return std::make_unique<HolderStore>(path);
}

std::filesystem::path fd_holder_path(const std::filesystem::path& shm_dir, std::string_view instance) {
  return segment_path(shm_dir, instance, "fdstore.sock");
}

Result<std::unique_ptr<FdHolder>> FdHolder::start(const std::filesystem::path& path) {
  std::unique_ptr<FdHolder> holder(new FdHolder());
  FdHolder* self = holder.get();
  HEARTH_ASSIGN_OR_RETURN(holder->server_,
                          UnixServer::start(path, [self](int connection, FdMessage& request, const PeerCredentials&) {
                            self->handle(connection, request);
                          }));
  return holder;
}

std::vector<std::string> FdHolder::names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const KeptFd& k : kept_) out.push_back(k.name);
  return out;
}

void FdHolder::handle(int connection, FdMessage& request) {
  auto error = [connection](std::string message) { json_reply_error(connection, std::move(message)); };
  auto parsed = json_parse(request.bytes, "fd holder request", 4);
  if (!parsed.is_ok() || !parsed->is_object()) return error("a request is one JSON object");
  const json::object& o = parsed->as_object();
  auto op = json_opt_string(o, "op");
  auto name = json_opt_string(o, "name");
  if (!op.is_ok() || !op->has_value()) return error("a request names its \"op\"");
  if (!name.is_ok()) return error(name.status().message());
  std::lock_guard lock(mu_);
  if (**op == "list") {
    if (!request.fds.empty()) return error("\"list\" carries no descriptors");
    json::array names;
    std::vector<int> fds;
    for (const KeptFd& k : kept_) {
      names.emplace_back(k.name);
      fds.push_back(k.fd.get());
    }
    return json_reply(connection, json::object{{"ok", true}, {"names", std::move(names)}}, fds);
  }
  if (!name->has_value()) return error(fmt::format("\"{}\" needs a \"name\"", **op));
  if (Status st = check_store_name(**name); !st.is_ok()) return error(st.message());
  if (**op == "forget") {
    if (!request.fds.empty()) return error("\"forget\" carries no descriptors");
    std::erase_if(kept_, [&](const KeptFd& k) { return k.name == **name; });
    return json_reply(connection, json::object{{"ok", true}});
  }
  if (**op != "keep") return error(fmt::format("unknown op \"{}\" (keep, forget, list)", **op));
  if (request.fds.size() != 1) return error(fmt::format("\"keep\" carries one descriptor, not {}", request.fds.size()));
  auto same = std::find_if(kept_.begin(), kept_.end(), [&](const KeptFd& k) { return k.name == **name; });
  if (same != kept_.end()) {
    same->fd = std::move(request.fds[0]);
  } else if (kept_.size() >= kMaxKept) {
    return error(fmt::format("the holder keeps at most {} descriptors", kMaxKept));
  } else {
    kept_.push_back({**name, std::move(request.fds[0])});
  }
  HEARTH_LOG_INFO("fd holder: keeping {}", **name);
  return json_reply(connection, json::object{{"ok", true}});
}

}  // namespace hearth
