#include <vector>

#include "gpu/gpu_support.h"

TEST(CudaDevice, ReportsADeviceThisBuildRuns) {
  DF_REQUIRE_GPU();
  auto info = df::cuda::query_devices();
  EXPECT_GE(info.sm_major, df::cuda::kMinSmMajor) << info.name;
  EXPECT_GE(info.visible, info.count);
  EXPECT_TRUE(info.why_none.empty()) << info.why_none;
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

// Needs no GPU: what a user with an older GPU, or one the build was not made for, is told.
TEST(CudaDevice, NamesWhyADeviceCannotRunThisBuild) {
  EXPECT_EQ(df::cuda::unusable_reason(8, 6, true), "");
  EXPECT_EQ(df::cuda::unusable_reason(9, 0, true), "");
  const std::string old = df::cuda::unusable_reason(7, 5, true);
  EXPECT_NE(old.find("compute capability 7.5"), std::string::npos) << old;
  EXPECT_NE(old.find("8.0 or later"), std::string::npos) << old;
  const std::string missing = df::cuda::unusable_reason(10, 3, false);
  EXPECT_NE(missing.find("compute capability 10.3 has no code in this build"), std::string::npos) << missing;
  EXPECT_NE(missing.find("-DCMAKE_CUDA_ARCHITECTURES=103"), std::string::npos) << missing;
}
