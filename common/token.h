// Token ids: one type shared by tokenizer, engine and IPC.
#pragma once

#include <cstdint>

namespace hearth {

using TokenId = int32_t;

}  // namespace hearth
