// Futex wake-ups on 32-bit words in shared memory (process-shared, not FUTEX_PRIVATE).
// A waiter sleeps while the word still holds the value it saw; a waker changes the word
// first, then wakes. Thread- and process-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace hearth {

static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Sleeps until *word != expected, a wake, or `timeout`. Returns immediately when the word
// already differs. Spurious returns are possible: callers re-check their condition.
void futex_wait(const std::atomic<uint32_t>& word, uint32_t expected, std::chrono::microseconds timeout);

// Wakes up to `count` waiters on `word` (INT32_MAX: all).
void futex_wake(const std::atomic<uint32_t>& word, int count = INT32_MAX);

// Changes the word and wakes everyone waiting on it: the usual "there is news" signal.
inline void futex_signal(std::atomic<uint32_t>& word) {
  word.fetch_add(1, std::memory_order_release);
  futex_wake(word);
}

}  // namespace hearth
