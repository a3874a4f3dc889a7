// ModelInput: everything one forward step needs, as plain data.
//
// The driver builds it once per step from its bookkeeping (scheduler, sequences); the
// backend uploads it in one call (Backend::upload) and every op reads the uploaded
// copy, never an engine container; rank 0 sends it as bytes (serialize / deserialize)
// to the other tensor-parallel ranks. Sequences are laid out as FlashInfer and vLLM
// lay them out: query rows [query_start[s], query_start[s + 1]) of the flat token
// arrays, and KV blocks pages[page_start[s] .. page_start[s + 1]) in position order.
// Every token carries its KV slot (block * block_size + offset of its position).
// Not thread-safe; clear() keeps capacity, so a reused input does not allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/token.h"

namespace hearth {

struct ModelInput {
  int32_t block_size = 16;
  std::vector<TokenId> tokens;       // [n_tokens]
  std::vector<int32_t> positions;    // [n_tokens] absolute position of each token
  std::vector<int32_t> slots;        // [n_tokens] KV cache slot each token's K/V go to
  std::vector<int32_t> query_start;  // [n_seqs + 1] first row of each sequence; back() = n_tokens
  std::vector<int32_t> page_start;   // [n_seqs + 1] first entry of each sequence in pages
  std::vector<int32_t> pages;        // every sequence's KV blocks, in position order
  std::vector<int32_t> logit_rows;   // rows whose logits are wanted, in output order
  // Rows whose final hidden states (after the output norm, before the LM head) are
  // wanted, in output order: embedding requests' pooling.
  std::vector<int32_t> hidden_rows;
  // [n_tokens] the LoRA adapter slot each row runs with (the model's slot: Model::set_adapter),
  // -1 for the base model alone; empty: every row -1.
  std::vector<int32_t> adapters;

  // Empties the input for block size `block_size`, keeping capacity.
  void clear(int32_t block_size);
  // Appends a sequence's `tokens` at positions first_position.. over its KV `blocks`
  // (which must cover them) and its last `n_logits` rows as logit rows (one to sample its
  // next token; one more per drafted token to verify), its rows run with LoRA adapter slot
  // `adapter` (-1: none). kInvalidArgument when the blocks do not cover the positions or
  // it has fewer rows than n_logits.
  Status add_sequence(std::span<const TokenId> tokens, int32_t first_position, std::span<const int32_t> blocks,
                      int32_t n_logits, int32_t adapter = -1);
  // Whether some row runs with an adapter.
  bool has_adapters() const;

  // Asks for the final hidden states of rows first..first+count-1.
  void want_hidden(int32_t first, int32_t count);
  // Asks for the logits of every row (scoring a prompt), in row order.
  void want_every_row();

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_seqs() const { return query_start.empty() ? 0 : static_cast<int32_t>(query_start.size()) - 1; }
  // The most keys a row attends: its position + 1 (0 for an empty input).
  int32_t max_keys() const;

  // The bytes another rank rebuilds this input from (little-endian, versioned).
  void serialize(std::vector<std::byte>& out) const;
  // Rebuilds an input from serialize's bytes into `out` (reusing its capacity). The
  // bytes are checked for framing only (kFormat); validate judges the content.
  static Status deserialize(std::span<const std::byte> bytes, ModelInput& out);
};

// The most bytes serialize writes for a step of up to `max_tokens` tokens in
// `max_seqs` sequences of up to `max_pages_per_seq` KV blocks each.
size_t model_input_max_bytes(int32_t max_tokens, int32_t max_seqs, int32_t max_pages_per_seq);

// What a model can run: the bounds validate checks an input against.
struct ModelInputLimits {
  int32_t vocab_size = 0;
  int32_t max_tokens = 0;   // per step
  int32_t max_context = 0;  // positions
  int32_t n_blocks = 0;     // KV blocks in the cache
  int32_t block_size = 0;
  int32_t n_adapters = 0;  // adapter slots: a row's is -1 or 0..n_adapters-1
};

// Checks every array against the others and the limits: sizes, sequences covering the
// rows in order, ids in the vocabulary, positions in the context and covered by the
// sequence's pages, each slot where its position lives, logit and hidden rows in the
// batch, adapter slots in range and one per sequence.
Status model_input_validate(const ModelInput& input, const ModelInputLimits& limits);

}  // namespace hearth
