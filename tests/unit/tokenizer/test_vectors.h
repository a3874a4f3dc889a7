// Test-vector readers shared by the tokenizer tests: SentencePiece jsonl vectors,
// llama.cpp's .inp/.out pairs and GPT-3-Encoder's JSON cases, plus a checker that
// counts and prints how many cases of a file a tokenizer reproduces.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth::testing {

struct VectorCase {
  std::string text;
  std::vector<TokenId> ids;            // encoded without special tokens
  std::optional<std::string> decoded;  // decode(ids), when the file gives it
};

// {"text", "ids", "decoded"} per line.
std::vector<VectorCase> read_jsonl_vectors(const std::filesystem::path& path);
// llama.cpp's test strings (.inp, separated by "__ggml_vocab_test__" lines) and ids (.out).
std::vector<VectorCase> read_inp_out_vectors(const std::filesystem::path& inp, const std::filesystem::path& out);
// {"cases": [{"text", "ids"}]}.
std::vector<VectorCase> read_gpt3_vectors(const std::filesystem::path& path);
// Just the texts of an .inp file.
std::vector<std::string> read_inp_texts(const std::filesystem::path& inp);

struct VectorCounts {
  size_t total = 0;
  size_t encode_pass = 0;
  size_t decode_checked = 0;
  size_t decode_pass = 0;
};

// Encodes every case with add_special = parse_special = false and compares ids, and
// decode(ids) with `decoded` where given; prints "label: encode a/b, decode c/d" and
// the first mismatches.
VectorCounts check_vectors(const Tokenizer& tokenizer, const std::vector<VectorCase>& cases, const std::string& label);

// Loads a tokenizer from a path (tokenizer_source_from_path + tokenizer_load), failing
// the calling test on error.
std::unique_ptr<Tokenizer> load_from_path(const std::filesystem::path& path,
                                          std::optional<int32_t> vocab_size = std::nullopt);

}  // namespace hearth::testing
