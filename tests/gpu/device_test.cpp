#include <cstring>
#include <vector>

#include "diskformer/cudart/buffer.h"
#include "diskformer/cudart/pinned.h"

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

// Pinned blocks of every size start where asked: the driver suballocates small ones off the page, which O_DIRECT
// reads into a small model's slot pool cannot take. Each block is written whole and the copy to the GPU sees it.
TEST(CudaDevice, PinnedBlocksOfAnySizeStartOnThePage) {
  DF_REQUIRE_GPU();
  df::io::HostAllocator& a = df::cuda::pinned_host_allocator();
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t bytes : {size_t(100), size_t(8192), size_t(200 << 10), size_t(3 << 20), size_t(24 << 10)}) {
    auto p = a.allocate(bytes, 4096);
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 4096, 0u) << bytes << " bytes";
    std::memset(*p, int(bytes % 251), bytes);
    blocks.emplace_back(*p, bytes);
  }
  for (auto [p, bytes] : blocks) {
    df::cuda::DeviceBuffer d(bytes);
    d.upload(p, bytes);
    std::vector<uint8_t> back(bytes);
    d.download(back.data(), bytes);
    EXPECT_EQ(back, std::vector<uint8_t>(bytes, uint8_t(bytes % 251))) << bytes << " bytes";
    a.deallocate(p, bytes);
  }
}
