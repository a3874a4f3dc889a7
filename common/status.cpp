#include "common/status.h"

namespace hearth {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kInvalidArgument: return "ERR_INVALID_ARGUMENT";
    case ErrorCode::kNotFound: return "ERR_NOT_FOUND";
    case ErrorCode::kIo: return "ERR_IO";
    case ErrorCode::kFormat: return "ERR_FORMAT";
    case ErrorCode::kUnsupported: return "ERR_UNSUPPORTED";
    case ErrorCode::kOutOfRange: return "ERR_OUT_OF_RANGE";
    case ErrorCode::kResourceExhausted: return "ERR_RESOURCE_EXHAUSTED";
    case ErrorCode::kInternal: return "ERR_INTERNAL";
    case ErrorCode::kShmTooSmall: return "ERR_SHM_TOO_SMALL";
    case ErrorCode::kUnavailable: return "ERR_UNAVAILABLE";
  }
  return "ERR_UNKNOWN";
}

ErrorCode error_code_from_name(std::string_view name) {
  for (uint8_t c = 0; c <= static_cast<uint8_t>(ErrorCode::kUnavailable); ++c) {
    if (error_code_name(static_cast<ErrorCode>(c)) == name) return static_cast<ErrorCode>(c);
  }
  return ErrorCode::kInternal;
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  return fmt::format("{}: {}", error_code_name(code_), message_);
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

}  // namespace hearth
