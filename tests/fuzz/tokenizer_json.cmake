# tokenizer.json parser. Seeds: the two smaller real files (Phi-3's SentencePiece-style
# BPE, SmolLM's byte-level BPE); the 9-11 MB Llama 3 / Qwen3 files would make the
# 400-mutation replay several times slower without covering other code.
hearth_add_fuzz(fuzz_tokenizer_json
  SOURCE fuzz_tokenizer_json.cpp
  LIBS hearth_tokenizer
  SEEDS ${HEARTH_SHARED_DIR}/tokenizers/llama2-spm/phi-3.tokenizer.json
        ${HEARTH_SHARED_DIR}/tokenizers/smollm/SmolLM-135M-ft.tokenizer.json)
