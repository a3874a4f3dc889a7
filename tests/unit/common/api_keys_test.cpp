#include "common/api_keys.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "common/log.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

TEST(ApiKeysTest, FlagsFilesAndTheEnvironmentTogetherWithoutDuplicates) {
  TempDir dir;
  const auto file = dir.path() / "keys";
  std::ofstream(file) << "# operators\n\n  sk-file-key-1  \r\nsk-flag-key-0\n";
  ::setenv(kApiKeyEnv, "sk-env-key-22,sk-file-key-1", 1);
  auto keys = collect_api_keys({"sk-flag-key-0"}, {file.string()});
  ::unsetenv(kApiKeyEnv);
  ASSERT_TRUE(keys.is_ok()) << keys.status().to_string();
  EXPECT_EQ(*keys, (std::vector<std::string>{"sk-flag-key-0", "sk-file-key-1", "sk-env-key-22"}));
}

TEST(ApiKeysTest, BadKeysAndFilesAreRefusedWithoutShowingTheKey) {
  TempDir dir;
  const auto empty = dir.path() / "empty";
  std::ofstream(empty) << "# nothing\n\n";
  const auto spaced = dir.path() / "spaced";
  std::ofstream(spaced) << "sk-has a-space-in-it\n";
  for (const auto& [keys, files, part] : std::vector<std::tuple<std::vector<std::string>, std::vector<std::string>, std::string>>{
           {{"short"}, {}, "--api-key: an API key must be"},
           {{}, {empty.string()}, "holds no key"},
           {{}, {spaced.string()}, "line 1: an API key must be"},
           {{}, {(dir.path() / "missing").string()}, "cannot be read"}}) {
    auto r = collect_api_keys(keys, files);
    ASSERT_FALSE(r.is_ok()) << part;
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().to_string();
    EXPECT_EQ(r.status().message().find("sk-has"), std::string::npos) << "the key itself is never printed";
  }
  EXPECT_TRUE(collect_api_keys({}, {}).value().empty());
}

TEST(LogNamesTest, LevelsAndFormatsByNameOnly) {
  EXPECT_EQ(log_level_from_name("debug").value(), LogLevel::kDebug);
  EXPECT_EQ(log_level_from_name("off").value(), LogLevel::kOff);
  EXPECT_FALSE(log_level_from_name("DEBUG").is_ok());
  EXPECT_FALSE(log_level_from_name("").is_ok());
  EXPECT_EQ(log_format_from_name("json").value(), LogFormat::kJson);
  EXPECT_FALSE(log_format_from_name("xml").is_ok());
}

}  // namespace
}  // namespace hearth
