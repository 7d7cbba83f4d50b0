#include <vector>

#include "gpu/gpu_support.h"

TEST(CudaDevice, ReportsAnSm90OrNewerDevice) {
  DF_REQUIRE_GPU();
  auto info = df::cuda::query_devices();
  EXPECT_GE(info.sm_major, 9) << info.name;
  EXPECT_GT(info.total_bytes, 0u);
}

TEST(CudaDevice, KernelBuiltHereRunsThere) {
  DF_REQUIRE_GPU();
  std::vector<float> v(1000);
  for (int i = 0; i < 1000; ++i) v[i] = static_cast<float>(i);
  std::string why;
  ASSERT_TRUE(df::cuda::selftest_add_one(v.data(), 1000, &why)) << why;
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(v[i], static_cast<float>(i) + 1.0f);
}
