// llama2.c checkpoint (the legacy, version-0 export: a 7-int header then float32 arrays)
// -> LoadedModel. Tensors are views into the mapping; per-layer matrices are slices.
#include <cstring>

#include "loader/model.h"

namespace hearth {
namespace {

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};
static_assert(sizeof(Header) == 28);

constexpr uint32_t kVersionedMagic = 0x616b3432;  // "ak42": the newer export formats

class Slicer {
 public:
  Slicer(const std::byte* base, uint64_t size, uint64_t offset) : base_(base), size_(size), offset_(offset) {}

  // Takes `count` float32 values; false when the file is too short.
  bool take(uint64_t count, const std::byte** out) {
    const auto bytes = checked_mul(count, 4);
    if (!bytes || *bytes > size_ - offset_) return false;
    *out = base_ + offset_;
    offset_ += *bytes;
    return true;
  }
  uint64_t offset() const { return offset_; }

 private:
  const std::byte* base_;
  uint64_t size_;
  uint64_t offset_;
};

TensorView f32_view(std::string name, const std::byte* data, std::initializer_list<int64_t> shape) {
  TensorView t;
  t.name = std::move(name);
  t.dtype = DType::kF32;
  t.n_dims = static_cast<int>(shape.size());
  int k = 0;
  for (int64_t d : shape) t.shape[k++] = d;
  t.data = data;
  t.bytes = static_cast<uint64_t>(t.elements()) * 4;
  return t;
}

}  // namespace

Result<LoadedModel> llama2c_model_open(const std::filesystem::path& path, const std::filesystem::path& tokenizer_path) {
  HEARTH_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  if (file.size() < sizeof(Header)) {
    return make_error(ErrorCode::kFormat, "{} is {} bytes, too short for a llama2.c checkpoint", path.string(),
                      file.size());
  }
  Header h;
  std::memcpy(&h, file.data(), sizeof(h));
  if (static_cast<uint32_t>(h.dim) == kVersionedMagic) {
    return make_error(ErrorCode::kUnsupported,
                      "{} is a versioned llama2.c export (\"ak42\" header); hearth reads the legacy float32 format "
                      "(export.py --version 0)",
                      path.string());
  }
  const bool shared_classifier = h.vocab_size > 0;
  const int64_t vocab = h.vocab_size < 0 ? -static_cast<int64_t>(h.vocab_size) : h.vocab_size;
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.n_layers <= 0 || h.n_heads <= 0 || h.n_kv_heads <= 0 || vocab <= 0 ||
      h.seq_len <= 0 || h.dim % h.n_heads != 0 || h.dim > (1 << 16) || h.hidden_dim > (1 << 18) ||
      h.n_layers > 1024 || h.seq_len > (1 << 24) || vocab > (1 << 22)) {
    return make_error(ErrorCode::kFormat,
                      "{} does not start with a plausible llama2.c header (dim {}, hidden {}, layers {}, heads {}, kv "
                      "heads {}, vocab {}, seq_len {})",
                      path.string(), h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size,
                      h.seq_len);
  }

  LoadedModel model;
  model.format = ModelFormat::kLlama2c;
  model.name = path.stem().string();
  ModelConfig& c = model.config;
  c.architecture = "llama";
  c.vocab_size = static_cast<int32_t>(vocab);
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.max_context = h.seq_len;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_style = RopeStyle::kInterleaved;
  c.tied_embeddings = shared_classifier;
  HEARTH_RETURN_IF_ERROR(model_config_validate(c).with_context(path.string()));

  const int64_t d = c.dim, f = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), L = c.n_layers;
  Slicer s(file.data(), file.size(), sizeof(Header));
  const std::byte *emb, *att_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2, *w3, *out_norm, *freqs, *wcls = nullptr;
  const bool ok = s.take(vocab * d, &emb) && s.take(L * d, &att_norm) && s.take(L * d * q, &wq) &&
                  s.take(L * d * kv, &wk) && s.take(L * d * kv, &wv) && s.take(L * q * d, &wo) &&
                  s.take(L * d, &ffn_norm) && s.take(L * d * f, &w1) && s.take(L * f * d, &w2) &&
                  s.take(L * d * f, &w3) && s.take(d, &out_norm) &&
                  s.take(static_cast<int64_t>(h.seq_len) * c.head_dim, &freqs) &&  // legacy freq_cis_real + imag
                  (shared_classifier || s.take(vocab * d, &wcls));
  if (!ok) {
    return make_error(ErrorCode::kFormat,
                      "{} is {} bytes, shorter than its header needs: the checkpoint is truncated", path.string(),
                      file.size());
  }
  if (s.offset() != file.size()) {
    return make_error(ErrorCode::kFormat,
                      "{} is {} bytes but its header describes {}: not a legacy llama2.c checkpoint of that shape",
                      path.string(), file.size(), s.offset());
  }

  auto& ts = model.tensors;
  ts.push_back(f32_view("token_embd.weight", emb, {vocab, d}));
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    ts.push_back(f32_view(p + "attn_norm.weight", att_norm + i * d * 4, {d}));
    ts.push_back(f32_view(p + "attn_q.weight", wq + i * d * q * 4, {q, d}));
    ts.push_back(f32_view(p + "attn_k.weight", wk + i * d * kv * 4, {kv, d}));
    ts.push_back(f32_view(p + "attn_v.weight", wv + i * d * kv * 4, {kv, d}));
    ts.push_back(f32_view(p + "attn_output.weight", wo + i * q * d * 4, {d, q}));
    ts.push_back(f32_view(p + "ffn_norm.weight", ffn_norm + i * d * 4, {d}));
    ts.push_back(f32_view(p + "ffn_gate.weight", w1 + i * d * f * 4, {f, d}));
    ts.push_back(f32_view(p + "ffn_down.weight", w2 + i * f * d * 4, {d, f}));
    ts.push_back(f32_view(p + "ffn_up.weight", w3 + i * d * f * 4, {f, d}));
  }
  ts.push_back(f32_view("output_norm.weight", out_norm, {d}));
  if (!shared_classifier) ts.push_back(f32_view("output.weight", wcls, {vocab, d}));

  // The tokenizer lives apart: the given path, else tok<vocab>.bin or tokenizer.bin beside it.
  std::filesystem::path tok = tokenizer_path;
  if (tok.empty()) {
    for (const auto& candidate : {path.parent_path() / fmt::format("tok{}.bin", vocab),
                                  path.parent_path() / "tokenizer.bin"}) {
      if (std::filesystem::exists(candidate)) {
        tok = candidate;
        break;
      }
    }
  }
  if (tok.empty()) {
    return make_error(ErrorCode::kNotFound,
                      "llama2.c checkpoints keep their tokenizer apart and none was found beside {} (looked for "
                      "tok{}.bin and tokenizer.bin): pass --tokenizer PATH",
                      path.string(), vocab);
  }
  HEARTH_ASSIGN_OR_RETURN(model.tokenizer, tokenizer_source_from_path(tok));
  model.tokenizer.vocab_size = c.vocab_size;
  model.tokenizer.bos_id = 1;
  model.tokenizer.eos_ids = {2};
  model.files.push_back(std::move(file));
  return model;
}

}  // namespace hearth
