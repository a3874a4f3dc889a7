// stories260K (../shared/models) on the CPU backend with its tokenizer and its vocabulary
// as text, for the engine tests that run the driver on a real model (constraints,
// speculative decoding). Tests check HEARTH_REQUIRE_SHARED(stories_path()) first.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/cpu/cpu_backend.h"
#include "grammar/vocabulary.h"
#include "loader/model.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

namespace hearth::testing {

inline std::filesystem::path stories_path() { return shared_path("models/stories260K/stories260K.gguf"); }

struct StoriesModel {
  LoadedModel model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<Model> llama;
  std::optional<KvCache> cache;
  std::unique_ptr<ModelRunner> runner;
  std::shared_ptr<const grammar::Vocabulary> vocab;

  // A model of `max_batch_tokens` tokens per step over a cache of `kv_blocks` blocks of 16.
  StoriesModel(int32_t max_batch_tokens, int32_t kv_blocks, KvDType kv_dtype = KvDType::kF32) {
    model = std::move(model_open(stories_path())).value();
    tokenizer = std::move(tokenizer_load(model.tokenizer)).value();
    llama = std::move(Model::create(model.config, model.tensors, *backend, max_batch_tokens)).value();
    cache.emplace(
        std::move(KvCache::create(*backend, {model.config.n_layers, model.config.kv_dim(), 16, kv_blocks, kv_dtype})).value());
    runner = std::make_unique<ModelRunner>(*llama, *cache);
    std::vector<std::string> bytes;
    for (TokenId id = 0; id < model.config.vocab_size; ++id) bytes.emplace_back(tokenizer->token_bytes(id));
    vocab = std::make_shared<const grammar::Vocabulary>(std::move(grammar::Vocabulary::build(bytes)).value());
  }
};

}  // namespace hearth::testing
