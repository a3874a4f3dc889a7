// POST /v1/embeddings (OpenAI's embeddings API): the request's inputs, and the answer built
// from the pooled vectors the engine returns.
//
// Every input is one sequence the engine runs through the same resident weights, batched
// with the generation requests, and pools (common/pooling.h) instead of sampling; the
// frontend then cuts the vector to `dimensions` (the leading values, as Matryoshka-trained
// models and OpenAI's text-embedding-3 do) and L2-normalises it. As everywhere, every
// field is implemented or refused by name. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "frontend/openai.h"

namespace hearth {

// The most inputs one request may carry (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingsRequest {
  std::string model;  // as given ("" when absent)
  // `input` as text (a string, or a list of strings), to be tokenized, or as token ids (a
  // list of ids, or a list of such lists): one of the two, one entry per input.
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> token_inputs;
  bool base64 = false;                 // encoding_format: base64 (little-endian float32), else float
  std::optional<int32_t> dimensions;   // the leading values to keep; nullopt: all
  std::optional<std::string> user;
  std::vector<std::string> ignored_fields;  // with ApiParseOptions::lenient_fields
};

Result<EmbeddingsRequest> embeddings_parse_request(std::string_view body, const ApiParseOptions& options = {});

// A pooled vector as returned: its first `dimensions` values, L2-normalised (an all-zero
// vector stays zero).
std::vector<float> embedding_finish(std::span<const float> pooled, int32_t dimensions);

// The response body: {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
// "model", "usage": {"prompt_tokens", "total_tokens"}}; each embedding an array of numbers,
// or with `base64` its float32 bytes in base64.
std::string embeddings_response_body(const std::vector<std::vector<float>>& vectors, bool base64,
                                     std::string_view model, int32_t prompt_tokens);

}  // namespace hearth
