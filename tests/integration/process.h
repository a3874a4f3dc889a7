// Running hearth's executables from tests: a command line in, exit status and both
// output streams out.
#pragma once

#include <string>
#include <vector>

namespace hearth::testing {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal when killed by one
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] a path) to completion with stdin from /dev/null.
ProcessResult run_process(const std::vector<std::string>& argv);

// HEARTH_BIN_DIR / name.
std::string hearth_bin(const std::string& name);

}  // namespace hearth::testing
