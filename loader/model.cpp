#include "loader/model.h"

#include <fstream>

#include "common/model_tensors.h"

namespace hearth {

std::string_view model_format_name(ModelFormat format) {
  switch (format) {
    case ModelFormat::kGguf: return "gguf";
    case ModelFormat::kSafetensors: return "safetensors";
    case ModelFormat::kLlama2c: return "llama2c";
  }
  return "unknown";
}

const TensorView* LoadedModel::find(std::string_view name) const {
  for (const TensorView& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

uint64_t LoadedModel::weight_bytes() const {
  uint64_t total = 0;
  for (const TensorView& t : tensors) total += t.bytes;
  return total;
}

namespace {

Result<ModelFormat> sniff(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return make_error(ErrorCode::kNotFound, "model {} does not exist", path.string());
  }
  if (std::filesystem::is_directory(status)) return ModelFormat::kSafetensors;
  if (path.extension() == ".safetensors" || path.filename() == "config.json" ||
      path.filename() == "model.safetensors.index.json") {
    return ModelFormat::kSafetensors;
  }
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, 4);
  if (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF") return ModelFormat::kGguf;
  if (path.extension() == ".bin") return ModelFormat::kLlama2c;
  return make_error(ErrorCode::kUnsupported,
                    "{} is not a model hearth can read: expected a GGUF file, a Hugging Face directory (config.json + "
                    "*.safetensors) or a llama2.c .bin checkpoint",
                    path.string());
}

}  // namespace

Result<LoadedModel> model_open(const std::filesystem::path& path, const ModelOpenOptions& options) {
  HEARTH_ASSIGN_OR_RETURN(const ModelFormat format, sniff(path));
  Result<LoadedModel> opened = Status(ErrorCode::kInternal, "unknown model format");
  switch (format) {
    case ModelFormat::kGguf: opened = gguf_model_open(path); break;
    case ModelFormat::kSafetensors:
      opened = hf_model_open(std::filesystem::is_directory(path) ? path : path.parent_path());
      break;
    case ModelFormat::kLlama2c: opened = llama2c_model_open(path, options.tokenizer_path); break;
  }
  if (!opened.is_ok()) return opened.status().with_context(path.string());
  LoadedModel model = std::move(opened).value();

  if (!options.tokenizer_path.empty() && format != ModelFormat::kLlama2c) {
    HEARTH_ASSIGN_OR_RETURN(TokenizerSource tokenizer, tokenizer_source_from_path(options.tokenizer_path));
    tokenizer.bos_id = model.tokenizer.bos_id;
    tokenizer.eos_ids = model.tokenizer.eos_ids;
    tokenizer.vocab_size = model.config.vocab_size;
    model.tokenizer = std::move(tokenizer);
  }
  HEARTH_RETURN_IF_ERROR(model_config_validate(model.config).with_context(path.string()));
  HEARTH_RETURN_IF_ERROR(model_check_tensors(model.config, model.tensors).with_context(path.string()));
  return model;
}

}  // namespace hearth
