// What the emulated device's parts share (kernels/cuda/emu/*.cpp): the current device,
// errors and streams (the seed is in device.h). Not for use outside kernels/cuda/emu.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cuda_runtime_api.h"

namespace hearth::emu {

// This host thread's device (cudaSetDevice), and the number of emulated devices
// (HEARTH_EMU_DEVICES, default 1).
int current_device();
int device_count();

// Records `e` as the calling thread's last error when it is one; returns it.
cudaError_t record(cudaError_t e);
// A device's sticky error (cudaSuccess while it has none). Once set, every call on the
// device fails with it, as after a fault on a GPU.
cudaError_t sticky_error(int device);
// A kernel fault: prints `message` (with the seed) and makes `error` the device's sticky
// error.
void fault(int device, cudaError_t error, const std::string& message);

// Runs `op` on `stream` (nullptr: the current device's legacy default stream) after
// everything enqueued there before it; `op` is skipped once the device has a sticky error.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> op);
// The device a stream belongs to (the current device for the default stream).
int stream_device(cudaStream_t stream);
// Waits until everything enqueued on `stream` so far has run.
cudaError_t drain(cudaStream_t stream);
// Waits until everything enqueued on any stream of `device` so far has run.
void drain_device(int device);
// The index of the next kernel launched on `stream`, for its blocks' thread orders: per
// stream, so that a seed gives the same orders whatever other streams do meanwhile.
uint64_t next_launch_index(cudaStream_t stream);

// Runs a kernel's grid on the calling (stream) thread; kernels/cuda/emu/executor.cpp.
struct Grid {
  const char* name;
  dim3 grid, block;
  size_t shared_bytes;
  int device;
  uint64_t launch_index;
  std::function<void()> body;
};
void run_grid(const Grid& g);

}  // namespace hearth::emu

namespace hearth::emu {

// Device memory as the runtime knows it: ranges kernels and copies may use as device
// memory, charged against the device's size (HEARTH_EMU_MEMORY, default 8 GiB).
bool charge(int device, size_t bytes);
void uncharge(int device, size_t bytes);
void register_device_range(void* p, size_t bytes, int device);
void unregister_device_range(void* p);

// The driver entry points (kernels/cuda/emu/driver.cpp), for cudaGetDriverEntryPointByVersion.
void* driver_entry_point(const char* name);

}  // namespace hearth::emu
