// HEARTH_CHECK: invariants that abort loudly.
//
// For conditions no input can cause (a broken invariant is a bug): the process prints
// the condition, the place and the streamed message, then aborts, and its supervisor
// restarts it. Anything a user or a file can influence is validated and returned as a
// Status instead (status.h).
#pragma once

#include <sstream>

namespace hearth::detail {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `HEARTH_CHECK(x) << ...` compile to a void expression in both branches.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace hearth::detail

#define HEARTH_CHECK(condition)                \
  (condition) ? (void)0                        \
              : ::hearth::detail::Voidify() &  \
                    ::hearth::detail::CheckFailure(__FILE__, __LINE__, #condition).stream()
