#include "common/log.h"

#include <cstdlib>
#include <memory>
#include <string>

#include <fmt/format.h>
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

// Appends `text` as the inside of a JSON string: quotes, backslashes and control bytes
// escaped (other bytes as they are: messages are UTF-8 or already sanitized).
void append_json_escaped(std::string_view text, spdlog::memory_buf_t& dest) {
  for (const char c : text) {
    switch (c) {
      case '"': dest.append(std::string_view("\\\"")); break;
      case '\\': dest.append(std::string_view("\\\\")); break;
      case '\n': dest.append(std::string_view("\\n")); break;
      case '\r': dest.append(std::string_view("\\r")); break;
      case '\t': dest.append(std::string_view("\\t")); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          fmt::format_to(std::back_inserter(dest), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          dest.push_back(c);
        }
    }
  }
}

// "%j": the message, escaped for a JSON string; "%J": the logger's name, likewise.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  explicit JsonMessageFlag(bool name) : name_(name) {}
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    append_json_escaped(name_ ? std::string_view(msg.logger_name.data(), msg.logger_name.size())
                              : std::string_view(msg.payload.data(), msg.payload.size()),
                        dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(name_); }

 private:
  bool name_;
};

void install_formatter(spdlog::logger& logger, LogFormat format) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (format == LogFormat::kJson) {
    formatter->add_flag<JsonMessageFlag>('j', false);
    formatter->add_flag<JsonMessageFlag>('J', true);
    formatter->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","process":"%J","message":"%j"})");
  } else if (std::getenv("JOURNAL_STREAM") != nullptr) {
    formatter->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%n: %v");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %n: %v");
  }
  logger.set_formatter(std::move(formatter));
}

}  // namespace

Result<LogLevel> log_level_from_name(std::string_view name) {
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& [n, level] : kNames) {
    if (n == name) return level;
  }
  return make_error(ErrorCode::kInvalidArgument, "\"{}\" is not a log level (trace, debug, info, warn, error, off)",
                    name);
}

Result<LogFormat> log_format_from_name(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return make_error(ErrorCode::kInvalidArgument, "\"{}\" is not a log format (text, json)", name);
}

Status log_init(std::string_view process_name, LogLevel level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(std::string(process_name), sink);
  Status status;
  LogFormat format = LogFormat::kText;
  if (const char* env = std::getenv("HEARTH_LOG_LEVEL"); env != nullptr && *env != '\0') {
    if (auto l = log_level_from_name(env); l.is_ok()) {
      level = *l;
    } else {
      status = make_error(ErrorCode::kInvalidArgument, "HEARTH_LOG_LEVEL: {}", l.status().message());
    }
  }
  if (const char* env = std::getenv("HEARTH_LOG_FORMAT"); env != nullptr && *env != '\0') {
    if (auto f = log_format_from_name(env); f.is_ok()) {
      format = *f;
    } else if (status.is_ok()) {
      status = make_error(ErrorCode::kInvalidArgument, "HEARTH_LOG_FORMAT: {}", f.status().message());
    }
  }
  install_formatter(*logger, format);
  logger->set_level(to_spdlog(level));
  spdlog::set_default_logger(std::move(logger));
  return status;
}

Status log_configure(std::string_view level, std::string_view format) {
  auto logger = spdlog::default_logger();
  if (!level.empty()) {
    HEARTH_ASSIGN_OR_RETURN(LogLevel l, log_level_from_name(level));
    logger->set_level(to_spdlog(l));
  }
  if (!format.empty()) {
    HEARTH_ASSIGN_OR_RETURN(LogFormat f, log_format_from_name(format));
    install_formatter(*logger, f);
  }
  return Status::ok();
}

}  // namespace hearth
