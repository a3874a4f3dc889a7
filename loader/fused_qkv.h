// Fused query/key/value projections (GPT-NeoX's query_key_value) split into the
// canonical attn_q, attn_k and attn_v tensors the engine binds.
//
// Two layouts exist: GGUF stores [all query rows; all key rows; all value rows] (llama.cpp's
// converter reorders them), so each part is a view of consecutive rows; a Hugging Face
// checkpoint stores them head by head ([n_heads][q, k, v][head_dim] rows), so each part is
// copied out into memory the LoadedModel owns. Biases are split the same way.
#pragma once

#include "common/status.h"
#include "loader/model.h"

namespace hearth {

enum class QkvLayout : uint8_t {
  kBlocks = 0,   // GGUF: [q rows of every head; k rows; v rows]
  kPerHead = 1,  // HF GPT-NeoX: for each head, its q, k and v rows
};

// Replaces every blk.N.attn_qkv.{weight,bias} of `model` by blk.N.attn_{q,k,v}.{weight,bias}
// per its config's heads (query and KV heads of one head_dim). kFormat when a fused tensor
// has the wrong shape.
Status split_fused_qkv(LoadedModel& model, QkvLayout layout);

}  // namespace hearth
