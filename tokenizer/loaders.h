// One loader per tokenizer format, each turning a TokenizerSource into a complete
// Tokenizer (tokenizer_load() picks one). Internal to tokenizer/; pure functions,
// thread-safe.
#pragma once

#include <memory>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

// SentencePiece .model bytes, through the SentencePiece library.
Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const TokenizerSource& source);
// Hugging Face tokenizer.json (+ tokenizer_config.json).
Result<std::unique_ptr<Tokenizer>> load_hf_json(const TokenizerSource& source);
// GPT-2's encoder.json + vocab.bpe.
Result<std::unique_ptr<Tokenizer>> load_gpt2_files(const TokenizerSource& source);
// A GGUF file's tokenizer.ggml.* metadata.
Result<std::unique_ptr<Tokenizer>> load_gguf_vocab(const TokenizerSource& source);
// The same, taking the vocabulary out of `source` instead of copying it.
Result<std::unique_ptr<Tokenizer>> load_gguf_vocab(TokenizerSource&& source);
// llama2.c tokenizer.bin.
Result<std::unique_ptr<Tokenizer>> load_llama2c(const TokenizerSource& source);

}  // namespace hearth
