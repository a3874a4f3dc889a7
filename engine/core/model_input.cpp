#include "engine/core/model_input.h"

#include <algorithm>
#include <cstring>

#include "common/byte_reader.h"

namespace hearth {
namespace {

constexpr uint32_t kMagic = 0x4e49444du;  // "MDIN"
constexpr uint32_t kVersion = 3;  // 2: hidden rows; 3: adapters

void put_u32(std::vector<std::byte>& out, uint32_t v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(v));
}

void put_array(std::vector<std::byte>& out, const std::vector<int32_t>& a) {
  put_u32(out, static_cast<uint32_t>(a.size()));
  const auto* p = reinterpret_cast<const std::byte*>(a.data());
  out.insert(out.end(), p, p + a.size() * sizeof(int32_t));
}

bool get_array(ByteReader& in, std::vector<int32_t>& a) {
  const uint32_t n = in.read<uint32_t>();
  if (!in.ok() || n > in.remaining() / sizeof(int32_t)) return false;
  const std::string_view bytes = in.read_bytes(uint64_t{n} * sizeof(int32_t));
  a.resize(n);
  if (n > 0) std::memcpy(a.data(), bytes.data(), bytes.size());
  return in.ok();
}

}  // namespace

void ModelInput::clear(int32_t size) {
  block_size = size;
  tokens.clear();
  positions.clear();
  slots.clear();
  query_start.assign(1, 0);
  page_start.assign(1, 0);
  pages.clear();
  logit_rows.clear();
  hidden_rows.clear();
  adapters.clear();
}

Status ModelInput::add_sequence(std::span<const TokenId> seq_tokens, int32_t first_position,
                                std::span<const int32_t> blocks, int32_t n_logits, int32_t adapter) {
  if (seq_tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "a sequence needs at least one token");
  if (n_logits < 0 || static_cast<size_t>(n_logits) > seq_tokens.size()) {
    return make_error(ErrorCode::kInvalidArgument, "{} logit rows asked of a sequence of {} tokens", n_logits,
                      seq_tokens.size());
  }
  if (query_start.empty()) clear(block_size);
  const auto n = static_cast<int32_t>(seq_tokens.size());
  if (first_position < 0 || block_size < 1 ||
      static_cast<size_t>((first_position + n - 1) / block_size) >= blocks.size()) {
    return make_error(ErrorCode::kInvalidArgument, "KV blocks ({}) do not cover positions {}..{}", blocks.size(),
                      first_position, first_position + n - 1);
  }
  const int32_t row0 = n_tokens();
  tokens.insert(tokens.end(), seq_tokens.begin(), seq_tokens.end());
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = first_position + i;
    positions.push_back(pos);
    slots.push_back(blocks[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
  }
  query_start.push_back(row0 + n);
  pages.insert(pages.end(), blocks.begin(), blocks.end());
  page_start.push_back(static_cast<int32_t>(pages.size()));
  for (int32_t i = n - n_logits; i < n; ++i) logit_rows.push_back(row0 + i);
  if (adapter >= 0 && adapters.size() < static_cast<size_t>(row0)) adapters.resize(static_cast<size_t>(row0), -1);
  if (adapter >= 0 || !adapters.empty()) adapters.resize(static_cast<size_t>(row0 + n), adapter);
  return Status::ok();
}

int32_t ModelInput::max_keys() const {
  int32_t most = 0;
  for (int32_t p : positions) most = std::max(most, p + 1);
  return most;
}

bool ModelInput::has_adapters() const {
  return std::any_of(adapters.begin(), adapters.end(), [](int32_t a) { return a >= 0; });
}

void ModelInput::want_hidden(int32_t first, int32_t count) {
  for (int32_t i = 0; i < count; ++i) hidden_rows.push_back(first + i);
}

void ModelInput::want_every_row() {
  logit_rows.resize(tokens.size());
  for (size_t i = 0; i < logit_rows.size(); ++i) logit_rows[i] = static_cast<int32_t>(i);
}

void ModelInput::serialize(std::vector<std::byte>& out) const {
  out.clear();
  put_u32(out, kMagic);
  put_u32(out, kVersion);
  put_u32(out, static_cast<uint32_t>(block_size));
  put_array(out, tokens);
  put_array(out, positions);
  put_array(out, slots);
  put_array(out, query_start);
  put_array(out, page_start);
  put_array(out, pages);
  put_array(out, logit_rows);
  put_array(out, hidden_rows);
  put_array(out, adapters);
}

Status ModelInput::deserialize(std::span<const std::byte> bytes, ModelInput& out) {
  ByteReader in(bytes);
  if (in.read<uint32_t>() != kMagic || in.read<uint32_t>() != kVersion) {
    return make_error(ErrorCode::kFormat, "not a model input of version {}", kVersion);
  }
  out.block_size = static_cast<int32_t>(in.read<uint32_t>());
  for (std::vector<int32_t>* a : {&out.tokens, &out.positions, &out.slots, &out.query_start, &out.page_start,
                                  &out.pages, &out.logit_rows, &out.hidden_rows, &out.adapters}) {
    if (!get_array(in, *a)) return make_error(ErrorCode::kFormat, "a model input's arrays are cut short");
  }
  if (in.remaining() != 0) return make_error(ErrorCode::kFormat, "{} bytes follow a model input", in.remaining());
  return Status::ok();
}

size_t model_input_max_bytes(int32_t max_tokens, int32_t max_seqs, int32_t max_pages_per_seq) {
  const auto t = static_cast<size_t>(std::max(max_tokens, 1));
  const size_t s = std::min(static_cast<size_t>(std::max(max_seqs, 1)), t);
  const size_t pages = s * static_cast<size_t>(std::max(max_pages_per_seq, 1));
  // magic, version, block size, 9 counts; tokens, positions, slots, logit and hidden
  // rows and adapters per token, two starts per sequence (and one more), the pages.
  return 12 * sizeof(uint32_t) + sizeof(int32_t) * (6 * t + 2 * (s + 1) + pages);
}

Status model_input_validate(const ModelInput& in, const ModelInputLimits& lim) {
  const int64_t n = in.n_tokens();
  if (n == 0) return make_error(ErrorCode::kInvalidArgument, "empty batch");
  if (n > lim.max_tokens) {
    return make_error(ErrorCode::kInvalidArgument, "batch of {} tokens exceeds the model's limit of {}", n,
                      lim.max_tokens);
  }
  if (in.block_size != lim.block_size) {
    return make_error(ErrorCode::kInvalidArgument, "batch has KV blocks of {} positions, the cache of {}",
                      in.block_size, lim.block_size);
  }
  if (in.positions.size() != in.tokens.size() || in.slots.size() != in.tokens.size()) {
    return make_error(ErrorCode::kInvalidArgument, "batch has {} tokens but {} positions and {} slots", n,
                      in.positions.size(), in.slots.size());
  }
  for (TokenId t : in.tokens) {
    if (t < 0 || t >= lim.vocab_size) {
      return make_error(ErrorCode::kOutOfRange, "token id {} is outside the vocabulary (0..{})", t,
                        lim.vocab_size - 1);
    }
  }
  const auto n_seqs = static_cast<int64_t>(in.query_start.size()) - 1;
  if (n_seqs < 1 || in.page_start.size() != in.query_start.size() || in.query_start.front() != 0 ||
      in.query_start.back() != n || in.page_start.front() != 0 ||
      in.page_start.back() != static_cast<int32_t>(in.pages.size())) {
    return make_error(ErrorCode::kInvalidArgument, "batch sequences must cover the tokens in order");
  }
  for (int32_t block : in.pages) {
    if (block < 0 || block >= lim.n_blocks) return make_error(ErrorCode::kInvalidArgument, "KV block {} is not in the cache", block);
  }
  const int32_t bs = in.block_size;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int32_t r0 = in.query_start[static_cast<size_t>(s)], r1 = in.query_start[static_cast<size_t>(s) + 1];
    const int32_t p0 = in.page_start[static_cast<size_t>(s)], p1 = in.page_start[static_cast<size_t>(s) + 1];
    if (r1 <= r0 || p1 < p0) return make_error(ErrorCode::kInvalidArgument, "batch sequences must cover the tokens in order");
    for (int32_t r = r0; r < r1; ++r) {
      const int32_t pos = in.positions[static_cast<size_t>(r)];
      if (pos < 0 || pos >= lim.max_context) {
        return make_error(ErrorCode::kOutOfRange, "position {} is outside the model's context of {}", pos,
                          lim.max_context);
      }
      if (pos / bs >= p1 - p0) return make_error(ErrorCode::kInvalidArgument, "position {} has no KV block", pos);
      if (in.slots[static_cast<size_t>(r)] != in.pages[static_cast<size_t>(p0 + pos / bs)] * bs + pos % bs) {
        return make_error(ErrorCode::kInvalidArgument, "the KV slot of position {} is not in its block", pos);
      }
    }
  }
  if (static_cast<int64_t>(in.logit_rows.size()) > n) {
    return make_error(ErrorCode::kInvalidArgument, "more logit rows than tokens");
  }
  for (int32_t r : in.logit_rows) {
    if (r < 0 || r >= n) return make_error(ErrorCode::kInvalidArgument, "logit row {} is not in the batch", r);
  }
  if (static_cast<int64_t>(in.hidden_rows.size()) > n) {
    return make_error(ErrorCode::kInvalidArgument, "more hidden rows than tokens");
  }
  for (int32_t r : in.hidden_rows) {
    if (r < 0 || r >= n) return make_error(ErrorCode::kInvalidArgument, "hidden row {} is not in the batch", r);
  }
  if (!in.adapters.empty()) {
    if (static_cast<int64_t>(in.adapters.size()) != n) {
      return make_error(ErrorCode::kInvalidArgument, "batch has {} tokens but {} adapter slots", n, in.adapters.size());
    }
    for (int64_t s = 0; s < n_seqs; ++s) {
      const int32_t r0 = in.query_start[static_cast<size_t>(s)], r1 = in.query_start[static_cast<size_t>(s) + 1];
      const int32_t a = in.adapters[static_cast<size_t>(r0)];
      if (a < -1 || a >= lim.n_adapters) {
        return make_error(ErrorCode::kOutOfRange, "adapter slot {} is not one of the model's {}", a, lim.n_adapters);
      }
      for (int32_t r = r0 + 1; r < r1; ++r) {
        if (in.adapters[static_cast<size_t>(r)] != a) {
          return make_error(ErrorCode::kInvalidArgument, "sequence {} runs with two adapters", s);
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace hearth
