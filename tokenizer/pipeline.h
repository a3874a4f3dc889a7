// PipelineTokenizer: the encoder shared by every format hearth tokenizes itself
// (tokenizer.json, GPT-2 files, GGUF, llama2.c): added tokens are split out, the rest is
// normalized, pre-tokenized into words and each word encoded by a BPE model. Immutable
// once built; encode() may run on many threads at once.
#pragma once

#include <memory>
#include <variant>

#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm_bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace hearth {

struct Pipeline {
  SpecialTokenMatcher raw_specials;         // matched in the input as given
  SpecialTokenMatcher normalized_specials;  // matched in the normalized text
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;  // empty: each segment is one word
  std::variant<BpeModel, SpmModel> model;
};

// Wraps a finished vocabulary (vocab_finalize done) and its pipeline.
std::unique_ptr<Tokenizer> make_pipeline_tokenizer(std::shared_ptr<const TokenizerVocab> vocab, Pipeline pipeline);

}  // namespace hearth
