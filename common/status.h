// Status and Result<T>: errors at process and API boundaries as values.
//
// A Status carries a code and a message a person can act on. Parsing a model file,
// reading a segment written by another process or handling a request returns one;
// only broken internal invariants abort (see check.h). Both types are plain values:
// thread-compatible, cheap to move.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace hearth {

enum class ErrorCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong (flag, request field, text)
  kNotFound,         // a file, tensor, token or segment that should exist does not
  kIo,               // the operating system refused a read, map or write
  kFormat,           // a file or segment is malformed, truncated or inconsistent
  kUnsupported,      // well-formed, but a feature hearth does not implement
  kOutOfRange,       // a value outside the accepted range (context length, ids)
  kResourceExhausted,  // memory, disk or slots ran out
  kInternal,         // a bug: should not happen
  kShmTooSmall,      // the shared-memory directory has too little free space
  kUnavailable,      // a segment or process that should be there is not ready (yet)
};

// "ERR_FORMAT" and so on: the stable name printed before every message.
std::string_view error_code_name(ErrorCode code);
// Its inverse, for codes another process printed; kInternal for a name it does not know.
ErrorCode error_code_from_name(std::string_view name);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "ERR_FORMAT: <message>", or "OK".
  std::string to_string() const;

  // Returns this status with "context: " put in front of the message.
  Status with_context(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <typename... Args>
Status make_error(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Status(code, fmt::format(format, std::forward<Args>(args)...));
}

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hearth

#define HEARTH_CONCAT_INNER(a, b) a##b
#define HEARTH_CONCAT(a, b) HEARTH_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define HEARTH_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::hearth::Status hearth_status_ = (expr);         \
    if (!hearth_status_.is_ok()) return hearth_status_; \
  } while (0)

// `HEARTH_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the error.
#define HEARTH_ASSIGN_OR_RETURN(lhs, expr) \
  HEARTH_ASSIGN_OR_RETURN_IMPL(HEARTH_CONCAT(hearth_result_, __LINE__), lhs, expr)
#define HEARTH_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
