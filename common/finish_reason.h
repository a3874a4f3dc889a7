// Why a sequence ended: one vocabulary for the engine, the broker's slots, the frontend
// and `hearth generate`. The values are stored in shared memory (a slot's `finish`), so
// they never change meaning.
#pragma once

#include <cstdint>
#include <string_view>

namespace hearth {

enum class FinishReason : uint32_t {
  kNone = 0,       // still running
  kStop = 1,       // produced a stop id (or the frontend matched a stop string)
  kLength = 2,     // max_tokens or the context
  kCancelled = 3,  // its client left, or a cancel was asked for
  kError = 4,      // failed; the slot says why
};

// "none", "stop", "length", "cancelled", "error".
constexpr std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

}  // namespace hearth
