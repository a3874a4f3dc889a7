#include "ipc/unix_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace hearth {
namespace {

Status errno_status(ErrorCode code, std::string_view what) {
  return make_error(code, "{}: {}", what, std::strerror(errno));
}

Result<sockaddr_un> address_of(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& s = path.native();
  if (s.empty() || s.size() >= sizeof(addr.sun_path)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "socket path {} is {} bytes; a Unix socket path holds at most {} (use a shorter --shm-dir)", s,
                      s.size(), sizeof(addr.sun_path) - 1);
  }
  std::memcpy(addr.sun_path, s.data(), s.size());
  return addr;
}

Result<UniqueFd> new_socket() {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return errno_status(ErrorCode::kIo, "socket(AF_UNIX)");
  return fd;
}

// poll() for `events`, retrying on EINTR: true when ready, false after `timeout`.
Result<bool> wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return errno_status(ErrorCode::kIo, "poll");
  }
}

}  // namespace

Result<UniqueFd> unix_listen(const std::filesystem::path& path) {
  HEARTH_ASSIGN_OR_RETURN(sockaddr_un addr, address_of(path));
  if (auto live = unix_connect(path); live.is_ok()) {
    const auto peer = unix_peer(live->get());
    return make_error(ErrorCode::kUnavailable, "another process (pid {}) is listening on {}",
                      peer.is_ok() ? peer->pid : 0, path.string());
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);  // a socket left by a process that died
  HEARTH_ASSIGN_OR_RETURN(UniqueFd fd, new_socket());
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return errno_status(ErrorCode::kIo, fmt::format("bind {}", path.string()));
  }
  if (::chmod(path.c_str(), 0600) != 0) return errno_status(ErrorCode::kIo, fmt::format("chmod {}", path.string()));
  if (::listen(fd.get(), 16) != 0) return errno_status(ErrorCode::kIo, fmt::format("listen {}", path.string()));
  return fd;
}

Result<UniqueFd> unix_connect(const std::filesystem::path& path) {
  HEARTH_ASSIGN_OR_RETURN(sockaddr_un addr, address_of(path));
  HEARTH_ASSIGN_OR_RETURN(UniqueFd fd, new_socket());
  while (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == EINTR) continue;
    const ErrorCode code = (errno == ENOENT || errno == ECONNREFUSED) ? ErrorCode::kNotFound : ErrorCode::kIo;
    return errno_status(code, fmt::format("connect {}", path.string()));
  }
  return fd;
}

Result<std::optional<UniqueFd>> unix_accept(int listener, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    HEARTH_ASSIGN_OR_RETURN(bool ready, wait_for(listener, POLLIN, std::max(left, std::chrono::milliseconds(0))));
    if (!ready) return std::optional<UniqueFd>();
    UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return errno_status(ErrorCode::kIo, "accept");
    }
    HEARTH_ASSIGN_OR_RETURN(PeerCredentials peer, unix_peer(fd.get()));
    if (peer.uid != ::geteuid() && peer.uid != 0) {
      HEARTH_LOG_WARN("refused a connection from pid {} of uid {} (only uid {} and root may connect)", peer.pid,
                      peer.uid, ::geteuid());
      continue;
    }
    return std::optional<UniqueFd>(std::move(fd));
  }
}

Status unix_send(int socket, std::string_view bytes, std::span<const int> fds) {
  if (bytes.size() > kMaxMessageBytes || fds.size() > kMaxMessageFds) {
    return make_error(ErrorCode::kInvalidArgument, "a message of {} bytes and {} descriptors is over the limit ({}, {})",
                      bytes.size(), fds.size(), kMaxMessageBytes, kMaxMessageFds);
  }
  if (bytes.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "an empty message (a sequenced-packet peer would read it as the end)");
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  while (::sendmsg(socket, &msg, MSG_NOSIGNAL) < 0) {
    if (errno == EINTR) continue;
    return errno_status(errno == EPIPE || errno == ECONNRESET ? ErrorCode::kNotFound : ErrorCode::kIo, "sendmsg");
  }
  return Status::ok();
}

Result<FdMessage> unix_receive(int socket, std::chrono::milliseconds timeout) {
  HEARTH_ASSIGN_OR_RETURN(bool ready, wait_for(socket, POLLIN, timeout));
  if (!ready) return make_error(ErrorCode::kUnavailable, "no message within {} ms", timeout.count());
  FdMessage out;
  std::string buffer(kMaxMessageBytes + 1, '\0');
  iovec iov{buffer.data(), buffer.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  while ((n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC)) < 0) {
    if (errno == EINTR) continue;
    return errno_status(errno == ECONNRESET ? ErrorCode::kNotFound : ErrorCode::kIo, "recvmsg");
  }
  // Take ownership of whatever descriptors arrived before judging the message.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      out.fds.emplace_back(fd);
    }
  }
  if (n == 0 && out.fds.empty()) return make_error(ErrorCode::kNotFound, "the peer closed the connection");
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || static_cast<size_t>(n) > kMaxMessageBytes) {
    return make_error(ErrorCode::kFormat, "a message over the limit of {} bytes and {} descriptors was cut short",
                      kMaxMessageBytes, kMaxMessageFds);
  }
  out.bytes.assign(buffer.data(), static_cast<size_t>(n));
  return out;
}

Result<PeerCredentials> unix_peer(int socket) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return errno_status(ErrorCode::kIo, "getsockopt(SO_PEERCRED)");
  }
  return PeerCredentials{cred.pid, cred.uid};
}

Result<std::unique_ptr<UnixServer>> UnixServer::start(const std::filesystem::path& path, Handler handle) {
  HEARTH_ASSIGN_OR_RETURN(UniqueFd listener, unix_listen(path));
  return std::unique_ptr<UnixServer>(new UnixServer(path, std::move(listener), std::move(handle)));
}

UnixServer::UnixServer(std::filesystem::path path, UniqueFd listener, Handler handle)
    : path_(std::move(path)), listener_(std::move(listener)), handle_(std::move(handle)) {
  thread_ = std::thread([this] { run(); });
}

UnixServer::~UnixServer() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void UnixServer::run() {
  using std::chrono::milliseconds;
  while (!stop_.load(std::memory_order_relaxed)) {
    auto connection = unix_accept(listener_.get(), milliseconds(100));
    if (!connection.is_ok()) {
      HEARTH_LOG_WARN("{}: {}", path_.string(), connection.status().to_string());
      std::this_thread::sleep_for(milliseconds(100));
      continue;
    }
    if (!connection->has_value()) continue;
    const int fd = (*connection)->get();
    auto request = unix_receive(fd, milliseconds(2000));
    if (!request.is_ok()) {
      if (request.status().code() != ErrorCode::kNotFound) {
        HEARTH_LOG_WARN("{}: no request: {}", path_.string(), request.status().to_string());
      }
      continue;
    }
    auto peer = unix_peer(fd);
    handle_(fd, *request, peer.is_ok() ? *peer : PeerCredentials{});
  }
}

}  // namespace hearth
