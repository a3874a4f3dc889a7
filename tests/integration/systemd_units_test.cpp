// The systemd units in systemd/, as configured for this build (HEARTH_SYSTEMD_TEST_DIR:
// ExecStart= in the build's bin/, the example env file beside them): `systemd-analyze
// verify` finds nothing wrong with them, the options they pass exist, and the units they
// name exist.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/hearth_bin.h"

namespace hearth::testing {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kUnits = {"hearth-loader.service", "hearth-engine@.service", "hearth-frontend.socket",
                                         "hearth-frontend.service", "hearth.target"};

fs::path unit_dir() { return HEARTH_SYSTEMD_TEST_DIR; }

// `name` found in $PATH, or empty.
std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr && *path != '\0' ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// The values of `key=` lines in a unit file.
std::vector<std::string> values_of(const fs::path& unit, const std::string& key) {
  std::ifstream in(unit);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key + "=")) out.push_back(line.substr(key.size() + 1));
  }
  return out;
}

// "systemd 252 (252.39-1~deb12u2)" -> 252; 0 when unreadable.
int systemd_version(const std::string& analyze) {
  const ProcessResult r = run_process({analyze, "--version"});
  std::istringstream in(r.out);
  std::string name;
  int version = 0;
  in >> name >> version;
  return name == "systemd" ? version : 0;
}

TEST(SystemdUnits, VerifyFindsNothingWrong) {
  const std::string analyze = find_in_path("systemd-analyze");
  if (analyze.empty()) GTEST_SKIP() << "systemd-analyze is not installed (Debian package systemd)";
  std::vector<std::string> argv = {analyze, "verify", "--man=no"};
  // Since systemd 250 verify exits 0 on warnings unless asked; "one": these units and the
  // units they name (not the whole system's closure, which is not ours to judge).
  if (systemd_version(analyze) >= 250) argv.push_back("--recursive-errors=one");
  for (const auto& unit : kUnits) {
    ASSERT_TRUE(fs::exists(unit_dir() / unit)) << (unit_dir() / unit) << " was not configured";
    argv.push_back((unit_dir() / unit).string());
  }
  const ProcessResult r = run_process(argv);
  EXPECT_EQ(r.exit_code, 0) << "systemd-analyze verify:\n" << r.out << r.err;
  // Unknown keys and unparsable values are only warnings ("..., ignoring."): any line that
  // names one of our units or their folder is a failure. Lines about other units (the
  // host's own) are shown but not ours to fail on.
  for (const std::string& line : lines_of(r.out + r.err)) {
    const bool ours = line.find("hearth") != std::string::npos || line.find(unit_dir().string()) != std::string::npos;
    if (ours) {
      ADD_FAILURE() << "systemd-analyze verify: " << line;
    } else {
      std::cerr << "systemd-analyze verify (not about hearth, ignored): " << line << "\n";
    }
  }
}

// Every --option on an ExecStart= line is one the program lists in its --help.
TEST(SystemdUnits, ExecStartUsesOnlyRealOptions) {
  int programs = 0;
  for (const auto& unit : kUnits) {
    for (const std::string& exec : values_of(unit_dir() / unit, "ExecStart")) {
      const auto words = words_of(exec);
      ASSERT_FALSE(words.empty()) << unit;
      const fs::path program = words[0];
      EXPECT_EQ(program.parent_path(), fs::path(hearth_bin("hearth")).parent_path())
          << unit << ": ExecStart= runs " << program << ", not a program of this build";
      const ProcessResult help = run_process({program.string(), "--help"});
      ASSERT_EQ(help.exit_code, 0) << unit << ": " << program << " --help: " << help.err;
      for (size_t i = 1; i < words.size(); ++i) {
        if (!words[i].starts_with("--")) continue;
        EXPECT_NE(help.out.find("  " + words[i] + " "), std::string::npos)
            << unit << ": " << program.filename() << " has no option " << words[i];
      }
      ++programs;
    }
  }
  EXPECT_EQ(programs, 3) << "one ExecStart= in each of the three services";
}

// Every variable the command lines use is set in the example env file.
TEST(SystemdUnits, CommandLineVariablesAreInTheEnvFile) {
  std::set<std::string> defined;
  std::ifstream env(unit_dir() / "hearth.env");
  ASSERT_TRUE(env) << "no example env file in " << unit_dir();
  for (std::string line; std::getline(env, line);) {
    if (line.empty() || line[0] == '#') continue;
    defined.insert(line.substr(0, line.find('=')));
  }
  for (const auto& unit : kUnits) {
    for (const std::string& exec : values_of(unit_dir() / unit, "ExecStart")) {
      for (std::string word : words_of(exec)) {
        if (!word.starts_with("$")) continue;
        word = word.substr(word.starts_with("${") ? 2 : 1);
        word = word.substr(0, word.find('}'));
        EXPECT_TRUE(defined.contains(word)) << unit << " uses $" << word << ", which hearth.env does not set";
      }
    }
  }
}

// Units named in dependencies that are ours (hearth*) exist: a typo in Wants= is no error
// to systemd, only a unit that never starts.
TEST(SystemdUnits, DependenciesNameExistingUnits) {
  for (const auto& unit : kUnits) {
    for (const char* key : {"Wants", "Requires", "BindsTo", "PartOf", "After", "Before", "WantedBy"}) {
      for (const std::string& value : values_of(unit_dir() / unit, key)) {
        for (const std::string& name : words_of(value)) {
          if (!name.starts_with("hearth")) continue;
          // hearth-engine@0.service comes from the template hearth-engine@.service.
          const size_t at = name.find('@'), dot = name.rfind('.');
          const std::string file = at == std::string::npos ? name : name.substr(0, at + 1) + name.substr(dot);
          EXPECT_TRUE(fs::exists(unit_dir() / file)) << unit << ": " << key << "=" << name << " names no unit";
        }
      }
    }
  }
}

}  // namespace
}  // namespace hearth::testing
