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

// tests/data/plain_chat.jinja: a chat template that writes the messages' contents in order
// (for chat requests to base models such as stories260K, which ship none).
std::string plain_chat_template();

}  // namespace hearth::testing
