// Flags every hearth program takes, handled in one place: --version, --log-level LEVEL
// and --log-format text|json (over HEARTH_LOG_LEVEL / HEARTH_LOG_FORMAT).
#pragma once

#include <optional>
#include <string_view>

#include "common/args.h"
#include "common/status.h"

namespace hearth {

inline const std::set<std::string> kProgramValueFlags = {"log-level", "log-format"};
inline const std::set<std::string> kProgramBoolFlags = {"version"};

// `value_flags` / `bool_flags` with the common ones added.
std::set<std::string> with_program_flags(std::set<std::string> flags, const std::set<std::string>& common);

// After Args::parse and log_init (whose status is `logging`): prints the version for
// --version (exit code 0), or applies the log flags; an invalid level or format (given
// or from the environment) is reported on stderr as "PROGRAM: message" (exit code 2).
// nullopt: go on.
std::optional<int> handle_program_flags(const Args& args, std::string_view program, const Status& logging);

}  // namespace hearth
