// Reading the pipeline parts of a Hugging Face tokenizer.json (normalizer,
// pre_tokenizer, decoder) into hearth's Normalizer, PreTokenizer and Decoder. A type
// hearth does not implement is refused with kUnsupported naming it. Pure functions;
// thread-safe.
#pragma once

#include <boost/json.hpp>

#include "common/status.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace hearth {

// Each takes the JSON value of the field (null: nothing to add).
Status hf_parse_normalizer(const boost::json::value& json, Normalizer& out);
Status hf_parse_pre_tokenizer(const boost::json::value& json, PreTokenizer& out);
Status hf_parse_decoder(const boost::json::value& json, Decoder& out);

// The "type" of a component object, or an error naming `what`.
Result<std::string> hf_component_type(const boost::json::value& json, std::string_view what);

}  // namespace hearth
