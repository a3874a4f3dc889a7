// Helpers shared by the tests: where the shared test models are, and skipping clearly
// when they are absent.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace hearth::testing {

// The folder holding models/ and tokenizers/ (HEARTH_SHARED, else the build's default).
std::filesystem::path shared_dir();

// shared_dir() / relative.
std::filesystem::path shared_path(const std::string& relative);

// A file of the project's own source tree ("tests/reference/hf_forward.py").
std::filesystem::path source_path(const std::string& relative);

// A fresh, empty temporary directory, removed by the destructor.
class TempDir {
 public:
  // Under the system temporary directory, or under `parent` (e.g. /dev/shm).
  explicit TempDir(const std::filesystem::path& parent = {});
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace hearth::testing

// Skips the test with a message naming the file when a shared test file is absent.
#define HEARTH_REQUIRE_SHARED(path)                                                    \
  do {                                                                                 \
    if (!std::filesystem::exists(path)) {                                              \
      GTEST_SKIP() << "shared test file " << (path).string()                           \
                   << " is absent (set HEARTH_SHARED to the folder holding models/)"; \
    }                                                                                  \
  } while (0)
