// A LoRA adapter as the engine applies it: for each matrix of the base it adapts (a
// canonical weight name: "blk.3.attn_q.weight"), the low-rank factors A ([rank, cols]) and
// B ([rows, rank]) of the whole matrix in float32, and the scale of their product, so
// that the adapted matrix is W + scale * B A. The loader reads one from a PEFT directory
// (loader/lora.h) with its rows already in the base's order; each tensor-parallel rank
// takes its share (Model::set_adapter). Plain data, copyable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

// Adapter slots an instance's adapter segment holds at most (hearth-loader --max-loras).
inline constexpr int32_t kMaxLoraSlots = 64;

// The matrices an adapter may adapt, in the order a layer runs them.
enum class LoraTarget : uint8_t { kQ = 0, kK, kV, kOutput, kGate, kUp, kDown };
inline constexpr int kLoraTargets = 7;
// "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down".
std::string_view lora_target_name(LoraTarget t);

struct LoraMatrix {
  int32_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  int32_t rank = 0;
  int64_t rows = 0;  // the base matrix's outputs
  int64_t cols = 0;  // and inputs
  float scale = 0.0f;
  std::vector<float> a;  // [rank, cols]
  std::vector<float> b;  // [rows, rank]
};

struct LoraAdapter {
  std::string name;
  int32_t max_rank = 0;  // the largest rank of its matrices
  std::vector<LoraMatrix> matrices;
};

}  // namespace hearth
