// Logging: spdlog behind HEARTH_LOG_* macros that test the level before formatting.
//
// One named logger per process ("hearth", "loader", "engine[0]", "frontend"), set up
// once by log_init() before other threads start. Output goes to stderr, as text
// ("2026-12-03 07:30:25.123 info frontend: ...") or as one JSON object per line
// ({"time","level","process","message"}); under systemd (JOURNAL_STREAM set) text lines
// carry syslog priority prefixes and no timestamp, so journald records the level and
// time itself.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace hearth {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class LogFormat { kText, kJson };

// "trace", "debug", "info", "warn", "error", "off"; anything else is an error that lists them.
Result<LogLevel> log_level_from_name(std::string_view name);
// "text" or "json".
Result<LogFormat> log_format_from_name(std::string_view name);

// Installs the process logger at `level` in text. HEARTH_LOG_LEVEL and HEARTH_LOG_FORMAT,
// when set, override both; a value they do not name is an error (and the logger is
// installed with the defaults, so the caller can still say so).
[[nodiscard]] Status log_init(std::string_view process_name, LogLevel level = LogLevel::kInfo);

// --log-level / --log-format: applied over what log_init set (empty: keep it).
[[nodiscard]] Status log_configure(std::string_view level, std::string_view format);

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
