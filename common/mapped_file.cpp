#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace hearth {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status errno_status(std::string_view what, const std::filesystem::path& path, int err) {
  const ErrorCode code = (err == ENOENT || err == ENOTDIR) ? ErrorCode::kNotFound : ErrorCode::kIo;
  return make_error(code, "cannot {} {}: {}", what, path.string(), std::strerror(err));
}

Result<int> open_regular(const std::filesystem::path& path, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open", path, errno);
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    return errno_status("stat", path, err);
  }
  if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kInvalidArgument, "{} is not a regular file", path.string());
  }
  return fd;
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  struct stat st {};
  HEARTH_ASSIGN_OR_RETURN(const int raw_fd, open_regular(path, &st));
  Fd fd(raw_fd);
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ == 0) return file;
  void* addr = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) return errno_status("map", path, errno);
  file.data_ = static_cast<const std::byte*>(addr);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

Result<std::string> read_small_file(const std::filesystem::path& path, size_t max_bytes) {
  struct stat st {};
  HEARTH_ASSIGN_OR_RETURN(const int raw_fd, open_regular(path, &st));
  Fd fd(raw_fd);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return make_error(ErrorCode::kFormat, "{} is {} bytes, more than the {} accepted for this kind of file",
                      path.string(), st.st_size, max_bytes);
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("read", path, errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}


Status write_file(const std::filesystem::path& path, std::string_view bytes) {
  FileSink sink(path);
  HEARTH_RETURN_IF_ERROR(sink.append(bytes));
  return sink.close();
}

FileSink::FileSink(std::filesystem::path path) : path_(std::move(path)), part_(path_.string() + ".part") {
  fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) error_ = errno_status("create", part_, errno);
}

FileSink::~FileSink() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(part_.c_str());
  }
}

Status FileSink::append(std::string_view bytes) {
  if (!error_.is_ok()) return error_;
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = errno_status("write", part_, errno);
      return error_;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::ok();
}

Status FileSink::close() {
  if (!error_.is_ok()) return error_;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(part_.c_str());
    return errno_status("write", part_, errno);
  }
  if (::rename(part_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(part_.c_str());
    return errno_status("rename into place", path_, err);
  }
  return Status::ok();
}

}  // namespace hearth
