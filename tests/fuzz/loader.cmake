hearth_add_fuzz(fuzz_gguf SOURCE fuzz_gguf.cpp LIBS hearth_loader
  SEEDS ${HEARTH_SHARED_DIR}/models/stories260K/stories260K.gguf)
hearth_add_fuzz(fuzz_safetensors SOURCE fuzz_safetensors.cpp LIBS hearth_loader
  SEEDS ${HEARTH_SHARED_DIR}/models/stories260K-hf/model.safetensors)
