#include "tokenizer/piece_index.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace hearth {

// Eight bytes at a time through a multiply-xorshift mix (murmur3's finalizer): half of
// std::hash's time on pieces of a few bytes, which are most of a vocabulary.
uint64_t PieceIndex::hash(std::string_view s) {
  const auto mix = [](uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  };
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = mix(h ^ w);
  }
  // The last 0-7 bytes without a variable-length copy: two 4-byte loads that may overlap,
  // or the first, middle and last byte (together they hold every byte).
  const size_t n = s.size() - i;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  uint64_t tail = 0;
  if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    tail = (uint64_t{a} << 32) | b;
  } else if (n > 0) {
    tail = (uint64_t{p[0]} << 16) | (uint64_t{p[n / 2]} << 8) | p[n - 1];
  }
  return mix(h ^ tail);
}

void PieceIndex::reserve(size_t n) {
  const size_t want = std::bit_ceil(std::max<size_t>(2 * n, 16));
  if (want > slots_.size()) grow(want);
}

void PieceIndex::grow(size_t slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot{0, -1});
  const size_t mask = slots - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

size_t PieceIndex::probe(Pieces pieces, std::string_view piece, uint32_t h) const {
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  for (; slots_[i].id >= 0; i = (i + 1) & mask) {
    if (slots_[i].hash == h && pieces[static_cast<size_t>(slots_[i].id)] == piece) break;
  }
  return i;
}

bool PieceIndex::insert(Pieces pieces, TokenId id) {
  if (2 * (size_ + 1) > slots_.size()) grow(std::max<size_t>(16, 2 * slots_.size()));
  const std::string& piece = pieces[static_cast<size_t>(id)];
  const auto h = static_cast<uint32_t>(hash(piece));
  const size_t i = probe(pieces, piece, h);
  if (slots_[i].id >= 0) return false;
  slots_[i] = {h, id};
  ++size_;
  return true;
}

std::optional<TokenId> PieceIndex::find(Pieces pieces, std::string_view piece) const {
  if (slots_.empty()) return std::nullopt;
  const TokenId id = slots_[probe(pieces, piece, static_cast<uint32_t>(hash(piece)))].id;
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace hearth
