// ByteReader: bounds-checked little-endian reads from an untrusted byte span.
//
// Every read checks the remaining length first; a failed read sets the reader's error
// and returns a zero value, so parsers check ok() once per record instead of per field.
// Not thread-safe (one reader per parse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace hearth {

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  bool ok() const { return ok_; }
  size_t offset() const { return pos_; }
  size_t remaining() const { return ok_ ? bytes_.size() - pos_ : 0; }

  template <typename T>
  T read() {
    T value{};
    if (!take(sizeof(T))) return value;
    std::memcpy(&value, bytes_.data() + pos_ - sizeof(T), sizeof(T));
    return value;
  }

  // A view of the next n bytes, or empty (and !ok()) when fewer remain.
  std::string_view read_bytes(uint64_t n) {
    if (n > remaining() || !take(static_cast<size_t>(n))) {
      ok_ = false;
      return {};
    }
    return {reinterpret_cast<const char*>(bytes_.data() + pos_ - n), static_cast<size_t>(n)};
  }

  void skip(uint64_t n) { read_bytes(n); }
  void fail() { ok_ = false; }

 private:
  bool take(size_t n) {
    if (!ok_ || n > bytes_.size() - pos_) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }

  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace hearth
