#include "kernels/cuda/device_info.h"

#include <gtest/gtest.h>

namespace hearth::kernels::cuda {
namespace {

TEST(CudaDeviceTest, ReportsDevicesOrNone) {
  const int n = device_count();
  ASSERT_GE(n, 0);
  if (n == 0) GTEST_SKIP() << "no CUDA device on this machine";
  for (int i = 0; i < n; ++i) {
    const int cc = compute_capability(i);
    EXPECT_GE(cc, 50) << "device " << i;
    std::printf("CUDA device %d: compute capability %d.%d\n", i, cc / 10, cc % 10);
  }
  EXPECT_EQ(compute_capability(n), -1) << "an index past the last device is refused";
}

}  // namespace
}  // namespace hearth::kernels::cuda
