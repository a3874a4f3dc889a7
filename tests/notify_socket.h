// A datagram socket where a test's NOTIFY_SOCKET points (as systemd's does), for the
// tests of what hearth's daemons tell their supervisor (common/daemon.h).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace hearth::testing {

class NotifySocket {
 public:
  NotifySocket() {
    path_ = (dir_.path() / "notify").string();
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~NotifySocket() { ::close(fd_); }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  const std::string& path() const { return path_; }
  // Messages until one containing `until` arrives (it included), or `timeout`.
  std::vector<std::string> read_until(const std::string& until, std::chrono::milliseconds timeout) {
    std::vector<std::string> out;
    for (const auto deadline = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < deadline;) {
      pollfd p{fd_, POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) != 1) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      out.emplace_back(buf, static_cast<size_t>(n));
      if (out.back().find(until) != std::string::npos) break;
    }
    return out;
  }
  // The next message, or "" after `timeout`.
  std::string next(std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
    const auto m = read_until("", timeout);
    return m.empty() ? "" : m.front();
  }

 private:
  TempDir dir_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace hearth::testing
