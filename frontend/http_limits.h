// Limits the frontend's HTTP parser applies to every request (the body limit is the
// --max-body flag). Shared with the fuzz target of that parser.
#pragma once

#include <cstddef>

namespace hearth {

inline constexpr size_t kMaxHeaderBytes = 64 * 1024;  // request line and header fields

}  // namespace hearth
