// Subcommands of the `hearth` CLI. Each takes the arguments after its name and returns
// the process exit code (0 success, 1 runtime error, 2 usage error), printing errors
// to stderr as "hearth <command>: ERR_...: message".
#pragma once

#include <string>
#include <vector>

namespace hearth::cli {

// started_at: monotonic_seconds() when the process entered main(), for the ready and
// first-token times it reports.
int generate_command(const std::vector<std::string>& args, double started_at);
int status_command(const std::vector<std::string>& args);
int synth_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);

}  // namespace hearth::cli
