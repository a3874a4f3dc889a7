#include "ipc/unix_socket.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "tests/unit/ipc/fd_test_util.h"

namespace hearth {
namespace {

using std::chrono::milliseconds;
using testing::content_of;
using testing::memfd_with;

TEST(UnixSocketTest, CarriesDescriptorsFromAnotherProcess) {
  testing::TempDir dir;
  const auto path = dir.path() / "s.sock";
  auto listener = unix_listen(path);
  ASSERT_TRUE(listener.is_ok()) << listener.status().to_string();
  const pid_t child = ::fork();
  if (child == 0) {
    auto socket = unix_connect(path);
    UniqueFd a = memfd_with("first"), b = memfd_with("second");
    const int fds[] = {a.get(), b.get()};
    const bool sent = socket.is_ok() && unix_send(socket->get(), "two", fds).is_ok();
    ::_exit(sent ? 0 : 1);
  }
  auto connection = unix_accept(listener->get(), milliseconds(5000));
  ASSERT_TRUE(connection.is_ok() && connection->has_value());
  auto message = unix_receive((*connection)->get(), milliseconds(5000));
  ASSERT_TRUE(message.is_ok()) << message.status().to_string();
  EXPECT_EQ(message->bytes, "two");
  ASSERT_EQ(message->fds.size(), 2u);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The sender is gone; its files live on through the received descriptors.
  EXPECT_EQ(content_of(message->fds[0].get()), "first");
  EXPECT_EQ(content_of(message->fds[1].get()), "second");
  auto peer = unix_peer((*connection)->get());
  ASSERT_TRUE(peer.is_ok());
  EXPECT_EQ(peer->pid, child);
  EXPECT_EQ(peer->uid, ::geteuid());
  // The peer closed: the end of the stream, not an empty message.
  auto end = unix_receive((*connection)->get(), milliseconds(2000));
  EXPECT_EQ(end.status().code(), ErrorCode::kNotFound);
}

TEST(UnixSocketTest, ReplacesAStaleSocketAndRefusesALiveOne) {
  testing::TempDir dir;
  const auto path = dir.path() / "s.sock";
  {
    auto first = unix_listen(path);
    ASSERT_TRUE(first.is_ok());
    auto second = unix_listen(path);
    EXPECT_EQ(second.status().code(), ErrorCode::kUnavailable);
    EXPECT_NE(second.status().message().find("listening on"), std::string::npos) << second.status().message();
  }
  // The first listener closed without removing its file, as a killed process would.
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(unix_connect(path).status().code(), ErrorCode::kNotFound);
  auto again = unix_listen(path);
  EXPECT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(unix_connect(path).is_ok());
}

TEST(UnixSocketTest, RefusesWhatItCannotCarry) {
  testing::TempDir dir;
  EXPECT_EQ(unix_connect(dir.path() / "absent.sock").status().code(), ErrorCode::kNotFound);
  const std::filesystem::path long_path = dir.path() / std::string(120, 'x');
  EXPECT_EQ(unix_listen(long_path).status().code(), ErrorCode::kInvalidArgument);

  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  EXPECT_EQ(unix_send(a.get(), "").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(unix_send(a.get(), std::string(kMaxMessageBytes + 1, 'x')).code(), ErrorCode::kInvalidArgument);
  std::vector<int> many(kMaxMessageFds + 1, b.get());
  EXPECT_EQ(unix_send(a.get(), "x", many).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(unix_receive(b.get(), milliseconds(20)).status().code(), ErrorCode::kUnavailable);
  ASSERT_TRUE(unix_send(a.get(), std::string(kMaxMessageBytes, 'y')).is_ok());
  auto big = unix_receive(b.get(), milliseconds(1000));
  ASSERT_TRUE(big.is_ok());
  EXPECT_EQ(big->bytes.size(), kMaxMessageBytes);
  a.reset();
  EXPECT_EQ(unix_send(b.get(), "x").code(), ErrorCode::kNotFound);
}

TEST(UnixSocketTest, ServerAnswersEachConnectionAndSurvivesBadPeers) {
  testing::TempDir dir;
  const auto path = dir.path() / "s.sock";
  auto server = UnixServer::start(path, [](int connection, FdMessage& request, const PeerCredentials& peer) {
    (void)unix_send(connection, request.bytes + ":" + std::to_string(peer.pid == ::getpid()));
  });
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  {
    auto silent = unix_connect(path);  // connects and says nothing
    ASSERT_TRUE(silent.is_ok());
  }
  for (int i = 0; i < 3; ++i) {
    auto socket = unix_connect(path);
    ASSERT_TRUE(socket.is_ok());
    ASSERT_TRUE(unix_send(socket->get(), "ping").is_ok());
    auto answer = unix_receive(socket->get(), milliseconds(5000));
    ASSERT_TRUE(answer.is_ok()) << answer.status().to_string();
    EXPECT_EQ(answer->bytes, "ping:1");
  }
  server->reset();
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace hearth
