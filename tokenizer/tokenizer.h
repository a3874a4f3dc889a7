// Tokenizer: text <-> token ids for every vocabulary format hearth reads.
//
// Formats: SentencePiece .model (through the SentencePiece library); Hugging Face
// tokenizer.json BPE, byte-level (GPT-2, Llama 3, Qwen, SmolLM) and SentencePiece-style
// (byte fallback, U+2581); GPT-2's encoder.json + vocab.bpe pair; GGUF vocabularies
// ("llama" and "gpt2" models); llama2.c tokenizer.bin. All of them are described by a
// TokenizerSource (plain bytes, so the loader can also store it in the weights segment)
// and loaded by tokenizer_load().
//
// A loaded Tokenizer is immutable: every method is const and safe to call from many
// threads at once. Nothing here aborts on input: invalid UTF-8, unknown ids or malformed
// tokenizer files are reported as Status.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth {

namespace detail {
struct TokenizerVocab;  // tokenizer/vocab.h: what every Tokenizer method reads
}  // namespace detail

using TokenId = int32_t;

// GGUF's numbering of token types (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // BOS, EOS, <|eot_id|>, ...: special, never part of plain text
  kUserDefined = 4,  // added tokens matched verbatim in the input
  kUnused = 5,
  kByte = 6,  // <0xAB> byte-fallback pieces
};

// A GGUF file's tokenizer.ggml.* metadata, already parsed by the loader.
struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (BPE)
  std::string pre;                   // tokenizer.ggml.pre: pre-tokenizer name for "gpt2" models
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores (may be empty)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (may be empty)
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "a b" (gpt2 only)
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id, eot_id, eom_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  // tokenizer.ggml.remove_extra_whitespaces ("llama" only): SentencePiece's whitespace
  // normalization. Unset: inferred from the vocabulary (see tokenizer/README.md).
  std::optional<bool> remove_extra_whitespaces;
  std::string chat_template;  // tokenizer.chat_template
};

struct TokenizerSource {
  enum class Kind : uint8_t {
    kSentencePiece = 0,  // data: the .model protobuf bytes
    kHfJson = 1,         // data: tokenizer.json text; config_json: tokenizer_config.json (optional)
    kGpt2Files = 2,      // data: encoder.json / vocab.json text; merges: vocab.bpe / merges.txt text
    kGguf = 3,           // gguf: the vocabulary
    kLlama2c = 4,        // data: tokenizer.bin bytes
  };
  Kind kind = Kind::kSentencePiece;
  std::string data;
  std::string merges;
  std::string config_json;
  GgufVocab gguf;
  // From the model's own config (config.json / generation_config.json): they override
  // the tokenizer's BOS and add to its stop tokens.
  std::optional<TokenId> bos_id;
  std::vector<TokenId> eos_ids;
  // llama2.c tokenizer.bin does not store its size; the model's vocab_size bounds it.
  std::optional<int32_t> vocab_size;
};

struct EncodeOptions {
  bool add_special = true;    // add BOS / EOS as the tokenizer's rules say
  bool parse_special = true;  // special-token text in the input ("<|eot_id|>") becomes that one token
};

struct DecodeOptions {
  bool skip_special = true;  // leave control tokens (BOS, EOS, ...) out of the text
  bool at_start = true;      // ids begin the text: SentencePiece-style tokenizers drop the
                             // one leading space their encoder added
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes UTF-8 text. Invalid UTF-8 is refused (kInvalidArgument, naming the byte offset).
  virtual Result<std::vector<TokenId>> encode(std::string_view text, const EncodeOptions& options = {}) const = 0;

  // Decodes ids to UTF-8 text; invalid byte sequences become U+FFFD; ids outside the
  // vocabulary are skipped.
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  int32_t vocab_size() const;
  // The vocabulary string of `id` ("▁the", "Ġthe", "<0x0A>", "<s>"); empty when out of range.
  std::string_view piece(TokenId id) const;
  std::optional<TokenId> find_piece(std::string_view piece) const;
  TokenType type(TokenId id) const;
  // Bytes the token adds to decoded text (possibly part of a UTF-8 character); empty for
  // control tokens and out-of-range ids.
  std::string_view token_bytes(TokenId id) const;
  // True when decoding at the start of a text drops one leading space (SentencePiece's
  // dummy prefix).
  bool strips_leading_space() const;

  TokenId bos_id() const;  // -1 when the vocabulary has none
  TokenId eos_id() const;  // -1 when none
  // Every id that ends generation: EOS, and EOT / EOM / extra ids from the model config.
  const std::vector<TokenId>& stop_ids() const;
  bool add_bos() const;
  bool add_eos() const;
  // The chat template (Jinja) shipped with the tokenizer; empty when there is none.
  const std::string& chat_template() const;

 protected:
  // Every implementation passes its complete, validated vocabulary.
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerVocab> vocab);
  std::shared_ptr<const detail::TokenizerVocab> vocab_;
};

// Loads any tokenizer format.
Result<std::unique_ptr<Tokenizer>> tokenizer_load(const TokenizerSource& source);
// The same, free to take what it needs out of `source` rather than copy it (a resident
// attach's decoded blob, which nothing reads again).
Result<std::unique_ptr<Tokenizer>> tokenizer_load(TokenizerSource&& source);

// Builds a TokenizerSource from files: a SentencePiece .model, a tokenizer.json (with a
// tokenizer_config.json beside it when present; "<name>.tokenizer_config.json" for a
// "<name>.tokenizer.json"), a llama2.c tokenizer.bin, a GPT-2 encoder.json/vocab.json
// (with vocab.bpe/merges.txt beside it), or a directory holding one of these.
Result<TokenizerSource> tokenizer_source_from_path(const std::filesystem::path& path);

// Turns a stream of ids into text without ever emitting half a UTF-8 character: bytes
// of an unfinished character are held until the token that completes it arrives.
// One per sequence; not thread-safe.
class IncrementalDetokenizer {
 public:
  // at_start: the first pushed id begins the text (see DecodeOptions::at_start).
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool at_start, bool skip_special = true);

  // Text that became complete with `id` (often empty or one word).
  std::string push(TokenId id);
  // Whatever is still held, with invalid or unfinished bytes as U+FFFD.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool at_start_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace hearth
