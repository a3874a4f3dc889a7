// tokenizer_source_from_path: finding and reading tokenizer files on disk.
#include <filesystem>
#include <string>
#include <system_error>

#include "common/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxJsonFile = size_t{256} << 20;
constexpr size_t kMaxBinaryFile = size_t{256} << 20;
constexpr size_t kMaxConfigFile = size_t{16} << 20;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// tokenizer_config.json beside `file`: "<stem>.tokenizer_config.json" for a
// "<stem>.tokenizer.json", else "tokenizer_config.json" in the same folder.
Result<std::string> config_beside(const fs::path& file) {
  const std::string name = file.filename().string();
  const fs::path dir = file.parent_path();
  constexpr std::string_view kSuffix = ".tokenizer.json";
  if (ends_with(name, kSuffix)) {
    const fs::path named = dir / (name.substr(0, name.size() - kSuffix.size()) + ".tokenizer_config.json");
    if (is_file(named)) return read_small_file(named, kMaxConfigFile);
  }
  const fs::path plain = dir / "tokenizer_config.json";
  if (is_file(plain)) return read_small_file(plain, kMaxConfigFile);
  return std::string();
}

Result<TokenizerSource> gpt2_files(const fs::path& vocab_json) {
  const std::string name = vocab_json.filename().string();
  const fs::path dir = vocab_json.parent_path();
  // encoder.json pairs with vocab.bpe, vocab.json with merges.txt; either other one will do.
  const fs::path first = dir / (name == "encoder.json" ? "vocab.bpe" : "merges.txt");
  const fs::path second = dir / (name == "encoder.json" ? "merges.txt" : "vocab.bpe");
  const fs::path merges = is_file(first) ? first : second;
  if (!is_file(merges)) {
    return make_error(ErrorCode::kNotFound, "{} needs its merges beside it ({} or {})", vocab_json.string(),
                      first.string(), second.string());
  }
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kGpt2Files;
  HEARTH_ASSIGN_OR_RETURN(source.data, read_small_file(vocab_json, kMaxJsonFile));
  HEARTH_ASSIGN_OR_RETURN(source.merges, read_small_file(merges, kMaxJsonFile));
  return source;
}

Result<TokenizerSource> from_file(const fs::path& file) {
  const std::string name = file.filename().string();
  TokenizerSource source;
  if (name == "encoder.json" || name == "vocab.json") return gpt2_files(file);
  if (ends_with(name, ".json")) {
    source.kind = TokenizerSource::Kind::kHfJson;
    HEARTH_ASSIGN_OR_RETURN(source.data, read_small_file(file, kMaxJsonFile));
    HEARTH_ASSIGN_OR_RETURN(source.config_json, config_beside(file));
    return source;
  }
  if (ends_with(name, ".model")) {
    source.kind = TokenizerSource::Kind::kSentencePiece;
    HEARTH_ASSIGN_OR_RETURN(source.data, read_small_file(file, kMaxBinaryFile));
    HEARTH_ASSIGN_OR_RETURN(source.config_json, config_beside(file));
    return source;
  }
  if (ends_with(name, ".bin")) {
    source.kind = TokenizerSource::Kind::kLlama2c;
    HEARTH_ASSIGN_OR_RETURN(source.data, read_small_file(file, kMaxBinaryFile));
    return source;
  }
  if (ends_with(name, ".gguf")) {
    return make_error(ErrorCode::kUnsupported, "{}: a GGUF vocabulary is read with the model by the loader",
                      file.string());
  }
  return make_error(ErrorCode::kUnsupported,
                    "{}: not a tokenizer file hearth knows (.json, .model, tokenizer.bin, encoder.json/vocab.json)",
                    file.string());
}

}  // namespace

Result<TokenizerSource> tokenizer_source_from_path(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return make_error(ErrorCode::kNotFound, "{} does not exist", path.string());
  if (fs::is_regular_file(status)) return from_file(path);
  if (!fs::is_directory(status))
    return make_error(ErrorCode::kInvalidArgument, "{} is not a file or folder", path.string());
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer.bin", "vocab.json", "encoder.json"}) {
    const fs::path candidate = path / name;
    if (is_file(candidate)) return from_file(candidate);
  }
  return make_error(ErrorCode::kNotFound,
                    "{} holds no tokenizer (looked for tokenizer.json, tokenizer.model, tokenizer.bin, vocab.json, "
                    "encoder.json)",
                    path.string());
}

}  // namespace hearth
