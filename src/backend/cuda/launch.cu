#include "backend/cuda/launch.cuh"

namespace df::cuda {

namespace {
// Compiled as every kernel of the build is: its PTX version is theirs.
__global__ void probe_kernel() {}
}  // namespace

bool early_launch_supported() {
  // One device per process (the runs use device 0), so one answer.
  static const bool can = [] {
    if (device_attribute(cudaDevAttrComputeCapabilityMajor) < 9) return false;
    cudaFuncAttributes a{};
    DF_CUDA_CHECK(cudaFuncGetAttributes(&a, probe_kernel));
    return a.ptxVersion >= 90;
  }();
  return can;
}

}  // namespace df::cuda
