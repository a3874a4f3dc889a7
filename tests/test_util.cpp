#include "tests/test_util.h"

#include <cstdlib>
#include <system_error>

namespace hearth::testing {

std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("HEARTH_SHARED"); env != nullptr && *env != '\0') return env;
  return HEARTH_SHARED_DIR;
}

std::filesystem::path shared_path(const std::string& relative) { return shared_dir() / relative; }

std::filesystem::path source_path(const std::string& relative) { return std::filesystem::path(HEARTH_SOURCE_DIR) / relative; }

TempDir::TempDir(const std::filesystem::path& parent) {
  const auto base = parent.empty() ? std::filesystem::temp_directory_path() : parent;
  std::string pattern = (base / "hearth-test-XXXXXX").string();
  char* made = ::mkdtemp(pattern.data());
  if (made == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace hearth::testing
