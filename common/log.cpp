#include "common/log.h"

#include <cstdlib>
#include <memory>
#include <string>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace hearth {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

// "%*" prints the sd-daemon(3) priority prefix ("<3>" for errors) that journald reads.
class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    int priority = 6;  // info
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: priority = 7; break;
      case spdlog::level::info: priority = 6; break;
      case spdlog::level::warn: priority = 4; break;
      case spdlog::level::err: priority = 3; break;
      case spdlog::level::critical: priority = 2; break;
      default: break;
    }
    const char text[4] = {'<', static_cast<char>('0' + priority), '>', '\0'};
    dest.append(text, text + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriorityFlag>();
  }
};

}  // namespace

void log_init(std::string_view process_name, LogLevel level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(std::string(process_name), sink);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    formatter->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%n: %v");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %n: %v");
  }
  logger->set_formatter(std::move(formatter));
  auto lvl = to_spdlog(level);
  if (const char* env = std::getenv("HEARTH_LOG_LEVEL"); env != nullptr && *env != '\0') {
    lvl = spdlog::level::from_str(env);
  }
  logger->set_level(lvl);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace hearth
