// A driver for fuzz targets when libFuzzer is not linked: runs LLVMFuzzerTestOneInput on
// each file named on the command line (a missing file is skipped with a note), then on
// deterministic mutations of it: truncations, bit flips, and overwrites of 8-byte words
// with extreme values. Exits 0 when no input crashed the target.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run(const std::vector<uint8_t>& input) { LLVMFuzzerTestOneInput(input.data(), input.size()); }

size_t mutate_and_run(const std::vector<uint8_t>& seed, unsigned rounds) {
  std::mt19937_64 rng(0x5eed);
  size_t runs = 0;
  const size_t n = seed.size();
  // Truncations at every power of two and at random points.
  for (size_t len = 1; len < n; len *= 2, ++runs) run({seed.begin(), seed.begin() + static_cast<long>(len)});
  for (unsigned i = 0; i < rounds && n > 0; ++i, ++runs) {
    std::vector<uint8_t> m = seed;
    const size_t pos = rng() % n;
    switch (i % 4) {
      case 0: m.resize(pos); break;
      case 1: m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 2: {  // an 8-byte word set to an extreme value, where sizes and offsets live
        static const uint64_t kValues[] = {0, 1, 0x7fffffffffffffffULL, 0xffffffffffffffffULL, 0x100000000ULL,
                                           0xffffffffULL};
        const uint64_t v = kValues[rng() % std::size(kValues)];
        const size_t at = (pos / 8) * 8;
        std::memcpy(m.data() + at, &v, std::min<size_t>(8, n - at));
        break;
      }
      default: {  // a random byte run
        const size_t len = std::min<size_t>(1 + rng() % 16, n - pos);
        for (size_t k = 0; k < len; ++k) m[pos + k] = static_cast<uint8_t>(rng());
      }
    }
    run(m);
  }
  return runs;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned rounds = 400;
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::printf("skip %s (absent)\n", argv[i]);
      continue;
    }
    std::vector<uint8_t> seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    run(seed);
    const size_t runs = 1 + mutate_and_run(seed, rounds);
    std::printf("%s: %zu inputs, no crash\n", argv[i], runs);
  }
  return 0;
}
