// Unix-domain sockets that carry file descriptors: how hearth-loader hands a GPU slab's
// shareable fd to engines, to `hearth serve` and back (SCM_RIGHTS).
//
// Sockets are SOCK_SEQPACKET (message boundaries kept, connection-oriented: a peer's
// death is seen as end of stream) bound to a path in the shared-memory directory, mode
// 0600. A listener accepts only peers of its own uid (or root), by SO_PEERCRED. A message
// is at most kMaxMessageBytes of bytes and kMaxMessageFds descriptors; a larger one is
// refused by the sender and, if it arrives truncated, by the receiver. Every received
// descriptor is owned (UniqueFd) and close-on-exec.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace hearth {

inline constexpr size_t kMaxMessageBytes = 64u << 10;
inline constexpr size_t kMaxMessageFds = 32;

struct FdMessage {
  std::string bytes;
  std::vector<UniqueFd> fds;
};

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
};

// Binds and listens at `path`. A socket file nobody listens on (left by a process that
// died) is replaced; one a live process listens on is kUnavailable, naming the path.
// kInvalidArgument for a path longer than a socket address holds (107 bytes).
Result<UniqueFd> unix_listen(const std::filesystem::path& path);

// Connects to `path`: kNotFound when no socket is there or nobody listens on it.
Result<UniqueFd> unix_connect(const std::filesystem::path& path);

// The next connection of a peer with our uid (or root), or nullopt after `timeout`.
// Connections of other users are closed and logged.
Result<std::optional<UniqueFd>> unix_accept(int listener, std::chrono::milliseconds timeout);

// Sends one message of 1 to kMaxMessageBytes bytes (blocking, MSG_NOSIGNAL: a vanished
// peer is kNotFound, not SIGPIPE).
Status unix_send(int socket, std::string_view bytes, std::span<const int> fds = {});

// Receives one message: kUnavailable after `timeout`, kNotFound when the peer closed the
// connection, kFormat for a message cut short (too many bytes or descriptors).
Result<FdMessage> unix_receive(int socket, std::chrono::milliseconds timeout);

Result<PeerCredentials> unix_peer(int socket);

// A listener on its own thread that answers one request per connection: it accepts,
// receives one message (2 s at most), calls `handle` with the connection, the message and
// the peer, and closes the connection. The handler runs on the server's thread, one
// connection at a time, and must not block for long. Stops (joins) when destroyed and
// removes its socket file.
class UnixServer {
 public:
  using Handler = std::function<void(int connection, FdMessage& request, const PeerCredentials& peer)>;
  static Result<std::unique_ptr<UnixServer>> start(const std::filesystem::path& path, Handler handle);
  ~UnixServer();
  UnixServer(const UnixServer&) = delete;
  UnixServer& operator=(const UnixServer&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  UnixServer(std::filesystem::path path, UniqueFd listener, Handler handle);
  void run();

  std::filesystem::path path_;
  UniqueFd listener_;
  Handler handle_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hearth
