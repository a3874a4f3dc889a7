// A driver for fuzz targets when libFuzzer is not linked: runs LLVMFuzzerTestOneInput on
// each file named on the command line, or in a directory named there (a missing file is
// skipped with a note; `--rounds N` sets the mutations per file, 400 by default), then on
// deterministic mutations of it: truncations, bit flips, and overwrites of 8-byte words
// with extreme values. Exits 0 when no input crashed the target, and 77 (CTest's skip)
// when none of the files exists: a replay of nothing must not pass as one.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
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
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
      continue;
    }
    std::error_code ec;
    if (std::filesystem::is_directory(a, ec)) {
      std::vector<std::string> in_dir;
      for (const auto& e : std::filesystem::directory_iterator(a, ec)) {
        if (e.is_regular_file()) in_dir.push_back(e.path().string());
      }
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
      continue;
    }
    files.push_back(a);
  }
  int replayed = 0;
  for (const std::string& name : files) {
    std::ifstream in(name, std::ios::binary);
    if (!in) {
      std::printf("skip %s (absent)\n", name.c_str());
      continue;
    }
    ++replayed;
    std::vector<uint8_t> seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    run(seed);
    const size_t runs = 1 + mutate_and_run(seed, rounds);
    std::printf("%s: %zu inputs, no crash\n", name.c_str(), runs);
  }
  if (replayed == 0) {
    std::printf("skipped: no seed file exists (the shared test files are absent?)\n");
    return 77;
  }
  return 0;
}
