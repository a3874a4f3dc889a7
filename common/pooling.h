// Pooling: how an embedding request turns its prompt's final hidden states (after the
// model's output norm) into one vector. The values are stored in shared memory (a broker
// slot's flags) and in GGUF files' {arch}.pooling_type, so they never change meaning.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace hearth {

enum class Pooling : uint8_t {
  kNone = 0,   // not an embedding: the request generates
  kLast = 1,   // the last token's state (decoder embedders: e5-mistral, gte-Qwen, Qwen3-Embedding)
  kMean = 2,   // the mean over every prompt token's state (sentence-transformers' default)
  kFirst = 3,  // the first token's state (BERT's [CLS])
};

// "none", "last", "mean", "cls".
constexpr std::string_view pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kNone: return "none";
    case Pooling::kLast: return "last";
    case Pooling::kMean: return "mean";
    case Pooling::kFirst: return "cls";
  }
  return "unknown";
}

// The pooling named `name` ("last", "mean", "cls"); none for anything else.
constexpr std::optional<Pooling> pooling_from_name(std::string_view name) {
  if (name == "last") return Pooling::kLast;
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kFirst;
  return std::nullopt;
}

}  // namespace hearth
