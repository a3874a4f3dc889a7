// What the daemons tell systemd, through a NOTIFY_SOCKET this test owns (as systemd's
// is): READY once serving, WATCHDOG at half the WATCHDOG_USEC systemd set, STOPPING on
// SIGTERM, then a clean exit. Real processes: hearth-loader, hearth-engine, hearth-frontend.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

#include "tests/integration/instance.h"
#include "tests/notify_socket.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// NOTIFY_SOCKET for a child, and a watchdog of 400 ms (pings every 200 ms).
Environment notify_env(const NotifySocket& socket) {
  return {"NOTIFY_SOCKET=" + socket.path(), "WATCHDOG_USEC=400000"};
}

int count(const std::vector<std::string>& messages, const std::string& what) {
  int n = 0;
  for (const auto& m : messages) n += m.find(what) != std::string::npos ? 1 : 0;
  return n;
}

// Starts a daemon on the notify socket and checks the whole conversation.
void check_daemon(const std::string& name, const std::vector<std::string>& argv) {
  NotifySocket socket;
  ChildProcess child(argv, notify_env(socket));
  const auto ready = socket.read_until("READY=1", 60s);
  ASSERT_EQ(count(ready, "READY=1"), 1) << name << " never said READY: " << child.err();
  // Pings at ~200 ms: at least four in 1.5 s (a daemon pinging every second would send one).
  const auto pings = socket.read_until("never", 1500ms);
  EXPECT_GE(count(pings, "WATCHDOG=1"), 4) << name << " pings too rarely for WATCHDOG_USEC=400000";
  child.signal(SIGTERM);
  const auto stopping = socket.read_until("STOPPING=1", 10s);
  EXPECT_EQ(count(stopping, "STOPPING=1"), 1) << name << " did not say STOPPING";
  EXPECT_EQ(child.wait(30s), 0) << name << ": " << child.err();
}

TEST(NotifyTest, LoaderEngineAndFrontendTalkToSystemd) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance inst("notify");
  check_daemon("hearth-loader", {hearth_bin("hearth-loader"), "--model", model.string(), "--instance", inst.name(),
                                 "--shm-dir", inst.shm().string()});
  std::string failure;
  // The engine and the frontend, each with the other running plainly.
  check_daemon("hearth-engine", inst.engine_argv({"--threads", "1"}));
  auto engine = inst.engine({"--threads", "1"}, {}, &failure);
  ASSERT_TRUE(engine) << failure;
  check_daemon("hearth-frontend", inst.frontend_argv({}, false));
}

}  // namespace
}  // namespace hearth::testing
