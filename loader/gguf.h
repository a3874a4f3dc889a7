// GGUF (v2, v3) parsing: metadata key/values and tensor descriptors of a file that is
// already mapped into memory. Nothing is copied but the metadata; tensor data stays in
// the mapping.
//
// The parser trusts nothing: every count, length, dimension and offset is checked
// against the bytes that are really there before anything is allocated, so a truncated
// or hostile file yields a Status, never a crash or a huge allocation. Tensor types
// other than F32, F16, BF16, Q8_0 and Q4_0 are refused by name. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace hearth {

// One metadata value. Integers keep their signedness. Arrays keep their elements in
// the vector matching the element type: strings, ints (all integer types and bool),
// floats, or nested arrays.
struct GgufValue {
  enum class Type : uint8_t { kUint, kInt, kFloat, kBool, kString, kArray };
  Type type = Type::kUint;
  uint32_t gguf_type = 0;  // the type code in the file
  uint32_t elem_type = 0;  // arrays: the element type code
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::string s;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<GgufValue> nested;
};

struct GgufFile {
  uint32_t version = 0;
  uint32_t alignment = 32;
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<TensorView> tensors;  // shapes outermost first; data points into the mapping
  uint64_t data_offset = 0;         // start of the tensor data section in the file

  const GgufValue* find(std::string_view key) const;
  // Typed getters: nullopt when absent; an error when present with an unusable type.
  Result<std::optional<uint64_t>> get_uint(std::string_view key) const;
  Result<std::optional<double>> get_float(std::string_view key) const;
  Result<std::optional<bool>> get_bool(std::string_view key) const;
  Result<std::optional<std::string>> get_string(std::string_view key) const;
};

// Parses a GGUF file held in `bytes` (which must outlive the result's tensor views).
Result<GgufFile> gguf_parse(std::span<const std::byte> bytes);

// The ggml name of a tensor type code ("Q4_K"), or "type 97" for unknown codes.
std::string ggml_type_name(uint32_t code);

}  // namespace hearth
