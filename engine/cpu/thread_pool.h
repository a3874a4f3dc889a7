// ThreadPool: persistent workers that split one op at a time across the cores.
//
// parallel_for hands tasks out from an atomic counter (the caller works too) and returns
// when all are done, so ops stay simple fork-join. Between ops the workers spin for a
// while (a step's ops follow each other within microseconds, and waking a sleeping vCPU
// costs milliseconds), then sleep on a futex; they are woken by the next op. Spinning
// yields the CPU between polls so that a core shared with another process is not
// starved. One op at a time: parallel_for must not be called concurrently or from
// inside a task.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <type_traits>
#include <thread>
#include <vector>

namespace hearth {

class ThreadPool {
 public:
  // n_threads counts the calling thread: 1 runs everything inline. 0: one per core.
  explicit ThreadPool(int n_threads = 0,
                      std::chrono::microseconds spin = std::chrono::microseconds(3000));
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task) for every task in [0, n_tasks) and waits for all of them. Meant for
  // ops of at least tens of microseconds; smaller ones are cheaper run inline (see
  // worth_splitting). `fn` is called through a reference, never copied: an op allocates
  // nothing, whatever its lambda captures.
  template <class Fn>
  void parallel_for(int64_t n_tasks, Fn&& fn) {
    run_op(n_tasks, TaskRef{&fn, [](void* f, int64_t t) { (*static_cast<std::remove_reference_t<Fn>*>(f))(t); }});
  }

  // Whether an op of about `work` multiply-adds is worth handing to the other threads.
  bool worth_splitting(int64_t work) const { return !workers_.empty() && work >= kMinSplitWork; }
  static constexpr int64_t kMinSplitWork = int64_t{1} << 18;

 private:
  // A callable not owned: the object and how to call it.
  struct TaskRef {
    void* fn;
    void (*call)(void*, int64_t);
  };
  void run_op(int64_t n_tasks, TaskRef fn);
  void worker_loop(uint32_t seen);
  void run_tasks();

  std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};  // bumped for each op (and for shutdown)
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> active_{0};           // workers still inside the current op
  TaskRef fn_{nullptr, nullptr};
  int64_t n_tasks_ = 0;
  std::atomic<bool> stop_{false};
};

// Threads for the CPU backend: HEARTH_THREADS when set, else the cores this process may use.
int default_thread_count();

}  // namespace hearth
