// "A forward step does not allocate" (engine/README.md), checked with a counting
// operator new in this test binary: after the model is created and a warm-up step of the
// largest shape has grown the backend's scratch once, steps of every shape (prefill
// chunks, batched decode, one sequence) allocate nothing, on every thread of the pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "engine/core/model.h"
#include "engine/cpu/cpu_backend.h"
#include "ipc/weights_segment.h"
#include "loader/resident.h"
#include "loader/synth.h"
#include "tests/test_util.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

// The replacements pair operator new with free() on purpose.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t align = static_cast<size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace hearth {
namespace {

// A model big enough that every op splits across the pool's threads, in the layout the
// engine serves (quantized, row-interleaved) or as floats.
class NoAllocTest : public ::testing::TestWithParam<const char*> {};

TEST_P(NoAllocTest, ForwardStepsAllocateNothing) {
  testing::TempDir dir;
  SynthOptions synth;
  synth.shape = SynthShape{256, 768, 2, 4, 2, 1024, 512, 10000.0f};
  synth.gguf = dir.path() / "m.gguf";
  synth.gguf_type = DType::kF32;
  ASSERT_TRUE(synth_write(synth).is_ok());
  ResidentOptions r;
  r.model = synth.gguf;
  r.shm_dir = dir.path();
  r.instance = "a";
  if (std::string_view(GetParam()) != "f32") r.quant = quant_from_name(GetParam()).value();
  ASSERT_TRUE(resident_publish(r).is_ok());
  auto weights = weights_attach(segment_path(dir.path(), "a", "weights"));
  ASSERT_TRUE(weights.is_ok()) << weights.status().to_string();
  const ModelConfig& c = weights->config;
  auto backend = make_cpu_backend({false, 2});
  constexpr int32_t kMaxTokens = 64;
  auto model = Model::create(c, weights->tensors(0), *backend, kMaxTokens);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto cache = KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 64});
  ASSERT_TRUE(cache.is_ok());

  // Four sequences with their blocks reserved up front (the scheduler's job, not the step's).
  constexpr int kSeqs = 4;
  std::vector<KvSequence> seqs(kSeqs);
  for (auto& s : seqs) ASSERT_TRUE(kv_sequence_reserve(*cache, s, 200).is_ok());
  std::vector<TokenId> tokens(kMaxTokens);
  std::vector<float> logits(static_cast<size_t>(kMaxTokens) * static_cast<size_t>(c.vocab_size));
  int32_t next_pos[kSeqs] = {0, 0, 0, 0};
  // The driver's way: one ModelInput, cleared and refilled every step (capacity kept).
  ModelInput input;
  // One step: `per_seq` tokens for each of the first `n` sequences, logits for their last.
  auto step = [&](int n, int per_seq) {
    input.clear(cache->config().block_size);
    for (int s = 0; s < n; ++s) {
      for (int i = 0; i < per_seq; ++i) tokens[static_cast<size_t>(i)] = (i * 7 + s) % c.vocab_size;
      const Status st = input.add_sequence(std::span(tokens).first(static_cast<size_t>(per_seq)), next_pos[s],
                                           seqs[static_cast<size_t>(s)].blocks, true);
      if (!st.is_ok()) return st;
      next_pos[s] += per_seq;
    }
    return (*model)->forward(input, *cache, logits.data());
  };
  ASSERT_TRUE(step(kSeqs, kMaxTokens / kSeqs).is_ok());  // warm-up at the largest shape
  const uint64_t before = g_allocations.load();
  ASSERT_TRUE(step(kSeqs, kMaxTokens / kSeqs).is_ok());  // prefill chunks of four sequences
  ASSERT_TRUE(step(kSeqs, 1).is_ok());                    // batched decode
  ASSERT_TRUE(step(1, 1).is_ok());                        // one sequence
  ASSERT_TRUE(step(2, 7).is_ok());                        // ragged
  EXPECT_EQ(g_allocations.load() - before, 0u) << "allocations in four forward steps";
  // The counter counts: a vector's growth is seen (the hook is live in this binary).
  const uint64_t probe = g_allocations.load();
  std::vector<int> v(10);
  EXPECT_GT(g_allocations.load(), probe);
}

INSTANTIATE_TEST_SUITE_P(Layouts, NoAllocTest, ::testing::Values("f32", "int8", "int4"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace hearth
