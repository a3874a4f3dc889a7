// A TokenizerSource as bytes and back: how the loader stores the tokenizer in the
// weights segment so that engines and frontends need no tokenizer files.
//
// The encoding is little-endian and length-prefixed ("HTOK", version, fields). Decoding
// trusts nothing: every length is checked against the bytes present and a bad blob is a
// kFormat Status. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

std::string tokenizer_source_encode(const TokenizerSource& source);
Result<TokenizerSource> tokenizer_source_decode(std::string_view bytes);

}  // namespace hearth
