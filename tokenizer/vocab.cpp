#include "tokenizer/vocab.h"

#include <algorithm>

#include "common/utf8.h"

namespace hearth {

void vocab_resize(TokenizerVocab& vocab, int32_t n) {
  vocab.pieces.assign(static_cast<size_t>(n), std::string());
  vocab.types.assign(static_cast<size_t>(n), TokenType::kUnused);
  vocab.bytes.assign(static_cast<size_t>(n), std::string());
}

void vocab_index(TokenizerVocab& vocab) {
  vocab.piece_ids = PieceIndex();
  vocab.piece_ids.reserve(vocab.pieces.size());
  vocab.duplicate_ids.clear();
  for (size_t i = 0; i < vocab.pieces.size(); ++i) {
    if (vocab.pieces[i].empty()) continue;
    const auto id = static_cast<TokenId>(i);
    if (!vocab.piece_ids.insert(vocab.pieces, id)) vocab.duplicate_ids.push_back(id);  // the first stays
  }
}

Status vocab_finalize(TokenizerVocab& vocab, const TokenizerSource& source) {
  const int32_t n = vocab.size();
  if (n <= 0) return make_error(ErrorCode::kFormat, "the vocabulary is empty");
  if (source.bos_id) {
    if (*source.bos_id < 0 || *source.bos_id >= n) {
      return make_error(ErrorCode::kOutOfRange, "the model config's BOS id {} is outside the vocabulary of {} tokens",
                        *source.bos_id, n);
    }
    vocab.bos_id = *source.bos_id;
  }
  for (const TokenId id : source.eos_ids) {
    if (id < 0 || id >= n) {
      return make_error(ErrorCode::kOutOfRange, "the model config's EOS id {} is outside the vocabulary of {} tokens",
                        id, n);
    }
  }
  const auto check = [n](TokenId id, std::string_view what) -> Status {
    if (id < -1 || id >= n) {
      return make_error(ErrorCode::kFormat, "the {} id {} is outside the vocabulary of {} tokens", what, id, n);
    }
    return Status::ok();
  };
  HEARTH_RETURN_IF_ERROR(check(vocab.bos_id, "BOS"));
  HEARTH_RETURN_IF_ERROR(check(vocab.eos_id, "EOS"));
  HEARTH_RETURN_IF_ERROR(check(vocab.unk_id, "unknown-token"));
  for (const TokenId id : vocab.extra_stop_ids) HEARTH_RETURN_IF_ERROR(check(id, "end-of-turn"));
  if (vocab.bos_id < 0) vocab.add_bos = false;
  if (vocab.eos_id < 0) vocab.add_eos = false;

  vocab.stop_ids.clear();
  const auto add_stop = [&vocab](TokenId id) {
    if (id >= 0 && std::find(vocab.stop_ids.begin(), vocab.stop_ids.end(), id) == vocab.stop_ids.end()) {
      vocab.stop_ids.push_back(id);
    }
  };
  add_stop(vocab.eos_id);
  for (const TokenId id : vocab.extra_stop_ids) add_stop(id);
  for (const TokenId id : source.eos_ids) add_stop(id);
  return Status::ok();
}

std::optional<uint8_t> parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

std::string byte_piece(uint8_t b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string s = "<0x00>";
  s[3] = kHex[b >> 4];
  s[4] = kHex[b & 15];
  return s;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) return std::string(text);
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

Status check_encode_input(std::string_view text) {
  if (text.size() > kMaxEncodeBytes) {
    return make_error(ErrorCode::kInvalidArgument, "text of {} bytes is longer than the {} bytes accepted", text.size(),
                      kMaxEncodeBytes);
  }
  const size_t bad = utf8_find_invalid(text);
  if (bad != text.size()) {
    return make_error(ErrorCode::kInvalidArgument, "text is not valid UTF-8 at byte offset {}", bad);
  }
  return Status::ok();
}

std::string spm_piece_bytes(std::string_view piece, TokenType type) {
  switch (type) {
    case TokenType::kNormal:
    case TokenType::kUserDefined: return replace_all(piece, kSpmSpace, " ");
    case TokenType::kByte:
      if (const auto b = parse_byte_piece(piece)) return std::string(1, static_cast<char>(*b));
      return {};
    case TokenType::kUnknown: return std::string(kSpmUnknownSurface);
    case TokenType::kControl:
    case TokenType::kUnused: return {};
  }
  return {};
}

}  // namespace hearth
