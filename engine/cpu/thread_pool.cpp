#include "engine/cpu/thread_pool.h"

#include <sched.h>

#include <cstdlib>

namespace hearth {

int default_thread_count() {
  if (const char* env = std::getenv("HEARTH_THREADS"); env != nullptr && *env != '\0') {
    const int n = std::atoi(env);
    if (n > 0 && n <= 1024) return n;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads, std::chrono::microseconds spin) : spin_(spin) {
  if (n_threads <= 0) n_threads = default_thread_count();
  // Workers start from generation 0: an op posted before a worker first runs is still its to join.
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(0); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  const TaskRef fn = fn_;
  for (int64_t t; (t = next_task_.fetch_add(1, std::memory_order_relaxed)) < n_tasks_;) fn.call(fn.fn, t);
}

void ThreadPool::run_op(int64_t n_tasks, TaskRef fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn.call(fn.fn, t);
    return;
  }
  fn_ = fn;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);  // publishes fn_ and n_tasks_
  generation_.notify_all();
  run_tasks();
  // Wait for the workers to leave the op (they may still be finishing a task). Yield
  // now and then: a worker that has not been scheduled yet needs this core.
  for (int polls = 1; active_.load(std::memory_order_acquire) != 0; ++polls) {
    if ((polls & 255) == 0) std::this_thread::yield();
  }
  fn_ = TaskRef{nullptr, nullptr};
}

void ThreadPool::worker_loop(uint32_t seen) {
  while (true) {
    // Spin for a while: the next op usually comes within microseconds.
    const auto spin_until = std::chrono::steady_clock::now() + spin_;
    uint32_t now = generation_.load(std::memory_order_acquire);
    for (int polls = 0; now == seen; ++polls) {
      if ((polls & 63) == 0) {
        if (std::chrono::steady_clock::now() >= spin_until) break;
        std::this_thread::yield();
      }
      now = generation_.load(std::memory_order_acquire);
    }
    while (now == seen) {  // idle: sleep until the next op
      generation_.wait(seen, std::memory_order_acquire);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    run_tasks();
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace hearth
