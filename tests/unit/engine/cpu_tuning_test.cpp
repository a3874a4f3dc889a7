// The per-host prefetch choice: measured, kept unless clearly beaten, cached per key,
// and overridden by HEARTH_CPU_PREFETCH.
#include "engine/cpu/cpu_tuning.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

namespace hearth {
namespace {

class CpuTuningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("hearth_tuning_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    saved_ = kernels::cpu::weight_prefetch_bytes();
    ::unsetenv("HEARTH_CPU_PREFETCH");
  }
  void TearDown() override {
    kernels::cpu::set_weight_prefetch_bytes(saved_);
    ::unsetenv("HEARTH_CPU_PREFETCH");
    std::filesystem::remove_all(dir_);
  }
  PrefetchTuningOptions options(const std::string& key) {
    PrefetchTuningOptions o;
    o.key = key;
    o.cache_file = dir_ / "cpu-tuning";
    o.rounds = 3;
    o.pass_bytes = 1e9;
    return o;
  }

  std::filesystem::path dir_;
  int saved_ = 0;
};

// A pass that takes `seconds[distance]` and counts its calls.
struct FakePass {
  std::map<int, double> seconds;
  int calls = 0;
  double operator()(int distance) {
    ++calls;
    EXPECT_EQ(kernels::cpu::weight_prefetch_bytes(), distance) << "a pass must run with its candidate set";
    return seconds.at(distance);
  }
};

TEST_F(CpuTuningTest, TheFastestCandidateWinsAndIsCached) {
  FakePass fake{{{0, 1.0}, {2048, 0.9}, {4096, 0.8}, {8192, 1.0}}};
  kernels::cpu::set_weight_prefetch_bytes(8192);
  const PrefetchTuning t = tune_weight_prefetch(options("cpu A"), std::ref(fake));
  EXPECT_EQ(t.bytes, 4096);
  EXPECT_EQ(t.source, "measured");
  EXPECT_EQ(kernels::cpu::weight_prefetch_bytes(), 4096);
  EXPECT_EQ(fake.calls, 3 * static_cast<int>(kPrefetchCandidates.size()));
  ASSERT_EQ(t.seconds.size(), kPrefetchCandidates.size());
  EXPECT_NE(t.describe(1e9).find("4096=1.3 GB/s"), std::string::npos) << t.describe(1e9);

  // The next start with the same key reads the choice back without measuring.
  FakePass never{{{0, 0.1}, {2048, 0.1}, {4096, 0.1}, {8192, 0.1}}};
  kernels::cpu::set_weight_prefetch_bytes(0);
  const PrefetchTuning cached = tune_weight_prefetch(options("cpu A"), std::ref(never));
  EXPECT_EQ(never.calls, 0);
  EXPECT_EQ(cached.bytes, 4096);
  EXPECT_EQ(kernels::cpu::weight_prefetch_bytes(), 4096);
  EXPECT_NE(cached.source.find("cached"), std::string::npos);

  // Another key (another CPU, thread count or weight type) is measured and cached beside it.
  FakePass other{{{0, 0.5}, {2048, 0.9}, {4096, 0.9}, {8192, 0.9}}};
  EXPECT_EQ(tune_weight_prefetch(options("cpu B"), std::ref(other)).bytes, 0);
  EXPECT_EQ(tune_weight_prefetch(options("cpu A"), std::ref(never)).bytes, 4096);
  EXPECT_EQ(tune_weight_prefetch(options("cpu B"), std::ref(never)).bytes, 0);
  EXPECT_EQ(never.calls, 0);
}

TEST_F(CpuTuningTest, NoPrefetchStaysUnlessClearlyBeaten) {
  // 2% faster is within a noisy host's spread: no software prefetch is kept.
  FakePass fake{{{0, 1.0}, {2048, 0.99}, {4096, 0.98}, {8192, 0.985}}};
  PrefetchTuningOptions o = options("cpu C");
  o.cache_file.clear();  // not cached
  EXPECT_EQ(tune_weight_prefetch(o, std::ref(fake)).bytes, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "cpu-tuning"));
  // A distance that earns its place is taken (the Intel host's 8 KiB, 30% faster).
  FakePass intel{{{0, 1.0}, {2048, 0.9}, {4096, 0.8}, {8192, 0.7}}};
  EXPECT_EQ(tune_weight_prefetch(o, std::ref(intel)).bytes, 8192);
}

TEST_F(CpuTuningTest, EachCandidateCountsItsBestRound) {
  // 0 is slow in its first round only (a neighbour's burst): its best round decides.
  int zero_calls = 0;
  auto pass = [&](int distance) {
    if (distance == 0) return ++zero_calls == 1 ? 5.0 : 0.5;
    return 1.0;
  };
  EXPECT_EQ(tune_weight_prefetch(options("cpu D"), pass).bytes, 0);
}

TEST_F(CpuTuningTest, TheEnvironmentWinsAndBadCacheLinesAreIgnored) {
  {
    std::ofstream out(dir_ / "cpu-tuning");
    out << "garbage without a tab\n" << "cpu E\t12345\n" << "cpu F\t2048\n";
  }
  // 12345 is not a candidate: measured again, and the file rewritten without the garbage.
  FakePass fake{{{0, 1.0}, {2048, 0.5}, {4096, 1.0}, {8192, 1.0}}};
  EXPECT_EQ(tune_weight_prefetch(options("cpu E"), std::ref(fake)).bytes, 2048);
  EXPECT_GT(fake.calls, 0);
  std::ifstream in(dir_ / "cpu-tuning");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "cpu F\t2048\ncpu E\t2048\n");

  ::setenv("HEARTH_CPU_PREFETCH", "1024", 1);
  FakePass never{{}};
  const PrefetchTuning t = tune_weight_prefetch(options("cpu F"), std::ref(never));
  EXPECT_EQ(never.calls, 0);
  EXPECT_EQ(t.bytes, 1024);
  EXPECT_EQ(t.source, "HEARTH_CPU_PREFETCH");
  EXPECT_EQ(kernels::cpu::weight_prefetch_bytes(), 1024);
  EXPECT_EQ(kernels::cpu::weight_prefetch_from_env(), 1024);
  ::setenv("HEARTH_CPU_PREFETCH", "lots", 1);
  EXPECT_EQ(kernels::cpu::weight_prefetch_from_env(), -1);
}

TEST_F(CpuTuningTest, TheCacheFollowsTheUsualDirectories) {
  ::setenv("HEARTH_CACHE_DIR", "/x/hearth-cache", 1);
  EXPECT_EQ(default_tuning_cache_file(), std::filesystem::path("/x/hearth-cache/cpu-tuning"));
  ::unsetenv("HEARTH_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = xdg != nullptr ? xdg : "";
  const char* systemd = std::getenv("CACHE_DIRECTORY");
  const std::string saved_systemd = systemd != nullptr ? systemd : "";
  ::setenv("CACHE_DIRECTORY", "/var/cache/hearth:/var/cache/other", 1);
  EXPECT_EQ(default_tuning_cache_file(), std::filesystem::path("/var/cache/hearth/cpu-tuning"));
  ::unsetenv("CACHE_DIRECTORY");
  ::setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  EXPECT_EQ(default_tuning_cache_file(), std::filesystem::path("/x/xdg/hearth/cpu-tuning"));
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/x/home", 1);
  EXPECT_EQ(default_tuning_cache_file(), std::filesystem::path("/x/home/.cache/hearth/cpu-tuning"));
  ::unsetenv("HOME");
  EXPECT_TRUE(default_tuning_cache_file().empty());
  if (!saved_home.empty()) ::setenv("HOME", saved_home.c_str(), 1);
  if (!saved_xdg.empty()) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (!saved_systemd.empty()) ::setenv("CACHE_DIRECTORY", saved_systemd.c_str(), 1);
  EXPECT_FALSE(kernels::cpu::cpu_model_name().empty());
  EXPECT_NE(kernels::cpu::cpu_host_summary().find("; path "), std::string::npos);
}

// The model a figure or a cached choice is tied to names cpuid's family and model, as
// /proc/cpuinfo gives them: a VM's "AMD EPYC" alone is the same on Zen 4 and Zen 5.
TEST(CpuModelTest, NamesItsFamilyAndModelAsCpuinfoDoes) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, family, model;
  auto value = [](const std::string& l) { return l.substr(l.find_first_not_of(" \t", l.find(':') + 1)); };
  while (std::getline(in, line) && (family.empty() || model.empty())) {
    if (line.rfind("cpu family", 0) == 0) family = value(line);
    if (line.rfind("model", 0) == 0 && line.rfind("model name", 0) != 0) model = value(line);
  }
  if (family.empty() || model.empty()) GTEST_SKIP() << "/proc/cpuinfo names no cpu family and model";
  const std::string name = kernels::cpu::cpu_model_name();
  EXPECT_NE(name.find(" (family " + family + ", model " + model + ")"), std::string::npos) << name;
  EXPECT_EQ(kernels::cpu::cpu_host_summary().rfind(name + "; path ", 0), 0u) << kernels::cpu::cpu_host_summary();
}

// Views of a Llama-like model: `layers` layers of q (2 MiB), ffn_up (8 MiB) and
// ffn_down (8 MiB) matrices, plus an embedding table and norms that are never read.
std::vector<TensorView> fake_model(int layers) {
  std::vector<TensorView> v;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols) {
    TensorView t;
    t.name = std::move(name);
    t.dtype = DType::kF16;
    t.n_dims = 2;
    t.shape = {rows, cols, 0, 0};
    t.bytes = static_cast<uint64_t>(rows * cols * 2);
    v.push_back(t);
  };
  matrix("token_embd.weight", 32000, 1024);
  for (int l = 0; l < layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    matrix(b + "attn_q.weight", 1024, 1024);
    matrix(b + "ffn_up.weight", 4096, 1024);
    matrix(b + "ffn_down.weight", 1024, 4096);
    TensorView norm;
    norm.name = b + "attn_norm.weight";
    norm.n_dims = 1;
    norm.shape = {1024, 0, 0, 0};
    v.push_back(norm);
  }
  return v;
}

TEST(PrefetchWindowsTest, WindowsHoldTheSameMatricesOfWholeLayers) {
  const auto model = fake_model(16);
  // 4 MiB windows: a layer's first two matrices (2 + 8 MiB) reach them.
  auto w = prefetch_tuning_windows(model, 4ull << 20, 6);
  ASSERT_EQ(w.size(), 6u);
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(w[i].size(), 2u);
    EXPECT_EQ(w[i][0]->name, "blk." + std::to_string(i) + ".attn_q.weight");
    EXPECT_EQ(w[i][1]->name, "blk." + std::to_string(i) + ".ffn_up.weight");
  }
  // 40 MiB windows: every matrix of three layers (18 MiB each).
  w = prefetch_tuning_windows(model, 40ull << 20, 100);
  ASSERT_EQ(w.size(), 5u) << "16 layers make 5 windows of 3 (54 MiB, the last layer left over)";
  for (const auto& window : w) EXPECT_EQ(window.size(), 9u);
  EXPECT_EQ(w[1][0]->name, "blk.3.attn_q.weight");
  // A small model makes too few windows to measure anything.
  EXPECT_LT(prefetch_tuning_windows(fake_model(3)).size(), kMinTuningWindows);
  EXPECT_TRUE(prefetch_tuning_windows(std::vector<TensorView>{}).empty());
}

TEST(PrefetchWindowsTest, AnUnparsableEnvironmentValueIsRefused) {
  ::unsetenv("HEARTH_CPU_PREFETCH");
  EXPECT_TRUE(prefetch_env_check().is_ok());
  ::setenv("HEARTH_CPU_PREFETCH", "4096", 1);
  EXPECT_TRUE(prefetch_env_check().is_ok());
  for (const char* bad : {"4k", "-1", "70000", "64 "}) {
    ::setenv("HEARTH_CPU_PREFETCH", bad, 1);
    const Status s = prefetch_env_check();
    EXPECT_FALSE(s.is_ok()) << bad;
    EXPECT_NE(s.message().find("HEARTH_CPU_PREFETCH"), std::string::npos) << s.message();
  }
  ::unsetenv("HEARTH_CPU_PREFETCH");
}

}  // namespace
}  // namespace hearth
