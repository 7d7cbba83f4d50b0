// GPU tests skip with a message where no CUDA device is present (CI has none).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "diskformer/backend/cuda/gpu_forward.h"
#include "diskformer/backend/cuda_device.h"

#define DF_REQUIRE_GPU()                                                                   \
  do {                                                                                     \
    auto df_info_ = ::df::cuda::query_devices();                                           \
    if (df_info_.count == 0) GTEST_SKIP() << "no CUDA device: " << df_info_.why_none;      \
  } while (0)

namespace df::test {

// Greedy generation on the GPU, one token per step as the gold files were made: the prompt, then n choices.
inline std::vector<int32_t> greedy(cuda::GpuSession& s, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  EXPECT_TRUE(s.eval(prompt).ok());
  for (int i = 0; i < n; ++i) {
    out.push_back(s.argmax());
    if (i + 1 < n) {
      EXPECT_TRUE(s.eval(std::span(&out.back(), 1)).ok());
    }
  }
  return out;
}

}  // namespace df::test
