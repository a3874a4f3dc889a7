#include "ipc/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <boost/interprocess/file_mapping.hpp>

#include "common/log.h"

namespace hearth {
namespace bip = boost::interprocess;

std::filesystem::path shm_dir_default() {
  if (const char* env = std::getenv("HEARTH_SHM_DIR"); env != nullptr && *env != '\0') return env;
  return "/dev/shm";
}

Status instance_name_check(std::string_view instance) {
  const bool ok = !instance.empty() && instance.size() <= 64 &&
                  instance.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
                      std::string_view::npos;
  if (!ok) {
    return make_error(ErrorCode::kInvalidArgument,
                      "instance name \"{}\" must be 1 to 64 letters, digits, '_' or '-'", instance);
  }
  return Status::ok();
}

std::filesystem::path segment_path(const std::filesystem::path& dir, std::string_view instance,
                                   std::string_view what) {
  return dir / fmt::format("hearth.{}.{}", instance, what);
}

Result<ShmSpace> shm_space(const std::filesystem::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) {
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                      "cannot read the free space of {}: {}", dir.string(), std::strerror(errno));
  }
  return ShmSpace{static_cast<uint64_t>(st.f_bavail) * st.f_frsize, static_cast<uint64_t>(st.f_blocks) * st.f_frsize};
}

std::string human_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) return fmt::format("{:.1f} GiB", b / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f} MiB", b / (1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.1f} KiB", b / (1ull << 10));
  return fmt::format("{} B", bytes);
}

Result<ShmSegment> ShmSegment::create(const std::filesystem::path& path, uint64_t bytes) {
  if (bytes == 0) return make_error(ErrorCode::kInvalidArgument, "a segment needs a positive size");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return make_error(ErrorCode::kInvalidArgument, "segment {} already exists", path.string());
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "cannot create segment {}: {}",
                      path.string(), std::strerror(errno));
  }
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  ::close(fd);
  if (rc != 0) {
    ::unlink(path.c_str());
    if (rc == ENOSPC) {
      return make_error(ErrorCode::kShmTooSmall, "{} ran out of space reserving {} for {}",
                        path.parent_path().string(), human_bytes(bytes), path.filename().string());
    }
    return make_error(ErrorCode::kIo, "cannot reserve {} for {}: {}", human_bytes(bytes), path.string(),
                      std::strerror(rc));
  }
  ShmSegment seg;
  seg.path_ = path;
  seg.owned_ = true;  // from here on the destructor removes the file unless published
  try {
    bip::file_mapping file(path.c_str(), bip::read_write);
    seg.region_ = bip::mapped_region(file, bip::read_write, 0, bytes);
  } catch (const bip::interprocess_exception& e) {
    return make_error(ErrorCode::kIo, "cannot map segment {}: {}", path.string(), e.what());
  }
  return seg;
}

Result<ShmSegment> ShmSegment::attach(const std::filesystem::path& path, bool writable, bool populate) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "cannot open segment {}: {}",
                      path.string(), std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
    return make_error(ErrorCode::kFormat, "segment {} is empty or not a regular file", path.string());
  }
  ShmSegment seg;
  seg.path_ = path;
  try {
    const auto mode = writable ? bip::read_write : bip::read_only;
    bip::file_mapping file(path.c_str(), mode);
    seg.region_ = bip::mapped_region(file, mode, 0, static_cast<size_t>(st.st_size), nullptr,
                                     populate ? MAP_POPULATE : bip::default_map_options);
  } catch (const bip::interprocess_exception& e) {
    return make_error(ErrorCode::kIo, "cannot map segment {}: {}", path.string(), e.what());
  }
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : path_(std::move(other.path_)), owned_(std::exchange(other.owned_, false)) {
  region_.swap(other.region_);
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    ShmSegment old(std::move(*this));
    region_.swap(other.region_);
    path_ = std::move(other.path_);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (owned_ && !path_.empty()) {
    if (::unlink(path_.c_str()) == 0) {
      HEARTH_LOG_INFO("removed unfinished segment {}", path_.string());
    }
  }
}

void ShmSegment::advise_hugepages() const {
  if (size() > 0) ::madvise(data(), size(), MADV_HUGEPAGE);
}

}  // namespace hearth
