// Device-only checks of the pieces under the resident GPU path and GPU groups: shared
// device memory (ipc/device_memory.h) and the NCCL communicator. Skipped without a device.
#include <cuda_runtime.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/version.h"
#include "kernels/cuda/device_info.h"
#include "ipc/device_memory.h"
#if HEARTH_HAVE_NCCL
#include "engine/tp/nccl_communicator.h"
#endif

namespace hearth {
namespace {

namespace cu = kernels::cuda;

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cu::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine: this test needs one";
  }
};

TEST_F(DeviceTest, DeviceIdentityIsNvidiaSmisUuid) {
  auto id = device_identity(0);
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  EXPECT_EQ(id->uuid.size(), 40u) << id->uuid;
  EXPECT_TRUE(id->uuid.starts_with("GPU-")) << id->uuid;
  EXPECT_EQ(id->compute_capability, cu::compute_capability(0));
}

TEST_F(DeviceTest, AVmmSlabExportedAsAnFdMapsAgainWithItsBytes) {
  std::string why;
  if (!vmm_fd_supported(0, &why)) GTEST_SKIP() << why;
  constexpr size_t kBytes = 3u << 20;
  auto slab = SharedDeviceMemory::allocate(0, kBytes, "a test slab");
  ASSERT_TRUE(slab.is_ok()) << slab.status().to_string();
  EXPECT_GE(slab->bytes(), kBytes);
  std::vector<uint32_t> pattern(kBytes / 4);
  std::iota(pattern.begin(), pattern.end(), 7u);
  ASSERT_EQ(cudaMemcpy(slab->data(), pattern.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  auto fd = slab->export_fd();
  ASSERT_TRUE(fd.is_ok()) << fd.status().to_string();
  auto again = SharedDeviceMemory::import_fd(0, fd->get(), slab->bytes());
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_NE(again->data(), slab->data());
  std::vector<uint32_t> back(pattern.size());
  ASSERT_EQ(cudaMemcpy(back.data(), again->data(), kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, pattern);
  // The allocation outlives the first mapping while the second holds it.
  *slab = SharedDeviceMemory();
  ASSERT_EQ(cudaMemcpy(back.data(), again->data(), kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, pattern);
  // A slab smaller than claimed does not map.
  auto fd2 = again->export_fd();
  ASSERT_TRUE(fd2.is_ok());
  EXPECT_FALSE(SharedDeviceMemory::import_fd(0, fd2->get(), again->bytes() * 4).is_ok());
}

TEST_F(DeviceTest, LegacyAllocationsHaveAnIpcHandle) {
  auto slab = SharedDeviceMemory::allocate_legacy(0, 1u << 20, "a legacy test slab");
  ASSERT_TRUE(slab.is_ok()) << slab.status().to_string();
  EXPECT_TRUE(slab->legacy());
  auto handle = slab->legacy_handle_hex();
  ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
  EXPECT_EQ(handle->size(), 128u);
  EXPECT_FALSE(slab->export_fd().is_ok());
  EXPECT_FALSE(SharedDeviceMemory::import_legacy(0, "00", 1u << 20).is_ok());
}

#if HEARTH_HAVE_NCCL
TEST_F(DeviceTest, NcclGroupOfOneReducesBroadcastsAndWaits) {
  auto comm = make_nccl_communicator({.rank = 0, .size = 1, .device = 0});
  unsigned char id[128];
  ASSERT_TRUE(nccl_unique_id(id).is_ok());
  const Status began = comm->begin_epoch(1, id, std::chrono::milliseconds(20000));
  ASSERT_TRUE(began.is_ok()) << began.to_string();
  constexpr int kN = 1000;
  std::vector<float> host(kN);
  std::iota(host.begin(), host.end(), 0.5f);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, kN * sizeof(float)), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_TRUE(comm->all_reduce_sum(dev, kN, DeviceQueue{stream}).is_ok());
  EXPECT_TRUE(comm->broadcast(dev, kN * sizeof(float), 0, DeviceQueue{stream}).is_ok());
  EXPECT_FALSE(comm->broadcast(dev, 4, 1, DeviceQueue{stream}).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> back(kN);
  ASSERT_EQ(cudaMemcpy(back.data(), dev, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_TRUE(comm->barrier().is_ok());
  // A new epoch is a new communicator.
  ASSERT_TRUE(nccl_unique_id(id).is_ok());
  EXPECT_TRUE(comm->begin_epoch(2, id, std::chrono::milliseconds(20000)).is_ok());
  EXPECT_TRUE(comm->all_reduce_sum(dev, kN, DeviceQueue{stream}).is_ok());
  cudaStreamDestroy(stream);
  cudaFree(dev);
}

TEST_F(DeviceTest, NcclEpochWhosePeerNeverComesFailsWithinItsTimeout) {
  auto comm = make_nccl_communicator({.rank = 0, .size = 2, .device = 0});
  unsigned char id[128];
  ASSERT_TRUE(nccl_unique_id(id).is_ok());
  const auto start = std::chrono::steady_clock::now();
  const Status st = comm->begin_epoch(1, id, std::chrono::milliseconds(1500));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("could not form"), std::string::npos) << st.message();
  EXPECT_LT(took, std::chrono::seconds(10));
  float x = 0;
  EXPECT_EQ(comm->all_reduce_sum(&x, 1, {}).code(), ErrorCode::kUnavailable);
}

// A group of two whose rank 1 forms the epoch and then never reduces: rank 0's
// all-reduce is enqueued and stays pending on its stream until the watchdog's
// collective timeout aborts the communicator, which ends the collective: the barrier
// fails saying so and the stream drains instead of hanging.
TEST_F(DeviceTest, AnAbortedCommunicatorEndsItsPendingCollective) {
  // Two ranks on two GPUs; the emulated device lets both share device 0.
  const int second = cu::device_count() >= 2 ? 1 : (cuda_emulated() ? 0 : -1);
  if (second < 0) GTEST_SKIP() << "two CUDA devices are needed, this machine has one";
  auto comm0 = make_nccl_communicator({.rank = 0, .size = 2, .device = 0,
                                       .collective_timeout = std::chrono::milliseconds(500)});
  auto comm1 = make_nccl_communicator({.rank = 1, .size = 2, .device = second});
  unsigned char id[128];
  ASSERT_TRUE(nccl_unique_id(id).is_ok());
  Status began1;
  std::thread joiner([&] { began1 = comm1->begin_epoch(1, id, std::chrono::milliseconds(20000)); });
  const Status began0 = comm0->begin_epoch(1, id, std::chrono::milliseconds(20000));
  joiner.join();
  ASSERT_TRUE(began0.is_ok()) << began0.to_string();
  ASSERT_TRUE(began1.is_ok()) << began1.to_string();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 64 * sizeof(float)), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(comm0->all_reduce_sum(dev, 64, DeviceQueue{stream}).is_ok());
  const Status waited = comm0->barrier();
  EXPECT_FALSE(waited.is_ok());
  EXPECT_NE(waited.message().find("aborted"), std::string::npos) << waited.message();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << "the aborted collective still holds the stream";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  cudaStreamDestroy(stream);
  cudaFree(dev);
}
#endif

}  // namespace
}  // namespace hearth
