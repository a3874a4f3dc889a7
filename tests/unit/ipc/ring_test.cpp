// The request ring: semantics, then a real multi-process stress test (forked producer
// and consumer processes on one shared segment, a million items, none lost or duplicated).
#include "ipc/ring.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "ipc/segment.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

TEST(RingTest, FifoFullAndEmpty) {
  std::vector<std::byte> memory(ring_bytes(4) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(memory.data()) + 63) / 64 * 64);
  ring_init(aligned, 4);
  Ring ring(aligned);
  EXPECT_FALSE(ring.pop().has_value());
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(ring.push(100 + i));
  EXPECT_FALSE(ring.push(999)) << "full";
  EXPECT_EQ(ring.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(ring.pop(), 100 + i);
  EXPECT_FALSE(ring.pop().has_value());
  // Many laps around the cells.
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(ring.push(i));
    ASSERT_EQ(ring.pop(), i);
  }
}

TEST(RingTest, RepairsAfterAConsumerDiedMidPop) {
  std::vector<std::byte> memory(ring_bytes(4) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(memory.data()) + 63) / 64 * 64);
  ring_init(aligned, 4);
  Ring ring(aligned);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(ring.push(i));
  // A consumer that claimed position 0 and died before releasing the cell.
  auto* h = static_cast<RingHeader*>(aligned);
  h->dequeue_pos.store(1);
  EXPECT_EQ(ring.pop(), 1u);
  EXPECT_FALSE(ring.push(7)) << "the claimed cell blocks producers";
  ring.release_claimed();
  EXPECT_TRUE(ring.push(7));
  EXPECT_EQ(ring.pop(), 2u);
}

TEST(RingTest, SkipsAHoleLeftByADeadProducer) {
  std::vector<std::byte> memory(ring_bytes(4) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(memory.data()) + 63) / 64 * 64);
  ring_init(aligned, 4);
  Ring ring(aligned);
  auto* h = static_cast<RingHeader*>(aligned);
  h->enqueue_pos.store(1);  // a producer claimed position 0 and died
  ASSERT_TRUE(ring.push(5));
  EXPECT_FALSE(ring.pop().has_value()) << "the hole hides what follows";
  EXPECT_TRUE(ring.skip_stalled_head());
  EXPECT_EQ(ring.pop(), 5u);
  EXPECT_FALSE(ring.skip_stalled_head()) << "nothing left to skip";
}

TEST(RingTest, ThreadsNeverLoseOrDuplicate) {
  constexpr uint64_t kCapacity = 64, kPerProducer = 50000;
  constexpr int kProducers = 3, kConsumers = 3;
  std::vector<std::byte> memory(ring_bytes(kCapacity) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(memory.data()) + 63) / 64 * 64);
  ring_init(aligned, kCapacity);
  std::vector<std::vector<uint64_t>> got(kConsumers);
  std::atomic<uint64_t> consumed{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      Ring ring(aligned);
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        while (!ring.push((uint64_t(p) << 32) | i)) std::this_thread::yield();
      }
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      Ring ring(aligned);
      while (consumed.load() < kProducers * kPerProducer) {
        if (auto v = ring.pop()) {
          got[static_cast<size_t>(c)].push_back(*v);
          consumed.fetch_add(1);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint64_t> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), kProducers * kPerProducer);
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a value came out twice";
  // Each producer's values come out in order within any one consumer.
  for (auto& g : got) {
    std::vector<uint64_t> last(kProducers, 0);
    std::vector<bool> seen(kProducers, false);
    for (uint64_t v : g) {
      const auto p = static_cast<size_t>(v >> 32);
      const uint64_t i = v & 0xffffffffu;
      if (seen[p]) {
        EXPECT_GT(i, last[p]);
      }
      seen[p] = true;
      last[p] = i;
    }
  }
}

// Forked processes on one shared-memory segment: 4 producers x 250000 items, 3 consumers.
TEST(RingTest, ProcessesNeverLoseOrDuplicateAMillionItems) {
  constexpr uint64_t kCapacity = 256, kPerProducer = 250000;
  constexpr int kProducers = 4, kConsumers = 3;
  constexpr uint64_t kTotal = kProducers * kPerProducer;
  testing::TempDir dir(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "");
  // Layout: [ring] [consumed counter] [per-consumer counts] [per-consumer outputs of kTotal].
  const uint64_t ring_size = (ring_bytes(kCapacity) + 63) / 64 * 64;
  const uint64_t counts_offset = ring_size + 64;
  const uint64_t out_offset = counts_offset + 64 * kConsumers;
  const uint64_t bytes = out_offset + kConsumers * kTotal * sizeof(uint64_t);
  auto seg = ShmSegment::create(dir.path() / "ring", bytes);
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  std::byte* base = seg->data();
  ring_init(base, kCapacity);
  auto* consumed = new (base + ring_size) std::atomic<uint64_t>(0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProducers; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Ring ring(base);
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        while (!ring.push((uint64_t(p) << 32) | i)) ::sched_yield();
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (int c = 0; c < kConsumers; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Ring ring(base);
      auto* count = reinterpret_cast<std::atomic<uint64_t>*>(base + counts_offset + 64 * c);
      auto* out = reinterpret_cast<uint64_t*>(base + out_offset) + static_cast<uint64_t>(c) * kTotal;
      while (consumed->load(std::memory_order_acquire) < kTotal) {
        if (auto v = ring.pop()) {
          out[count->load(std::memory_order_relaxed)] = *v;
          count->fetch_add(1, std::memory_order_release);
          consumed->fetch_add(1, std::memory_order_acq_rel);
        } else {
          ::sched_yield();
        }
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::vector<uint64_t> all;
  all.reserve(kTotal);
  for (int c = 0; c < kConsumers; ++c) {
    const uint64_t n = reinterpret_cast<std::atomic<uint64_t>*>(base + counts_offset + 64 * c)->load();
    const auto* out = reinterpret_cast<const uint64_t*>(base + out_offset) + static_cast<uint64_t>(c) * kTotal;
    all.insert(all.end(), out, out + n);
    std::printf("consumer %d took %llu items\n", c, static_cast<unsigned long long>(n));
  }
  ASSERT_EQ(all.size(), kTotal) << "items lost or duplicated";
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "an item came out twice";
  for (int p = 0; p < kProducers; ++p) {
    EXPECT_EQ(all[static_cast<size_t>(p) * kPerProducer], uint64_t(p) << 32);
    EXPECT_EQ(all[static_cast<size_t>(p + 1) * kPerProducer - 1], (uint64_t(p) << 32) | (kPerProducer - 1));
  }
}

}  // namespace
}  // namespace hearth
