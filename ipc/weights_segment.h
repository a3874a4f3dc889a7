// Reading the weights segment: attach, validate everything, and expose typed views.
//
// weights_attach maps a segment read-only (never a copy) and checks, before anything is
// trusted: magic, layout version, header and file size, state READY (a LOADING segment
// whose creator died is reported as such), the fingerprint when one is expected, every
// manifest entry (known dtype, bytes matching the shape, inside the file, aligned) and
// the config. The result holds the mapping; views stay valid while it lives.
// Thread-compatible; the mapped data may be read from any thread.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "ipc/segment.h"
#include "ipc/weights_layout.h"

namespace hearth {

struct AttachedWeights {
  ShmSegment segment;
  const WeightsHeader* header = nullptr;
  ModelConfig config;
  std::string model_name;
  std::string model_format;
  std::string layout;  // how the tensors are laid out: kLayoutPlain, kLayoutCpuR16
  std::string_view tokenizer_blob;  // decode with tokenizer_source_decode
  std::string_view chat_template;
  std::string_view token_bytes;  // the token byte table (weights_layout.h); weights_token_table reads it

  // The tensors of `rank` under canonical names, viewing the segment.
  std::vector<TensorView> tensors(int rank) const;
  std::vector<WeightsEntry> entries() const;
};

struct AttachOptions {
  std::optional<Fingerprint> expected_fingerprint;
};

Result<AttachedWeights> weights_attach(const std::filesystem::path& path, const AttachOptions& options = {});

// The token byte table as one string per token id of the model: padded with empty
// strings or cut to `vocab_size` (a model's rows and a tokenizer's ids may differ in
// number). kFormat when the table is malformed.
Result<std::vector<std::string>> weights_token_table(const AttachedWeights& weights, int32_t vocab_size);
// The table's bytes for `tokens` (what the loader writes).
std::string weights_token_table_encode(const std::vector<std::string>& tokens);

// kInvalidArgument unless `draft`'s tokens are `target`'s, id for id and byte for byte:
// speculative decoding's draft model must share the target's tokenizer. Tables as
// weights_token_table gives them, or a tokenizer's token_bytes in id order.
Status draft_tokens_check(std::span<const std::string> target, std::span<const std::string> draft);
// draft_tokens_check on two segments' token tables, each as long as its model's vocabulary.
Status weights_draft_check(const AttachedWeights& target, const AttachedWeights& draft);

// Checks a header read from a segment of `file_bytes` bytes: magic, version, sizes. Does
// not look at the state. Used by attach and by the loader before adopting a segment.
Status weights_header_check(const WeightsHeader& header, uint64_t file_bytes, const std::filesystem::path& path);

}  // namespace hearth
