// Logging: spdlog behind HEARTH_LOG_* macros that test the level before formatting.
//
// One named logger per process ("hearth", "loader", "engine[0]", "frontend"), set up
// once by log_init() before other threads start. Output goes to stderr; under systemd
// (JOURNAL_STREAM set) lines carry syslog priority prefixes and no timestamp, so
// journald records the level and time itself.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

namespace hearth {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Installs the process logger. Level from `level`, overridden by HEARTH_LOG_LEVEL
// (trace, debug, info, warn, error, off) when that is set.
void log_init(std::string_view process_name, LogLevel level = LogLevel::kInfo);

}  // namespace hearth

#define HEARTH_LOG_AT(lvl, ...)                                    \
  do {                                                             \
    if (spdlog::should_log(lvl)) spdlog::log(lvl, __VA_ARGS__);    \
  } while (0)
#define HEARTH_LOG_TRACE(...) HEARTH_LOG_AT(spdlog::level::trace, __VA_ARGS__)
#define HEARTH_LOG_DEBUG(...) HEARTH_LOG_AT(spdlog::level::debug, __VA_ARGS__)
#define HEARTH_LOG_INFO(...) HEARTH_LOG_AT(spdlog::level::info, __VA_ARGS__)
#define HEARTH_LOG_WARN(...) HEARTH_LOG_AT(spdlog::level::warn, __VA_ARGS__)
#define HEARTH_LOG_ERROR(...) HEARTH_LOG_AT(spdlog::level::err, __VA_ARGS__)
