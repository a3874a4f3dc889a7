#include "tokenizer/source_codec.h"

#include <cstring>

#include "common/byte_reader.h"

namespace hearth {
namespace {

constexpr char kMagic[4] = {'H', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxCount = uint64_t{1} << 26;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out_.append(buf, sizeof(T));
  }
  void str(std::string_view s) {
    put<uint64_t>(s.size());
    out_.append(s);
  }
  void opt_id(const std::optional<int32_t>& v) {
    put<uint8_t>(v.has_value());
    put<int32_t>(v.value_or(0));
  }
  void opt_bool(const std::optional<bool>& v) { put<uint8_t>(v.has_value() ? (*v ? 2 : 1) : 0); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : r_({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}) {}
  template <typename T>
  T get() {
    return r_.read<T>();
  }
  std::string str() {
    const auto n = r_.read<uint64_t>();
    return std::string(r_.read_bytes(n));
  }
  uint64_t count(uint64_t min_item_bytes) {
    const auto n = r_.read<uint64_t>();
    if (n > kMaxCount || n * min_item_bytes > r_.remaining()) r_.fail();
    return r_.ok() ? n : 0;
  }
  std::optional<int32_t> opt_id() {
    const bool has = r_.read<uint8_t>() != 0;
    const auto v = r_.read<int32_t>();
    return has ? std::optional<int32_t>(v) : std::nullopt;
  }
  std::optional<bool> opt_bool() {
    const auto v = r_.read<uint8_t>();
    if (v > 2) r_.fail();
    return v == 0 ? std::nullopt : std::optional<bool>(v == 2);
  }
  bool ok() const { return r_.ok(); }
  size_t remaining() const { return r_.remaining(); }

 private:
  ByteReader r_;
};

}  // namespace

std::string tokenizer_source_encode(const TokenizerSource& s) {
  Writer w;
  w.out().append(kMagic, 4);
  w.put<uint32_t>(kVersion);
  w.put<uint8_t>(static_cast<uint8_t>(s.kind));
  w.str(s.data);
  w.str(s.merges);
  w.str(s.config_json);
  w.opt_id(s.bos_id);
  w.put<uint64_t>(s.eos_ids.size());
  for (TokenId id : s.eos_ids) w.put<int32_t>(id);
  w.opt_id(s.vocab_size);
  const GgufVocab& g = s.gguf;
  w.str(g.model);
  w.str(g.pre);
  w.put<uint64_t>(g.tokens.size());
  for (const auto& t : g.tokens) w.str(t);
  w.put<uint64_t>(g.scores.size());
  for (float f : g.scores) w.put<float>(f);
  w.put<uint64_t>(g.token_types.size());
  for (int32_t t : g.token_types) w.put<int32_t>(t);
  w.put<uint64_t>(g.merges.size());
  for (const auto& m : g.merges) w.str(m);
  for (const auto* id : {&g.bos_id, &g.eos_id, &g.unk_id, &g.pad_id, &g.eot_id, &g.eom_id}) w.opt_id(*id);
  for (const auto* b : {&g.add_bos, &g.add_eos, &g.add_space_prefix, &g.remove_extra_whitespaces}) w.opt_bool(*b);
  w.str(g.chat_template);
  return std::move(w.out());
}

Result<TokenizerSource> tokenizer_source_decode(std::string_view bytes) {
  if (bytes.size() < 9 || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return make_error(ErrorCode::kFormat, "the stored tokenizer is not a hearth tokenizer blob");
  }
  Reader r(bytes.substr(4));
  if (r.get<uint32_t>() != kVersion) {
    return make_error(ErrorCode::kFormat, "the stored tokenizer has an unknown version");
  }
  TokenizerSource s;
  const auto kind = r.get<uint8_t>();
  if (kind > static_cast<uint8_t>(TokenizerSource::Kind::kLlama2c)) {
    return make_error(ErrorCode::kFormat, "the stored tokenizer has unknown kind {}", kind);
  }
  s.kind = static_cast<TokenizerSource::Kind>(kind);
  s.data = r.str();
  s.merges = r.str();
  s.config_json = r.str();
  s.bos_id = r.opt_id();
  for (uint64_t n = r.count(4), i = 0; i < n; ++i) s.eos_ids.push_back(r.get<int32_t>());
  s.vocab_size = r.opt_id();
  GgufVocab& g = s.gguf;
  g.model = r.str();
  g.pre = r.str();
  // count() has checked each count against the bytes left, so reserving it is safe.
  const uint64_t n_tokens = r.count(8);
  g.tokens.reserve(n_tokens);
  for (uint64_t i = 0; i < n_tokens && r.ok(); ++i) g.tokens.push_back(r.str());
  const uint64_t n_scores = r.count(4);
  g.scores.resize(n_scores);
  for (float& f : g.scores) f = r.get<float>();
  const uint64_t n_types = r.count(4);
  g.token_types.resize(n_types);
  for (int32_t& t : g.token_types) t = r.get<int32_t>();
  const uint64_t n_merges = r.count(8);
  g.merges.reserve(n_merges);
  for (uint64_t i = 0; i < n_merges && r.ok(); ++i) g.merges.push_back(r.str());
  for (auto* id : {&g.bos_id, &g.eos_id, &g.unk_id, &g.pad_id, &g.eot_id, &g.eom_id}) *id = r.opt_id();
  for (auto* b : {&g.add_bos, &g.add_eos, &g.add_space_prefix, &g.remove_extra_whitespaces}) *b = r.opt_bool();
  g.chat_template = r.str();
  if (!r.ok() || r.remaining() != 0) {
    return make_error(ErrorCode::kFormat, "the stored tokenizer is truncated or corrupt");
  }
  return s;
}

}  // namespace hearth
