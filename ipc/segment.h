// Shared-memory segments: files in the shared-memory directory (/dev/shm unless
// HEARTH_SHM_DIR or a flag says otherwise), named hearth.<instance>.<what>, mode 0600,
// mapped with Boost.Interprocess at 2 MiB-aligned addresses so that memory the kernel
// holds in huge pages is mapped by huge page-table entries in every process.
//
// ShmSegment::create owns what it creates: the file is removed when the object dies
// unless publish() was called, so a process that fails half-way leaves nothing behind
// (one killed outright leaves a segment whose header says LOADING and whose creator is
// dead, which readers refuse and the next creator replaces). ShmSegment::attach only
// maps. Move-only; the mapping itself may be read from any thread.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>

#include "common/status.h"

namespace hearth {

// $HEARTH_SHM_DIR, else /dev/shm.
std::filesystem::path shm_dir_default();

// Instance names: 1 to 64 of [A-Za-z0-9_-].
Status instance_name_check(std::string_view instance);

// dir / "hearth.<instance>.<what>".
std::filesystem::path segment_path(const std::filesystem::path& dir, std::string_view instance,
                                   std::string_view what);

struct ShmSpace {
  uint64_t free_bytes = 0;   // what an unprivileged writer may still use
  uint64_t total_bytes = 0;
};
Result<ShmSpace> shm_space(const std::filesystem::path& dir);

// "1.5 GiB", "640 MiB".
std::string human_bytes(uint64_t bytes);

inline constexpr uint64_t kHugePageBytes = 2ull << 20;

// The part of `bytes` that whole huge pages can hold.
constexpr uint64_t huge_page_floor(uint64_t bytes) { return bytes / kHugePageBytes * kHugePageBytes; }

// How many bytes of this process's mapping that starts at `address` its page tables map
// with 2 MiB entries (ShmemPmdMapped and FilePmdMapped in /proc/self/smaps).
uint64_t huge_mapped_bytes(const void* address);

struct HugePagePlan {
  // Placing stops once it has taken this long, the rest going on 4 KiB pages: memory that
  // a hypervisor must supply afresh can take seconds per GiB to place in huge pages,
  // where 4 KiB pages cost a fraction of that.
  std::chrono::milliseconds budget = std::chrono::milliseconds::max();
  // 0: front to back. Else the file holds runs `stride` bytes long from `origin` on (a KV
  // cache's layers): the 2 MiB holding each run's first byte go first, then the next
  // 2 MiB of each run, and so on, so that the same part of every run (the low KV blocks
  // of every layer) is placed before the rest of any; what no run holds goes last.
  uint64_t origin = 0;
  uint64_t stride = 0;
};

// The offsets of a segment's first `whole` bytes' 2 MiB pages in the order `plan` places
// them, each once.
std::vector<uint64_t> huge_page_order(uint64_t whole, const HugePagePlan& plan);

class ShmSegment {
 public:
  // Creates `path` (failing if it exists), reserves `bytes` of memory for it so that a
  // full directory fails here and not with SIGBUS later, and maps it read-write. With
  // `huge`, each whole 2 MiB of the file is first placed in a huge page where the kernel
  // allows (MADV_COLLAPSE, Linux 6.1+ on tmpfs, whatever shmem_enabled says short of
  // "deny"; a tmpfs mounted huge=always needs no asking), in the plan's order and time;
  // huge_bytes() says how much landed there, as the page tables show it, and
  // why_not_huge() why not all did.
  static Result<ShmSegment> create(const std::filesystem::path& path, uint64_t bytes,
                                   std::optional<HugePagePlan> huge = std::nullopt);
  // Maps an existing segment, whole. `populate` pre-faults every page.
  static Result<ShmSegment> attach(const std::filesystem::path& path, bool writable, bool populate = false);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  std::byte* data() const { return static_cast<std::byte*>(region_.get_address()); }
  uint64_t size() const { return region_.get_size(); }
  const std::filesystem::path& path() const { return path_; }

  // Keeps the file when this object dies (the segment is complete).
  void publish() { owned_ = false; }
  // For a segment created with huge pages: how many bytes landed in them, and the errno
  // of the kernel's refusal to collapse (0 when it did not refuse).
  uint64_t huge_bytes() const { return huge_bytes_; }
  int huge_error() const { return huge_error_; }
  // Why not every whole 2 MiB of such a segment is in a huge page, as a phrase for a log
  // line ("" when all are, or none were asked for); huge_unsupported() when its directory
  // cannot hold any.
  std::string why_not_huge() const;
  bool huge_unsupported() const { return huge_error_ == EINVAL && huge_bytes_ == 0; }

 private:
  boost::interprocess::mapped_region region_;
  std::filesystem::path path_;
  bool owned_ = false;
  uint64_t huge_bytes_ = 0;
  int huge_error_ = 0;
  bool huge_planned_ = false;
  std::optional<std::chrono::milliseconds> huge_budget_spent_;  // the budget that ran out
};

}  // namespace hearth
