// GPU tests skip with a message where no CUDA device is present (CI has none).
#pragma once
#include <gtest/gtest.h>

#include "diskformer/backend/cuda_device.h"

#define DF_REQUIRE_GPU()                                                                   \
  do {                                                                                     \
    auto df_info_ = ::df::cuda::query_devices();                                           \
    if (df_info_.count == 0) GTEST_SKIP() << "no CUDA device: " << df_info_.why_none;      \
  } while (0)
