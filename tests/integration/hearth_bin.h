// Where the tests find hearth's executables, and the process helpers they use.
#pragma once

#include <string>

#include "common/subprocess.h"

namespace hearth::testing {

using hearth::ChildProcess;
using hearth::ProcessResult;
using hearth::run_process;

// The build's bin directory / name.
std::string hearth_bin(const std::string& name);

}  // namespace hearth::testing
