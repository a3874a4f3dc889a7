// How GPU weight slabs travel between processes: hearth-loader --device serves each
// rank's slab at hearth.<instance>.slabs.sock (ipc/unix_socket.h), and an engine rank
// asks for its own. The slab itself is device memory; what travels is its description
// (SlabRecord) and, for the CUDA virtual memory API, the allocation's POSIX file
// descriptor (SCM_RIGHTS), which keeps the allocation alive while anyone holds it.
//
// Requests and replies are one JSON message each:
//   {"op":"get","rank":R}  -> {"ok":true,"slab":{record}} + the fd (none for "cuda-ipc")
//   {"op":"status"}        -> {"ok":true,"pid":P,"slabs":[{record, "adopted", "held_by",
//                              "importers"}]}
//   anything else          -> {"ok":false,"error":"..."}
// No CUDA here: the loader and engines do the device work (ipc/device_memory.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "common/status.h"
#include "common/unique_fd.h"
#include "ipc/unix_socket.h"
#include "ipc/weights_layout.h"

namespace hearth {

inline constexpr std::string_view kSlabHandleVmm = "vmm";            // cuMemCreate + POSIX fd
inline constexpr std::string_view kSlabHandleCudaIpc = "cuda-ipc";   // legacy cudaIpcGetMemHandle
inline constexpr std::string_view kSlabNamePrefix = "hearth-slab.";

// One rank's weights in device memory: a byte copy of that rank's data region of the
// weights segment (rank_offset..+rank_bytes), so a tensor's device address is the slab's
// base plus its manifest entry's device_offset.
struct SlabRecord {
  int rank = 0;
  int device = 0;              // the CUDA ordinal in the loader's view
  std::string device_uuid;     // "GPU-" + 36 characters: the same GPU in every process's view
  int compute_capability = 0;  // 90 for sm_90
  uint64_t bytes = 0;          // the allocation (a multiple of the device's granularity)
  uint64_t data_bytes = 0;     // the rank's data region, copied at offset 0
  std::string handle{kSlabHandleVmm};
  Fingerprint weights;         // the weights segment's fingerprint
  std::string ipc_handle;      // "cuda-ipc" only: the 64-byte handle as 128 hex digits
  bool operator==(const SlabRecord&) const = default;
};

boost::json::object slab_record_json(const SlabRecord& r);
Result<SlabRecord> slab_record_from_json(const boost::json::value& v);

// The name a "vmm" slab's fd is kept under in an fd store (systemd's FDNAME: at most 255
// characters, no ':' or control characters), and back. The name carries the whole record
// so that a restarted loader can check a kept fd before adopting it.
std::string slab_store_name(const SlabRecord& r);
Result<SlabRecord> slab_record_from_store_name(std::string_view name);

std::filesystem::path slab_socket_path(const std::filesystem::path& shm_dir, std::string_view instance);

// A slab as the loader serves it.
struct ServedSlab {
  SlabRecord record;
  UniqueFd fd;                       // the exported fd ("vmm"); empty for "cuda-ipc"
  bool adopted = false;              // taken back from an fd store, not copied again
  std::vector<std::string> held_by;  // fd stores that keep it ("hearth serve", "systemd")
};

// The loader's side: answers "get" and "status" on its own thread until destroyed.
class SlabServer {
 public:
  static Result<std::unique_ptr<SlabServer>> start(const std::filesystem::path& path, std::vector<ServedSlab> slabs);

  // The status reply's "slabs" (what `hearth status` prints).
  boost::json::array describe() const;

 private:
  struct Importer {
    pid_t pid;
    uint64_t start_time;
  };
  SlabServer() = default;
  void handle(int connection, FdMessage& request, const PeerCredentials& peer);

  mutable std::mutex mu_;
  std::vector<ServedSlab> slabs_;
  std::vector<std::vector<Importer>> importers_;  // per slab
  std::unique_ptr<UnixServer> server_;            // last: stops before the slabs go
};

struct FetchedSlab {
  SlabRecord record;
  UniqueFd fd;  // empty for "cuda-ipc"
};

// An engine's side: rank's slab from the loader at `path`. nullopt when no loader serves
// slabs there (it was started without --device); an error when it answers with one.
Result<std::optional<FetchedSlab>> slab_fetch(const std::filesystem::path& path, int rank,
                                              std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// The loader's status reply (for `hearth status`); kNotFound when none listens.
Result<boost::json::object> slab_status(const std::filesystem::path& path,
                                        std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

}  // namespace hearth
