// Where hearth-loader keeps a duplicate of each GPU slab's fd so that the device
// allocation outlives the loader (a VMM allocation lives while any fd or mapping refers
// to it), and where a restarted loader takes them back instead of copying the weights
// to the device again:
//   - systemd's fd store (FDSTORE=1 / FDNAME=, given back as $LISTEN_FDS with
//     $LISTEN_FDNAMES on the next start; the unit's FileDescriptorStoreMax= must allow it),
//     used when $NOTIFY_SOCKET is set;
//   - the holder of `hearth serve` (FdHolder, at $HEARTH_FD_HOLDER), which keeps them
//     for the loader it supervises and for its successors.
// Holder protocol, one JSON message per connection:
//   {"op":"keep","name":N} + 1 fd -> {"ok":true}    (replaces one kept under N)
//   {"op":"forget","name":N}      -> {"ok":true}
//   {"op":"list"}                 -> {"ok":true,"names":[...]} + one fd per name
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "ipc/unix_socket.h"

namespace hearth {

inline constexpr std::string_view kFdHolderEnv = "HEARTH_FD_HOLDER";

struct KeptFd {
  std::string name;
  UniqueFd fd;
};

class FdStore {
 public:
  virtual ~FdStore() = default;
  // "systemd", "hearth serve": what `hearth status` says holds a slab.
  virtual std::string_view kind() const = 0;
  // Keeps a duplicate of `fd` under `name` (replacing one kept under the same name).
  virtual Status keep(const std::string& name, int fd) = 0;
  virtual Status forget(const std::string& name) = 0;
  // The descriptors kept by earlier loaders whose names start with `prefix`.
  virtual Result<std::vector<KeptFd>> kept(std::string_view prefix) = 0;
};

// The stores this process's environment offers (none, one or both). The systemd store
// takes $LISTEN_FDS at construction (once per process), so call this once, early.
std::vector<std::unique_ptr<FdStore>> fd_stores_from_environment();

// The store of the holder listening at `path`.
std::unique_ptr<FdStore> fd_holder_store(const std::filesystem::path& path);

std::filesystem::path fd_holder_path(const std::filesystem::path& shm_dir, std::string_view instance);

// `hearth serve`'s side: keeps what loaders give it, on its own thread, until destroyed.
class FdHolder {
 public:
  static constexpr size_t kMaxKept = kMaxMessageFds;
  static Result<std::unique_ptr<FdHolder>> start(const std::filesystem::path& path);
  std::vector<std::string> names() const;
  const std::filesystem::path& path() const { return server_->path(); }

 private:
  FdHolder() = default;
  void handle(int connection, FdMessage& request);

  mutable std::mutex mu_;
  std::vector<KeptFd> kept_;
  std::unique_ptr<UnixServer> server_;  // last: stops before kept_ goes
};

}  // namespace hearth
