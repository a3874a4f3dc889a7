// GPT-2's byte-level alphabet: every byte is shown as one printable Unicode character
// ("Ġ" for a space) so that byte-level BPE vocabularies are plain strings. Internal to
// tokenizer/; the tables are built once, then read-only (thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hearth {

// `bytes` with each byte replaced by its character (UTF-8).
std::string byte_level_encode(std::string_view bytes);

// Maps each character of `piece` back to its byte into `out` (appending). Returns false,
// leaving `out` as it was, when some character is not in the alphabet.
bool byte_level_decode(std::string_view piece, std::string& out);

}  // namespace hearth
