// A few hundred damaged copies of the real model files (truncated, bit-flipped, sizes
// and offsets set to extreme values, random byte runs): each must be refused with an
// error or load into something that runs, never crash, hang or allocate without bound.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <fstream>
#include <random>

#include "engine/core/backend.h"
#include "engine/core/generate.h"
#include "engine/core/model.h"
#include "engine/cpu/cpu_backend.h"
#include "loader/model.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;
using testing::TempDir;

std::string mutate(const std::string& seed, std::mt19937_64& rng, int kind) {
  std::string m = seed;
  const size_t pos = rng() % m.size();
  switch (kind % 5) {
    case 0: m.resize(pos); break;  // truncated
    case 1: m[pos] = static_cast<char>(m[pos] ^ (1 << (rng() % 8))); break;  // one bit
    case 2: {  // a little-endian word in the header region set to an extreme value
      static const uint64_t kValues[] = {0, 1, 0x7fffffffffffffffull, 0xffffffffffffffffull, 0xffffffffull,
                                         0x100000000ull, 0x80000000ull};
      const size_t header = std::min<size_t>(m.size(), 64 * 1024);
      const size_t at = (rng() % header) & ~size_t{3};
      const uint64_t v = kValues[rng() % std::size(kValues)];
      std::memcpy(m.data() + at, &v, std::min<size_t>(8, m.size() - at));
      break;
    }
    case 3: {  // random bytes near the start, where the structure is
      const size_t at = rng() % std::min<size_t>(m.size(), 4096);
      for (size_t k = 0; k < 16 && at + k < m.size(); ++k) m[at + k] = static_cast<char>(rng());
      break;
    }
    default: {  // a duplicated chunk (lengths no longer match the content)
      const size_t at = rng() % std::min<size_t>(m.size(), 8192);
      m.insert(at, m.substr(at, 1 + rng() % 64));
    }
  }
  return m;
}

// Opens the model, loads its tokenizer and runs a few tokens when it loads.
void exercise(const std::filesystem::path& path, int& refused, int& loaded) {
  auto model = model_open(path);
  if (!model.is_ok()) {
    EXPECT_FALSE(model.status().message().empty());
    ++refused;
    return;
  }
  ++loaded;
  auto tok = tokenizer_load(model->tokenizer);
  if (tok.is_ok()) (void)(*tok)->encode("Once upon a time");
  auto backend = make_cpu_backend();
  auto llama = Model::create(model->config, model->tensors, *backend, 8);
  if (!llama.is_ok()) return;
  auto cache = KvCache::create(*backend, {model->config.n_layers, model->config.kv_dim(), 16, 1});
  if (!cache.is_ok()) return;
  GenerateOptions o;
  o.spec.max_tokens = 3;
  o.spec.sampling.temperature = 0.0f;
  (void)generate(**llama, *cache, std::vector<TokenId>{1, 2 % model->config.vocab_size}, o);
}

class MutationTest : public ::testing::TestWithParam<const char*> {};

TEST_P(MutationTest, DamagedFilesNeverCrash) {
#if defined(HEARTH_SANITIZE_ADDRESS)
  GTEST_SKIP() << "the 8 GiB address-space cap that stands for a machine's memory cannot hold AddressSanitizer's "
                  "shadow memory; the plain build runs this test";
#endif
  const std::string which = GetParam();
  TempDir dir;
  std::filesystem::path seed_path, target;
  if (which == "gguf") {
    seed_path = shared_path("models/stories260K/stories260K.gguf");
    target = dir.path() / "m.gguf";
  } else if (which == "llama2c") {
    seed_path = shared_path("models/stories260K/stories260K.bin");
    target = dir.path() / "m.bin";
  } else {
    seed_path = shared_path("models/stories260K-hf/model.safetensors");
    target = dir.path() / "model.safetensors";
  }
  HEARTH_REQUIRE_SHARED(seed_path);
  if (which == "llama2c") std::filesystem::copy(shared_path("models/stories260K/tok512.bin"), dir.path());
  if (which == "safetensors") {
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.model", "tokenizer_config.json"}) {
      std::filesystem::copy(shared_path("models/stories260K-hf") / f, dir.path());
    }
  }
  // A hostile file must not make us allocate without bound: cap the address space.
  rlimit old{};
  getrlimit(RLIMIT_AS, &old);
  const rlimit cap{8ull << 30, old.rlim_max};
  setrlimit(RLIMIT_AS, &cap);

  std::ifstream in(seed_path, std::ios::binary);
  const std::string seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937_64 rng(std::hash<std::string>()(which));
  int refused = 0, loaded = 0;
  constexpr int kMutations = 150;
  for (int i = 0; i < kMutations; ++i) {
    const std::string m = mutate(seed, rng, i);
    {
      std::ofstream out(target, std::ios::binary | std::ios::trunc);
      out.write(m.data(), static_cast<std::streamsize>(m.size()));
    }
    exercise(which == "safetensors" ? dir.path() : target, refused, loaded);
  }
  setrlimit(RLIMIT_AS, &old);
  std::printf("%s: %d mutations, %d refused with an error, %d loaded and ran\n", which.c_str(), kMutations, refused,
              loaded);
  EXPECT_GT(refused, kMutations / 3) << "most structural damage must be detected";
}

INSTANTIATE_TEST_SUITE_P(RealFiles, MutationTest, ::testing::Values("gguf", "llama2c", "safetensors"));

}  // namespace
}  // namespace hearth
