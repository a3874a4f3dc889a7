#include "tokenizer/sp_model_proto.h"

#include <cstdint>

namespace hearth {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }

  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // Reads one field: its number, wire type and, for length-delimited fields, the bytes.
  bool field(uint32_t& number, uint32_t& wire, uint64_t& value, std::string_view& bytes) {
    uint64_t tag = 0;
    if (!varint(tag)) return false;
    number = static_cast<uint32_t>(tag >> 3);
    wire = static_cast<uint32_t>(tag & 7);
    switch (wire) {
      case 0: return varint(value);
      case 1: return skip(8);
      case 5: {
        if (data_.size() - pos_ < 4) return false;
        uint32_t w = 0;
        for (int i = 3; i >= 0; --i) w = (w << 8) | static_cast<uint8_t>(data_[pos_ + static_cast<size_t>(i)]);
        value = w;
        pos_ += 4;
        return true;
      }
      case 2: {
        uint64_t len = 0;
        if (!varint(len) || len > data_.size() - pos_) return false;
        bytes = data_.substr(pos_, static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return true;
      }
      default: return false;  // groups are not used by SentencePiece
    }
  }

 private:
  bool skip(size_t n) {
    if (data_.size() - pos_ < n) return false;
    pos_ += n;
    return true;
  }

  std::string_view data_;
  size_t pos_ = 0;
};

Status malformed(std::string_view what) {
  return make_error(ErrorCode::kFormat, "SentencePiece model: malformed {}", what);
}

}  // namespace

Result<SpModelInfo> parse_sp_model_info(std::string_view proto) {
  SpModelInfo info;
  Reader model(proto);
  uint32_t number = 0, wire = 0;
  uint64_t value = 0;
  std::string_view bytes;
  while (!model.done()) {
    if (!model.field(number, wire, value, bytes)) return malformed("model");
    if (number == 1 && wire == 2) {  // SentencePiece piece
      Reader piece(bytes);
      uint64_t type = 1;  // NORMAL
      while (!piece.done()) {
        uint32_t n = 0, w = 0;
        uint64_t v = 0;
        std::string_view b;
        if (!piece.field(n, w, v, b)) return malformed("piece");
        if (n == 3 && w == 0) type = v;
      }
      if (type < 1 || type > 6) {
        return make_error(ErrorCode::kFormat, "SentencePiece model: piece {} has unknown type {}", info.types.size(),
                          type);
      }
      info.types.push_back(static_cast<TokenType>(type));
    } else if (number == 3 && wire == 2) {  // NormalizerSpec
      Reader spec(bytes);
      while (!spec.done()) {
        uint32_t n = 0, w = 0;
        uint64_t v = 0;
        std::string_view b;
        if (!spec.field(n, w, v, b)) return malformed("normalizer spec");
        if (n == 3 && w == 0) info.add_dummy_prefix = v != 0;
        if (n == 4 && w == 0) info.remove_extra_whitespaces = v != 0;
      }
    }
  }
  return info;
}

}  // namespace hearth
