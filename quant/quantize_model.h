// Quantizing a whole model: calibration samples from text, GPTQ (or RTN) of every linear
// layer, and the result written as a GGUF file the loader reads.
//
// GPTQ runs layer by layer, as the reference implementations do: the calibration
// sequences' hidden states enter layer 0; each layer runs once in float32 (the engine's
// own forward pass, Model::run_layer) while the inputs of its seven matrices are
// accumulated into four Hessians (q/k/v share one, gate/up another); the matrices are
// quantized; the layer runs again with its quantized weights to give the next layer's
// inputs. Memory is bounded by the model as stored, one layer in float32, the hidden
// states of the calibration set and one layer's Hessians, never the whole model's
// activations or a float32 copy of it.
// Token embeddings and the LM head are not quantized (they are written as stored).
// Not thread-safe; uses `threads` cores.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/token.h"
#include "loader/model.h"
#include "loader/prequantized.h"
#include "quant/gptq.h"
#include "tokenizer/tokenizer.h"

namespace hearth::quant {

enum class Method : uint8_t { kRtn, kGptq };
// "rtn", "gptq".
std::string_view method_name(Method method);

// What the quantized model is written as: a GGUF file (Q4_0 / Q8_0 blocks; symmetric,
// groups in column order, a GGUF vocabulary) or a Hugging Face GPTQ directory (qweight,
// qzeros, scales, g_idx in AutoGPTQ's packing; from a Hugging Face model directory,
// whose tokenizer files it copies).
enum class OutputFormat : uint8_t { kGguf, kHfGptq };

struct ModelQuantOptions {
  Method method = Method::kGptq;
  OutputFormat output = OutputFormat::kGguf;
  QuantScheme scheme;
  double damp = 0.01;
  // Matrices that cannot be quantized as asked (inputs not whole groups; for HF GPTQ,
  // outputs not whole packed words) stay unquantized, as stored, instead of failing the
  // run.
  bool skip_indivisible = false;
  int threads = 0;  // 0: every core
};

struct QuantizedModel {
  std::vector<std::pair<std::string, QuantizedMatrix>> matrices;  // canonical names
  std::vector<std::string> kept;                                 // matrices left unquantized
  // Experts' matrices no calibration token was routed to: rounded to nearest (GPTQ
  // has no input statistics for them).
  std::vector<std::string> unobserved;
  uint64_t hessian_bytes = 0;   // the largest layer's Hessians
  uint64_t hidden_bytes = 0;    // the calibration set's hidden states
  double seconds = 0.0;
};

// Called after each layer: its index, the number of layers, its seconds.
using LayerProgress = std::function<void(int32_t layer, int32_t n_layers, double seconds)>;

// Calibration sequences of exactly seq_len tokens. Plain text is tokenized whole (with
// the tokenizer's BOS) and cut into consecutive windows, each starting with BOS; JSON
// lines ({"text": ...} per line) give one window per line long enough, truncated.
// kInvalidArgument when the text has fewer than `samples` windows (the message says how
// many it has) or is not valid UTF-8 / JSON lines.
Result<std::vector<std::vector<TokenId>>> calibration_samples(const Tokenizer& tokenizer, std::string_view text,
                                                              bool json_lines, int32_t samples, int32_t seq_len);

// Checks the options against the model before any work: the scheme, group sizes that do
// not divide a matrix (unless skip_indivisible), what the output can hold (GGUF blocks:
// symmetric, groups in column order, a GGUF vocabulary; HF GPTQ: a Hugging Face model,
// output sizes in whole packed words).
Status quantize_check(const LoadedModel& model, const ModelQuantOptions& options);

// Quantizes every linear layer of `model`. GPTQ needs `calibration` (RTN ignores it).
Result<QuantizedModel> quantize_model(const LoadedModel& model, std::span<const std::vector<TokenId>> calibration,
                                      const ModelQuantOptions& options, const LayerProgress& progress = {});

// The GGUF blocks (Q4_0 for 4 bits, Q8_0 for 8) holding exactly the matrix's values, for
// symmetric schemes (kUnsupported otherwise). Act-order with scattered groups: columns
// sorted by group, the order in `perm` (loader/prequantized.h: stored column j is
// column perm[j]).
Result<RepackedMatrix> to_gguf_blocks(const QuantizedMatrix& m);

// Writes `model` with its matrices replaced by `quantized` (others as stored) to `path`,
// through a temporary file renamed at the end, so a failed run leaves nothing behind.
Status write_quantized_gguf(const LoadedModel& model, const QuantizedModel& quantized,
                            const std::filesystem::path& path);

// Writes a Hugging Face GPTQ directory at `out` (which must not exist or be empty): the
// source directory's config.json with a quantization_config, its tokenizer and generation
// files, and model.safetensors with every quantized matrix as qweight / qzeros / scales /
// g_idx (symmetric schemes in AutoGPTQ's v1 packing, which stores zero - 1; asymmetric
// ones as gptq_v2, zeros as they are, since v1 cannot store a zero of 0) and the other
// tensors as they are. Written beside `out` and renamed into place: a failure leaves
// nothing.
Status write_quantized_hf(const LoadedModel& model, const QuantizedModel& quantized, const ModelQuantOptions& options,
                          const std::filesystem::path& source_dir, const std::filesystem::path& out);

}  // namespace hearth::quant
