#include "ipc/fd_store.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "tests/unit/ipc/fd_test_util.h"

namespace hearth {
namespace {

using std::chrono::milliseconds;
using testing::content_of;
using testing::memfd_with;

TEST(FdStoreTest, HolderKeepsDescriptorsPastTheProcessThatGaveThem) {
  testing::TempDir dir;
  const auto path = fd_holder_path(dir.path(), "t");
  auto holder = FdHolder::start(path);
  ASSERT_TRUE(holder.is_ok()) << holder.status().to_string();
  const pid_t child = ::fork();
  if (child == 0) {
    auto store = fd_holder_store(path);
    UniqueFd a = memfd_with("slab zero"), b = memfd_with("slab one");
    const bool ok = store->keep("hearth-slab.zero", a.get()).is_ok() && store->keep("hearth-slab.one", b.get()).is_ok() &&
                    store->keep("other", b.get()).is_ok();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);

  auto store = fd_holder_store(path);
  EXPECT_EQ(store->kind(), "hearth serve");
  auto kept = store->kept("hearth-slab.");
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  ASSERT_EQ(kept->size(), 2u);
  EXPECT_EQ((*kept)[0].name, "hearth-slab.zero");
  EXPECT_EQ(content_of((*kept)[0].fd.get()), "slab zero");
  EXPECT_EQ(content_of((*kept)[1].fd.get()), "slab one");

  // Same name: replaced. Forgotten: gone. A listing leaves the holder's copies in place.
  UniqueFd newer = memfd_with("slab zero, again");
  ASSERT_TRUE(store->keep("hearth-slab.zero", newer.get()).is_ok());
  ASSERT_TRUE(store->forget("hearth-slab.one").is_ok());
  EXPECT_EQ((*holder)->names(), (std::vector<std::string>{"hearth-slab.zero", "other"}));
  auto again = store->kept("hearth-slab.");
  ASSERT_TRUE(again.is_ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ(content_of((*again)[0].fd.get()), "slab zero, again");
}

TEST(FdStoreTest, HolderRefusesMalformedRequests) {
  testing::TempDir dir;
  const auto path = fd_holder_path(dir.path(), "t");
  auto holder = FdHolder::start(path);
  ASSERT_TRUE(holder.is_ok());
  auto store = fd_holder_store(path);
  UniqueFd fd = memfd_with("x");
  EXPECT_FALSE(store->keep("bad:name", fd.get()).is_ok());
  EXPECT_FALSE(store->keep(std::string(300, 'n'), fd.get()).is_ok());
  for (std::string bad : {std::string("{"), std::string(R"({"op":"keep","name":"a"})"),  // no descriptor
                          std::string(R"({"op":"steal"})"), std::string(R"({"op":"forget"})")}) {
    auto socket = unix_connect(path);
    ASSERT_TRUE(socket.is_ok());
    ASSERT_TRUE(unix_send(socket->get(), bad).is_ok());
    auto answer = unix_receive(socket->get(), milliseconds(5000));
    ASSERT_TRUE(answer.is_ok());
    EXPECT_NE(answer->bytes.find(R"("ok":false)"), std::string::npos) << bad << " -> " << answer->bytes;
  }
  for (size_t i = 0; i < FdHolder::kMaxKept; ++i) ASSERT_TRUE(store->keep("n" + std::to_string(i), fd.get()).is_ok());
  EXPECT_FALSE(store->keep("one-too-many", fd.get()).is_ok());
  EXPECT_EQ((*holder)->names().size(), FdHolder::kMaxKept);
  // No holder there any more: an error, not a hang.
  holder->reset();
  EXPECT_EQ(store->kept("").status().code(), ErrorCode::kNotFound);
}

// systemd's side of FDSTORE=1: a datagram socket where $NOTIFY_SOCKET points.
TEST(FdStoreTest, SystemdStoreSendsFdstoreMessagesWithTheDescriptor) {
  testing::TempDir dir;
  const std::string notify = (dir.path() / "notify").string();
  UniqueFd sink(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  notify.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(sink.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::setenv("NOTIFY_SOCKET", notify.c_str(), 1);
  ::unsetenv(kFdHolderEnv.data());
  auto stores = fd_stores_from_environment();
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_EQ(stores.size(), 1u);
  EXPECT_EQ(stores[0]->kind(), "systemd");
  EXPECT_FALSE(stores[0]->keep("a:b", 0).is_ok());

  ::setenv("NOTIFY_SOCKET", notify.c_str(), 1);
  UniqueFd slab = memfd_with("device slab");
  const Status kept = stores[0]->keep("hearth-slab.r0", slab.get());
  const Status forgot = stores[0]->forget("hearth-slab.r0");
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(kept.is_ok()) << kept.to_string();
  ASSERT_TRUE(forgot.is_ok()) << forgot.to_string();

  auto first = unix_receive(sink.get(), milliseconds(2000));
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(first->bytes, "FDSTORE=1\nFDNAME=hearth-slab.r0");
  ASSERT_EQ(first->fds.size(), 1u);
  EXPECT_EQ(content_of(first->fds[0].get()), "device slab");
  auto second = unix_receive(sink.get(), milliseconds(2000));
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(second->bytes, "FDSTOREREMOVE=1\nFDNAME=hearth-slab.r0");
  EXPECT_TRUE(second->fds.empty());
}

// What systemd gives a restarted service: $LISTEN_FDS descriptors from 3 on, named by
// $LISTEN_FDNAMES, for this pid. In a child, so that fd 3 and the environment are its own.
TEST(FdStoreTest, SystemdStoreTakesBackTheDescriptorsOfTheLastRun) {
  const pid_t child = ::fork();
  if (child == 0) {
    UniqueFd slab = memfd_with("kept by systemd"), other = memfd_with("someone else's");
    if (::dup2(slab.get(), 3) != 3 || ::dup2(other.get(), 4) != 4) ::_exit(10);
    ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
    ::setenv("LISTEN_FDS", "2", 1);
    ::setenv("LISTEN_FDNAMES", "hearth-slab.r0:metrics", 1);
    ::setenv("NOTIFY_SOCKET", "/nonexistent/notify", 1);
    auto stores = fd_stores_from_environment();
    if (stores.size() != 1) ::_exit(11);
    auto kept = stores[0]->kept("hearth-slab.");
    if (!kept.is_ok() || kept->size() != 1) ::_exit(12);
    if ((*kept)[0].name != "hearth-slab.r0" || (*kept)[0].fd.get() != 3) ::_exit(13);
    if (content_of(3) != "kept by systemd") ::_exit(14);
    if (std::getenv("LISTEN_FDS") != nullptr) ::_exit(15);  // taken once
    if (!stores[0]->kept("hearth-slab.")->empty()) ::_exit(16);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace hearth
