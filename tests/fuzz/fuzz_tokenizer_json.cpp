// Fuzz target: any bytes as a tokenizer.json. Loading must return a Status, never crash;
// a tokenizer that loads must encode and decode a fixed text the same way.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hearth::TokenizerSource source;
  source.kind = hearth::TokenizerSource::Kind::kHfJson;
  source.data.assign(reinterpret_cast<const char*>(data), size);
  auto tokenizer = hearth::tokenizer_load(source);
  if (!tokenizer.is_ok()) return 0;
  static constexpr std::string_view kText = "Hello, world! <s> 12345 caf\xc3\xa9 \xf0\x9f\xa6\x99\n\tend";
  auto ids = (*tokenizer)->encode(kText);
  if (ids.is_ok()) {
    const std::string text = (*tokenizer)->decode(*ids);
    hearth::IncrementalDetokenizer detok(**tokenizer, true);
    std::string streamed;
    for (const auto id : *ids) streamed += detok.push(id);
    streamed += detok.finish();
    if (streamed != text) __builtin_trap();
  }
  return 0;
}
