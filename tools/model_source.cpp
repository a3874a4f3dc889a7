#include "tools/model_source.h"

#include "tokenizer/source_codec.h"

namespace hearth::cli {
namespace {

Status check_vocab(const RunnableModel& m) {
  if (m.tokenizer->vocab_size() > m.config.vocab_size) {
    return make_error(ErrorCode::kFormat, "the tokenizer has {} tokens but the model only {}",
                      m.tokenizer->vocab_size(), m.config.vocab_size);
  }
  return Status::ok();
}

}  // namespace

Result<RunnableModel> open_model_files(const std::filesystem::path& model, const std::filesystem::path& tokenizer) {
  RunnableModel m;
  HEARTH_ASSIGN_OR_RETURN(LoadedModel loaded, model_open(model, ModelOpenOptions{tokenizer}));
  auto tok = tokenizer_load(loaded.tokenizer);
  if (!tok.is_ok()) return tok.status().with_context("tokenizer");
  m.tokenizer = std::move(tok).value();
  m.name = loaded.name;
  m.config = loaded.config;
  m.tensors = loaded.tensors;
  m.file.emplace(std::move(loaded));
  HEARTH_RETURN_IF_ERROR(check_vocab(m));
  return m;
}

Result<RunnableModel> attach_instance(const std::string& instance, const std::filesystem::path& shm_dir) {
  HEARTH_RETURN_IF_ERROR(instance_name_check(instance));
  const auto path = segment_path(shm_dir.empty() ? shm_dir_default() : shm_dir, instance, "weights");
  // The weight pages fault in as the first forward pass reads them (measured: mapping
  // them all up front, on a helper thread or before starting, is no faster end to end).
  HEARTH_ASSIGN_OR_RETURN(AttachedWeights w, weights_attach(path));
  if (w.header->tp_size != 1) {
    return make_error(ErrorCode::kUnsupported,
                      "{} is split for {} tensor-parallel ranks; a single process runs segments loaded with --tp 1",
                      path.string(), w.header->tp_size);
  }
  HEARTH_ASSIGN_OR_RETURN(TokenizerSource source, tokenizer_source_decode(w.tokenizer_blob));
  auto tok = tokenizer_load(source);
  if (!tok.is_ok()) return tok.status().with_context(path.string() + ": stored tokenizer");
  RunnableModel m;
  m.tokenizer = std::move(tok).value();
  m.name = w.model_name;
  m.config = w.config;
  m.tensors = w.tensors(0);
  m.layout = w.layout;
  m.attached.emplace(std::move(w));
  HEARTH_RETURN_IF_ERROR(check_vocab(m));
  return m;
}

}  // namespace hearth::cli
