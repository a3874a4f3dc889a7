#include "common/test_point.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace hearth {

namespace {

// HEARTH_DELAY_POINT=name:ms, read once.
struct DelayConfig {
  std::string name;
  std::chrono::milliseconds delay{0};
};

const DelayConfig& delay_config() {
  static DelayConfig* config = [] {
    auto* c = new DelayConfig();
    const char* v = std::getenv("HEARTH_DELAY_POINT");
    if (v == nullptr || *v == '\0') return c;
    const std::string spec(v);
    const size_t colon = spec.rfind(':');
    if (colon == std::string::npos) return c;
    c->name = spec.substr(0, colon);
    c->delay = std::chrono::milliseconds(std::strtoll(spec.c_str() + colon + 1, nullptr, 10));
    return c;
  }();
  return *config;
}

// HEARTH_KILL_POINT, read once.
struct KillConfig {
  std::string name;
  uint64_t at = 1;
  std::chrono::steady_clock::time_point counting_from;  // HEARTH_KILL_AFTER_MS after the first pass
  std::string log;
  mutable std::atomic<uint64_t> passes{0};
};

const KillConfig& kill_config() {
  static KillConfig* config = [] {
    auto* c = new KillConfig();
    const char* v = std::getenv("HEARTH_KILL_POINT");
    if (v == nullptr || *v == '\0') return c;
    std::string spec(v);
    const size_t colon = spec.rfind(':');
    if (colon != std::string::npos) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(spec.c_str() + colon + 1, &end, 10);
      if (end != nullptr && *end == '\0' && n > 0) {
        c->at = n;
        spec.resize(colon);
      }
    }
    c->name = spec;
    if (const char* after = std::getenv("HEARTH_KILL_AFTER_MS"); after != nullptr) {
      c->counting_from = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::strtoll(after, nullptr, 10));
    }
    if (const char* log = std::getenv("HEARTH_KILL_LOG"); log != nullptr) c->log = log;
    return c;
  }();
  return *config;
}

[[noreturn]] void die_here(const KillConfig& c) {
  if (!c.log.empty()) {
    const int fd = ::open(c.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      const std::string line = c.name + "\n";
      [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached
}

// Callbacks and orders registered by in-process tests.
struct SyncRegistry {
  std::mutex mutex;
  std::condition_variable passed;
  std::map<std::string, std::function<void()>, std::less<>> callbacks;
  std::map<std::string, std::set<std::string>, std::less<>> predecessors;  // successor -> predecessors
  std::map<std::string, uint64_t, std::less<>> passes;
};

SyncRegistry& registry() {
  static SyncRegistry* r = new SyncRegistry();
  return *r;
}

std::atomic<bool> g_sync_armed{false};

}  // namespace

bool test_points_compiled() {
#if defined(HEARTH_TEST_POINTS) && HEARTH_TEST_POINTS
  return true;
#else
  return false;
#endif
}

void test_point_pass(std::string_view name) {
  const KillConfig& k = kill_config();
  if (!k.name.empty() && k.name == name && std::chrono::steady_clock::now() >= k.counting_from &&
      k.at == k.passes.fetch_add(1, std::memory_order_relaxed) + 1) {
    die_here(k);
  }
  if (const DelayConfig& d = delay_config(); !d.name.empty() && d.name == name) std::this_thread::sleep_for(d.delay);
  if (!g_sync_armed.load(std::memory_order_acquire)) return;
  SyncRegistry& r = registry();
  std::function<void()> callback;
  {
    std::unique_lock lock(r.mutex);
    // Waits while some predecessor has not been passed (a clear ends every wait).
    r.passed.wait(lock, [&] {
      const auto it = r.predecessors.find(name);
      if (it == r.predecessors.end()) return true;
      for (const std::string& p : it->second) {
        const auto n = r.passes.find(p);
        if (n == r.passes.end() || n->second == 0) return false;
      }
      return true;
    });
    if (const auto it = r.callbacks.find(name); it != r.callbacks.end()) callback = it->second;
  }
  if (callback) callback();
  {
    std::lock_guard lock(r.mutex);
    auto it = r.passes.find(name);
    if (it == r.passes.end()) it = r.passes.emplace(std::string(name), 0).first;
    ++it->second;
  }
  r.passed.notify_all();
}

void test_point_set_callback(const std::string& name, std::function<void()> callback) {
  SyncRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  r.callbacks[name] = std::move(callback);
  g_sync_armed.store(true, std::memory_order_release);
}

void test_point_order(const std::vector<std::pair<std::string, std::string>>& before_after) {
  SyncRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& [before, after] : before_after) {
    r.predecessors[after].insert(before);
    r.passes.erase(before);
  }
  g_sync_armed.store(true, std::memory_order_release);
}

void test_point_clear() {
  SyncRegistry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    r.callbacks.clear();
    r.predecessors.clear();
    r.passes.clear();
    g_sync_armed.store(false, std::memory_order_release);
  }
  r.passed.notify_all();
}

uint64_t test_point_passes(std::string_view name) {
  SyncRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.passes.find(name);
  return it == r.passes.end() ? 0 : it->second;
}

}  // namespace hearth
