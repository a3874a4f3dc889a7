// MappedFile: a read-only, private memory mapping of a whole file (RAII, move-only).
//
// Model weights are used in place from the mapping, never copied. The mapping stays valid
// while the object lives, even if the file is renamed or unlinked. Thread-compatible;
// the mapped bytes may be read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "common/status.h"

namespace hearth {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to an empty span.
  static Result<MappedFile> open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void reset() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole small file (configs, tokenizer files) into a string, refusing files
// larger than `max_bytes` so a hostile path cannot make us allocate without bound.
Result<std::string> read_small_file(const std::filesystem::path& path, size_t max_bytes);

// Writes `bytes` to `path`, replacing it.
Status write_file(const std::filesystem::path& path, std::string_view bytes);

// Writes a file in pieces: to "<path>.part", renamed to `path` by a successful close(),
// removed if the sink dies without one. Not thread-safe.
class FileSink {
 public:
  explicit FileSink(std::filesystem::path path);
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  Status append(std::string_view bytes);
  Status close();

 private:
  std::filesystem::path path_;
  std::filesystem::path part_;
  int fd_ = -1;
  Status error_;
};

}  // namespace hearth
