#include "ipc/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
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

uint64_t huge_mapped_bytes(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const std::string start = fmt::format("{:x}-", reinterpret_cast<uintptr_t>(address));
  std::string line;
  bool inside = false;
  uint64_t kib = 0;
  while (std::getline(smaps, line)) {
    // A mapping's first line is "start-end perms ..."; its fields are "Name:   value kB".
    const size_t space = line.find(' ');
    if (space != std::string::npos && line.find('-') < space && line.find(':') > space) {
      if (inside) break;
      inside = line.starts_with(start);
    } else if (inside && (line.starts_with("ShmemPmdMapped:") || line.starts_with("FilePmdMapped:"))) {
      kib += std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10);
    }
  }
  return kib << 10;
}

namespace {

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1
#endif

// Maps `path` whole (`bytes`) at an address that is a multiple of 2 MiB: the kernel maps a
// file's huge pages with huge page-table entries only where the address and the file
// offset agree modulo 2 MiB, and left to itself it places a tmpfs file without huge pages
// at any 4 KiB boundary. Boost.Interprocess maps the file MAP_FIXED over a PROT_NONE
// reservation 2 MiB larger, so no other thread's mapping can take the address in
// between; the reservation's slack is then returned.
Result<bip::mapped_region> map_aligned(const std::filesystem::path& path, uint64_t bytes, bool writable,
                                       bool populate) {
  const size_t reserve = static_cast<size_t>(bytes) + kHugePageBytes;
  void* base = ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    return make_error(ErrorCode::kIo, "cannot reserve {} of address space for segment {}: {}", human_bytes(bytes),
                      path.string(), std::strerror(err));
  }
  const auto begin = reinterpret_cast<uintptr_t>(base);
  const uintptr_t at = (begin + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  bip::mapped_region region;
  try {
    const auto mode = writable ? bip::read_write : bip::read_only;
    bip::file_mapping file(path.c_str(), mode);
    region = bip::mapped_region(file, mode, 0, static_cast<size_t>(bytes), reinterpret_cast<void*>(at),
                                MAP_FIXED | (populate ? MAP_POPULATE : 0));
  } catch (const std::exception& e) {
    ::munmap(base, reserve);
    return make_error(ErrorCode::kIo, "cannot map segment {}: {}", path.string(), e.what());
  }
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t end = (at + static_cast<uintptr_t>(bytes) + page - 1) & ~(page - 1);
  if (at > begin) ::munmap(base, at - begin);
  if (begin + reserve > end) ::munmap(reinterpret_cast<void*>(end), begin + reserve - end);
  return region;
}

Status reserve_error(int rc, uint64_t bytes, const std::filesystem::path& path) {
  if (rc == ENOSPC) {
    return make_error(ErrorCode::kShmTooSmall, "{} ran out of space reserving {} for {}", path.parent_path().string(),
                      human_bytes(bytes), path.filename().string());
  }
  return make_error(ErrorCode::kIo, "cannot reserve {} for {}: {}", human_bytes(bytes), path.string(),
                    std::strerror(rc));
}

}  // namespace

std::vector<uint64_t> huge_page_order(uint64_t whole, const HugePagePlan& plan) {
  const uint64_t pages = whole / kHugePageBytes;
  std::vector<bool> taken(pages, false);
  std::vector<uint64_t> order;
  order.reserve(pages);
  auto take = [&](uint64_t offset) {
    const uint64_t page = offset / kHugePageBytes;
    if (page < pages && !taken[page]) {
      taken[page] = true;
      order.push_back(page * kHugePageBytes);
    }
  };
  if (plan.stride > 0 && plan.origin < whole) {
    const uint64_t runs = (whole - plan.origin + plan.stride - 1) / plan.stride;
    for (uint64_t into = 0; into < plan.stride; into += kHugePageBytes) {
      for (uint64_t r = 0; r < runs; ++r) take(plan.origin + r * plan.stride + into);
    }
  }
  for (uint64_t page = 0; page < pages; ++page) take(page * kHugePageBytes);
  return order;
}

Result<ShmSegment> ShmSegment::create(const std::filesystem::path& path, uint64_t bytes,
                                      std::optional<HugePagePlan> huge) {
  if (bytes == 0) return make_error(ErrorCode::kInvalidArgument, "a segment needs a positive size");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return make_error(ErrorCode::kInvalidArgument, "segment {} already exists", path.string());
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "cannot create segment {}: {}",
                      path.string(), std::strerror(errno));
  }
  ShmSegment seg;
  seg.path_ = path;
  seg.owned_ = true;  // from here on the destructor removes the file unless published
  auto fail = [&](Status status) {
    ::close(fd);
    return status;
  };
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    return fail(make_error(ErrorCode::kIo, "cannot size segment {}: {}", path.string(), std::strerror(err)));
  }
  auto mapped = map_aligned(path, bytes, /*writable=*/true, /*populate=*/false);
  if (!mapped.is_ok()) return fail(mapped.status());
  seg.region_.swap(*mapped);
  seg.huge_planned_ = huge.has_value();
  const uint64_t whole = huge ? huge_page_floor(bytes) : 0;
  if (whole > 0) {
    // A collapse needs a page to start from in each 2 MiB and fills the rest itself,
    // zeroed: one reserved 4 KiB page each (an error here, not SIGBUS, when the directory
    // is full), then collapses them in the plan's order.
    for (uint64_t off = 0; off < whole; off += kHugePageBytes) {
      if (const int rc = ::posix_fallocate(fd, static_cast<off_t>(off), 4096); rc != 0) {
        return fail(reserve_error(rc, bytes, path));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    auto collapse = [&](uint64_t off, uint64_t n) {
      // In milliseconds, so that the default budget (the longest there is) cannot overflow.
      if (std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start) >=
          huge->budget) {
        seg.huge_budget_spent_ = huge->budget;
        return false;
      }
      int rc = ::madvise(seg.data() + off, n, MADV_COLLAPSE);
      if (rc != 0 && errno == EAGAIN) rc = ::madvise(seg.data() + off, n, MADV_COLLAPSE);  // briefly busy: once more
      if (rc != 0) {
        // Unsupported (EINVAL; also what a tmpfs mounted huge=always answers, its pages
        // being huge already), or no memory to be had without a long compaction: either
        // way, asking again for the rest would not go better.
        seg.huge_error_ = errno;
        return false;
      }
      return true;
    };
    // Pages that follow each other in the order go up to 32 to a call.
    const std::vector<uint64_t> order = huge_page_order(whole, *huge);
    for (size_t i = 0; i < order.size();) {
      size_t j = i + 1;
      while (j < order.size() && j - i < 32 && order[j] == order[j - 1] + kHugePageBytes) ++j;
      if (!collapse(order[i], (j - i) * kHugePageBytes)) break;
      i = j;
    }
    // What the page tables say, not what madvise answered: one read per 2 MiB maps each
    // page, huge or not.
    for (uint64_t off = 0; off < whole; off += kHugePageBytes) {
      static_cast<void>(*static_cast<volatile const std::byte*>(seg.data() + off));
    }
    seg.huge_bytes_ = std::min(huge_mapped_bytes(seg.data()), whole);
  }
  // Whatever no huge page holds, on 4 KiB pages.
  if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    return fail(reserve_error(rc, bytes, path));
  }
  ::close(fd);
  return seg;
}

std::string ShmSegment::why_not_huge() const {
  if (!huge_planned_ || huge_bytes_ == huge_page_floor(size())) return "";
  if (huge_unsupported()) {
    return fmt::format("{} cannot hold huge pages (a tmpfs on Linux 6.1 or later can, unless "
                       "/sys/kernel/mm/transparent_hugepage/shmem_enabled says deny)",
                       path_.parent_path().string());
  }
  if (huge_error_ != 0) return fmt::format("the kernel gave no more 2 MiB pages ({})", std::strerror(huge_error_));
  if (huge_budget_spent_) {
    return fmt::format("placing them took over the {} ms allowed", huge_budget_spent_->count());
  }
  return "the kernel placed the rest on 4 KiB pages";
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
  HEARTH_ASSIGN_OR_RETURN(bip::mapped_region region,
                          map_aligned(path, static_cast<uint64_t>(st.st_size), writable, populate));
  ShmSegment seg;
  seg.path_ = path;
  seg.region_.swap(region);
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : path_(std::move(other.path_)),
      owned_(std::exchange(other.owned_, false)),
      huge_bytes_(other.huge_bytes_),
      huge_error_(other.huge_error_),
      huge_planned_(other.huge_planned_),
      huge_budget_spent_(other.huge_budget_spent_) {
  region_.swap(other.region_);
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    ShmSegment old(std::move(*this));
    region_.swap(other.region_);
    path_ = std::move(other.path_);
    owned_ = std::exchange(other.owned_, false);
    huge_bytes_ = other.huge_bytes_;
    huge_error_ = other.huge_error_;
    huge_planned_ = other.huge_planned_;
    huge_budget_spent_ = other.huge_budget_spent_;
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

}  // namespace hearth
