// What the benchmarks that start hearth's processes share: where the binaries are, where
// segments go, the default model (made once by hearth synth) and publishing it.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/subprocess.h"

namespace hearth::bench {

// A program built beside this benchmark.
inline std::string bin(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

// /dev/shm where it is writable, else /tmp.
inline std::string shm_dir() { return ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; }

// The synthetic 1B Q4_0 model most benchmarks run: written by hearth synth where `model`
// does not exist yet.
inline void ensure_synth_1b(const std::string& model) {
  if (std::filesystem::exists(model)) return;
  std::filesystem::create_directories(std::filesystem::path(model).parent_path());
  run_process({bin("hearth"), "synth", "--preset", "1b", "--type", "q4_0", "--gguf", model});
}

// hearth-loader --exit-after-publish of `model` as `instance`; false (with the loader's
// stderr printed) when it failed.
inline bool publish(const std::string& model, const std::string& instance, const std::string& shm) {
  const auto loaded =
      run_process({bin("hearth-loader"), "--model", model, "--instance", instance, "--shm-dir", shm, "--exit-after-publish"});
  if (loaded.exit_code != 0) std::fprintf(stderr, "loader: %s\n", loaded.err.c_str());
  return loaded.exit_code == 0;
}

}  // namespace hearth::bench
