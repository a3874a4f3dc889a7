#include "common/lora.h"

namespace hearth {

std::string_view lora_target_name(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return "attn_q";
    case LoraTarget::kK: return "attn_k";
    case LoraTarget::kV: return "attn_v";
    case LoraTarget::kOutput: return "attn_output";
    case LoraTarget::kGate: return "ffn_gate";
    case LoraTarget::kUp: return "ffn_up";
    case LoraTarget::kDown: return "ffn_down";
  }
  return "?";
}

}  // namespace hearth
