// Subcommands of the `hearth` CLI. Each takes the arguments after its name and returns
// the process exit code (0 success, 1 runtime error, 2 usage error), printing errors
// to stderr as "hearth <command>: ERR_...: message".
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace hearth::cli {

// started_at: monotonic_seconds() when the process entered main(), for the ready and
// first-token times it reports.
int generate_command(const std::vector<std::string>& args, double started_at);
int status_command(const std::vector<std::string>& args);
int synth_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int clean_command(const std::vector<std::string>& args);
int quantize_command(const std::vector<std::string>& args);
int eval_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int lora_command(const std::vector<std::string>& args);

// The files of `instance` in `dir` (hearth.<instance>.*; every instance's when empty).
Result<std::vector<std::filesystem::path>> instance_files(const std::filesystem::path& dir,
                                                           const std::string& instance);
// Removes them (or with `dry_run` only lists them in `removed`); refused, removing
// nothing, while a process maps one of them.
Status remove_instance(const std::filesystem::path& dir, const std::string& instance, bool dry_run,
                       std::vector<std::string>* removed);

}  // namespace hearth::cli
